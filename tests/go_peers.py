"""Running ``tests/interop/gopeers`` (franz-go, IBM/sarama and segmentio/kafka-go
from the Go module proxy; the ``go_peers`` fixture builds it) and checking what it
prints against what it wrote.

Its records come as dicts: ``round``, ``key``, ``value``, ``headers`` (pairs),
``partition``, ``offset`` (a delivery report's; -1 when the client was told none,
as with acks=0) and, in the transactional mode, ``txn`` (``commit``/``abort``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

#: Every codec, each acks setting: one producer per round.
ROUNDS = "none:all,gzip:1,snappy:0,lz4:all,zstd:all"
#: The clients' own names (-client), and which of them have idempotent producers.
CLIENTS = ("franz-go", "sarama", "kafka-go")
IDEMPOTENT = frozenset({"franz-go", "sarama"})


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def run_go_peer(binary: Path, *args: str, timeout: float = 90) -> dict[str, Any]:
    """Run ``gopeers`` with ``args`` (its deadline a little under ``timeout``);
    its JSON result."""
    done = subprocess.run(
        [str(binary), "-timeout", f"{int(timeout) - 10}s", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def round_trip_args(client: str, servers: str, topic: str, group: str, n: int) -> list[str]:
    args = ["-client", client, "-brokers", servers, "-topic", topic, "-group", group]
    args += ["-n", str(n), "-rounds", ROUNDS, "-prefix", client]
    return [*args, "-idempotent"] if client in IDEMPOTENT else args


def acked(rounds: str, record: dict[str, Any]) -> bool:
    """Whether ``record``'s round asked for an answer (acks other than 0)."""
    return not rounds.split(",")[record["round"]].endswith(":0")


def check_read_back(result: dict[str, Any], rounds: str = ROUNDS) -> None:
    """What the client read is what it wrote: every value once, with its key and
    headers, on the partition its report named and (acks 1 or all) at the offset
    it named; each partition read in order from 0 without a gap (nothing else
    writes the topic); the group's committed offsets are the partitions' ends."""
    produced, consumed = result["produced"], result["consumed"]
    written = {r["value"]: r for r in produced}
    assert len(written) == len(produced)
    read = Counter(r["value"] for r in consumed)
    missing, twice = set(written) - set(read), {v for v, n in read.items() if n > 1}
    assert not missing and not twice and set(read) == set(written), (
        f"read {len(consumed)} of {len(produced)}: {len(missing)} missing {sorted(missing)[:5]}, "
        f"{len(twice)} twice {sorted(twice)[:5]}, {len(set(read) - set(written))} never written"
    )
    for r in consumed:
        w = written[r["value"]]
        assert (r["key"], r["headers"]) == (w["key"], w["headers"])
        # kafka-go's report of an acks=0 record names no partition (-1).
        assert r["partition"] == w["partition"] or w["partition"] == -1, (r, w)
        if acked(rounds, w):
            assert r["offset"] == w["offset"], (r, w)
        else:
            assert w["offset"] == -1
    ends: dict[int, int] = {}
    for p in {r["partition"] for r in consumed}:
        offsets = [r["offset"] for r in consumed if r["partition"] == p]
        assert offsets == list(range(len(offsets))), (p, offsets)
        ends[p] = len(offsets)
    assert {int(p): o for p, o in result["committed"].items()} == ends
    # One partitioner: a key always goes to the same partition.
    placed = {(r["key"], r["partition"]) for r in consumed}
    assert len(placed) == len({k for k, _ in placed})


def txn_args(client: str, servers: str, topic: str) -> list[str]:
    """gopeers' arguments for three transactions of 20 records on ``topic`` (2 partitions)."""
    args = ["-client", client, "-mode", "txn", "-brokers", servers, "-topic", topic]
    args += ["-partitions", "2", "-n", "20", "-txid", fresh("go-tx"), "-group", fresh("go-txg")]
    return [*args, "-rounds", "lz4:all"]


def check_transactions(result: dict[str, Any], *, routed: bool = False) -> None:
    """gopeers' committed, aborted and committed transactions of 20 records,
    as read: read_committed the committed ones, read_uncommitted all, with
    their keys and headers, each at its report's place, a control record
    between two transactions' records. ``routed`` (through the proxy, which
    moved records): a report may name no offset (a negative one,
    docs/proxy.md), and the places are checked where one is named."""
    produced = result["produced"]
    assert [r["txn"] for r in produced] == ["commit"] * 20 + ["abort"] * 20 + ["commit"] * 20
    written = {r["value"]: r for r in produced}
    named = [(r["partition"], r["offset"]) for r in produced if r["offset"] >= 0]
    assert len(written) == 60 and len(set(named)) == len(named)
    assert routed or len(named) == 60
    # read_committed: the committed records only; read_uncommitted: all.
    committed = {r["value"] for r in produced if r["txn"] == "commit"}
    assert sorted(r["value"] for r in result["consumed"]) == sorted(committed)
    assert sorted(r["value"] for r in result["uncommitted"]) == sorted(written)
    for read in (result["consumed"], result["uncommitted"]):
        for r in read:
            w = written[r["value"]]
            assert (r["key"], r["headers"]) == (w["key"], w["headers"])
            if w["offset"] >= 0:
                assert (r["partition"], r["offset"]) == (w["partition"], w["offset"])
    # The control records take offsets of their own, so no two transactions'
    # records are adjacent across a marker.
    for p in {r["partition"] for r in result["uncommitted"]}:
        by_round = [
            [
                r["offset"]
                for r in result["uncommitted"]
                if r["partition"] == p and written[r["value"]]["round"] == i
            ]
            for i in range(3)
        ]
        for earlier, later in itertools.pairwise(by_round):
            if earlier and later:
                assert min(later) >= max(earlier) + 2  # at least one marker between
