"""``trafka consume -e``: each partition read up to the end it has when the
command gets it, and never fetched at or past that end.

A fetch at a partition's end waits ``fetch.max.wait.ms`` at the broker for
records the command will not print, and the consumer's close waits for it on
the same connection (issue #60). The tests look at what the consumer asks the
broker for (each Fetch's offsets, through the fetcher that builds them), what
it prints, and with a group what it commits; none measures time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from unique_names import names

from trafka.brokerlite import RunningBroker
from trafka.sdk import ConsumerConfig, TopicPartition
from trafka.sdk.fetcher import Fetcher
from trafka.tools.cli import main
from trafka.tools.cli_consume_end import ReadToEnd

pytestmark = pytest.mark.timeout(60)


def run(broker: RunningBroker, *args: str, input: bytes | None = None) -> Result:
    result = CliRunner().invoke(main, [*args, "-b", broker.bootstrap_servers], input=input)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int, int]]]:
    """(topic, partition, offset) of every partition of every Fetch the
    consumers of this test send (a session's close names none)."""
    asked: list[tuple[str, int, int]] = []
    build = Fetcher.build_fetch

    def spy(self: Fetcher, *args: Any, **kwargs: Any) -> Any:
        request, offsets = build(self, *args, **kwargs)
        asked.extend((tp.topic, tp.partition, offset) for tp, offset in offsets.items())
        return request, offsets

    monkeypatch.setattr(Fetcher, "build_fetch", spy)
    yield asked


def _committed(broker: RunningBroker, group: str) -> dict[int, int]:
    (desc,) = json.loads(run(broker, "groups", "describe", group, "--json").stdout)
    return {p["partition"]: p["current_offset"] for p in desc["partitions"]}


def test_everything_up_to_the_ends_is_printed_and_no_fetch_asks_past_them(
    broker: RunningBroker, fetched: list[tuple[str, int, int]]
) -> None:
    topic = f"end-{next(names)}"
    run(broker, "topics", "create", topic, "-p", "3")
    run(broker, "produce", topic, "-p", "0", "-q", input=b"a\nb\nc\n")
    run(broker, "produce", topic, "-p", "2", "-q", input=b"x\n")
    res = run(broker, "consume", topic, "-e", "-f", "%p:%o:%s\n")
    assert sorted(res.stdout.splitlines()) == ["0:0:a", "0:1:b", "0:2:c", "2:0:x"]
    assert res.stderr.splitlines()[-1] == "4 records consumed"
    ends = {0: 3, 1: 0, 2: 1}
    asked = [(p, offset) for t, p, offset in fetched if t == topic]
    assert asked and all(offset < ends[p] for p, offset in asked), asked
    assert {p for p, _ in asked} == {0, 2}  # the empty partition is never fetched

    # -o end: nothing to print, nothing fetched; -o -1: the last record of each.
    fetched.clear()
    assert run(broker, "consume", topic, "-e", "-q", "-o", "end").stdout == ""
    assert fetched == []
    res = run(broker, "consume", topic, "-e", "-q", "-o", "-1", "-f", "%p:%s\n")
    assert sorted(res.stdout.splitlines()) == ["0:c", "2:x"]
    assert sorted((p, o) for _, p, o in fetched) == [(0, 2), (2, 0)]


def test_a_group_commits_where_the_data_ends(
    broker: RunningBroker, fetched: list[tuple[str, int, int]]
) -> None:
    """With -G the member reads from the group's commits to the ends and
    commits those ends; a member with nothing left to read fetches nothing."""
    topic, group = f"end-{next(names)}", f"g-{next(names)}"
    run(broker, "topics", "create", topic, "-p", "2")
    run(broker, "produce", topic, "-p", "0", "-q", input=b"a\nb\n")
    run(broker, "produce", topic, "-p", "1", "-q", input=b"c\n")
    res = run(broker, "consume", topic, "-G", group, "-e", "-q")
    assert sorted(res.stdout.split()) == ["a", "b", "c"]
    assert _committed(broker, group) == {0: 2, 1: 1}
    assert all(offset < {0: 2, 1: 1}[p] for t, p, offset in fetched if t == topic), fetched

    fetched.clear()
    assert run(broker, "consume", topic, "-G", group, "-e", "-q").stdout == ""
    assert [f for f in fetched if f[0] == topic] == []
    assert _committed(broker, group) == {0: 2, 1: 1}

    run(broker, "produce", topic, "-p", "1", "-q", input=b"d\ne\n")
    res = run(broker, "consume", topic, "-G", group, "-e", "-q")
    assert res.stdout.split() == ["d", "e"]
    assert _committed(broker, group) == {0: 2, 1: 3}
    assert sorted((p, o) for t, p, o in fetched if t == topic) == [(1, 1)]


def test_partition_ends_asked_for_are_still_reported(broker: RunningBroker) -> None:
    """-X enable.partition.eof=true: every partition's end is said on stderr,
    an empty partition's too (which needs a fetch answer: read as before)."""
    topic = f"end-{next(names)}"
    run(broker, "topics", "create", topic, "-p", "2")
    run(broker, "produce", topic, "-p", "1", "-q", input=b"a\n")
    res = run(broker, "consume", topic, "-e", "-q", "-X", "enable.partition.eof=true")
    assert res.stdout == "a\n"
    assert sorted(line for line in res.stderr.splitlines() if "reached the end" in line) == [
        f"% reached the end of {topic} [0] at offset 0",
        f"% reached the end of {topic} [1] at offset 1",
    ]


class _Consumer:
    """What ReadToEnd uses of a consumer, with the answers given."""

    def __init__(
        self,
        ends: dict[TopicPartition, Any],
        positions: dict[TopicPartition, int],
        reset: str = "earliest",
        isolation: str = "read_uncommitted",
    ):
        self.ends = ends
        self.positions = positions
        self.config = ConsumerConfig(auto_offset_reset=reset, isolation_level=isolation)
        self.paused: set[TopicPartition] = set()
        self.seeks: list[tuple[TopicPartition, int, int | None]] = []
        self.lags: dict[TopicPartition, int | None] = {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.positions)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        answer = self.ends[tps[0]]
        if isinstance(answer, Exception):
            raise answer
        return {tps[0]: answer}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 1 for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def seek(self, tp: TopicPartition, offset: int, *, until: int | None = None) -> None:
        self.seeks.append((tp, offset, until))

    def lag(self, tp: TopicPartition) -> int | None:
        return self.lags.get(tp)


def test_a_partition_without_a_known_end_is_read_to_the_end_fetches_report() -> None:
    """Each held partition is resumed, bounded by its end when the lookup
    answers; one whose lookup fails (out of reach), or whose position is past
    its end with auto.offset.reset=none (its fetch is out of range and raises),
    is read to the end its fetch answers report (lag 0), as without -e's bounds."""
    from trafka.sdk import ApiTimeoutError

    a, b, c = (TopicPartition("t", p) for p in range(3))
    consumer = _Consumer(
        ends={a: 5, b: ApiTimeoutError("no leader"), c: 2},
        positions={a: 1, b: 0, c: 9},
        reset="none",
    )

    async def main() -> list[bool]:
        seen = []
        async with anyio.create_task_group() as tg:
            to_end = ReadToEnd(consumer, tg)
            to_end.hold([a, b, c])
            assert consumer.paused == {a, b, c}
            seen.append(await to_end.at_end({}))
            with to_end.polling():  # cancelled once every held partition is settled
                to_end.bound([a, b, c])
                await anyio.sleep_forever()
        assert consumer.paused == set()
        assert consumer.seeks == [(a, 1, 5)]
        seen.append(await to_end.at_end({}))
        consumer.positions[a] = 5
        consumer.lags = {b: 0, c: 3}
        seen.append(await to_end.at_end({}))
        consumer.lags[c] = 0
        seen.append(await to_end.at_end({}))
        consumer.lags[b] = None
        seen.append(await to_end.at_end({b: "out of reach"}))
        return seen

    assert anyio.run(main) == [False, False, False, True, True]


@pytest.mark.parametrize(
    ("reset", "isolation", "seek"),
    [
        # Kafka's consumer resets a position its fetch finds out of range (past
        # the log end: OFFSET_OUT_OF_RANGE) as its auto.offset.reset config says
        # (Kafka's consumer configs, auto.offset.reset): -e finds where that puts it.
        ("earliest", "read_uncommitted", 1),
        ("latest", "read_uncommitted", 2),
        # Under read_committed the end found is the last stable offset, which
        # a position may pass without being out of range: read as before.
        ("earliest", "read_committed", None),
    ],
)
def test_a_position_past_the_end_starts_where_auto_offset_reset_puts_it(
    reset: str, isolation: str, seek: int | None
) -> None:
    tp = TopicPartition("t", 0)
    consumer = _Consumer(ends={tp: 2}, positions={tp: 9}, reset=reset, isolation=isolation)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            to_end = ReadToEnd(consumer, tg)
            to_end.hold([tp])
            with to_end.polling():
                to_end.bound([tp])
                await anyio.sleep_forever()

    anyio.run(main)
    assert consumer.seeks == ([] if seek is None else [(tp, seek, 2)])
    assert consumer.paused == set()


def test_an_offset_past_the_end_reads_from_the_beginning_and_stops_at_the_end(
    broker: RunningBroker, fetched: list[tuple[str, int, int]]
) -> None:
    """-o 1000 on a partition of two records: the CLI's reset (earliest) puts
    it at the start; both records are printed and no fetch asks at or past the end."""
    topic = f"end-{next(names)}"
    run(broker, "topics", "create", topic, "-p", "1")
    run(broker, "produce", topic, "-q", input=b"a\nb\n")
    res = run(broker, "consume", topic, "-e", "-q", "-o", "1000")
    assert res.stdout.split() == ["a", "b"]
    asked = [offset for t, _, offset in fetched if t == topic]
    assert asked and all(offset < 2 for offset in asked), asked
