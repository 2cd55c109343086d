"""``trafka share-consume`` and the share-group side of ``trafka groups`` against an
in-process brokerlite.

The broker runs on its own thread; commands run through click's CliRunner, and
the tests of several members, signals and pipes run the real entry point in
subprocesses.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from typing import IO, Any

import pytest
from click.testing import CliRunner, Result
from terminal_sigint import sigint_as_at_a_terminal
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.sdk import ShareRecord
from trafka.tools.cli import main
from trafka.tools.cli_share import share_record_to_json

pytestmark = pytest.mark.timeout(60)

CLI = [sys.executable, "-m", "trafka.tools.cli"]


def fresh(prefix: str) -> str:
    return f"share-{prefix}-{next(_names)}"


def run(broker: RunningBroker, *args: str, input: bytes | None = None, ok: bool = True) -> Result:
    result = CliRunner().invoke(main, [*args, "-b", broker.bootstrap_servers], input=input)
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def share_topic(broker: RunningBroker, partitions: int, values: list[str]) -> tuple[str, str]:
    """A new topic holding ``values`` and a share group that starts at its beginning
    (set with ``groups set-config``)."""
    topic, group = fresh("t"), fresh("g")
    run(broker, "topics", "create", topic, "-p", str(partitions))
    if values:
        run(broker, "produce", topic, "-q", input="".join(v + "\n" for v in values).encode())
    res = run(broker, "groups", "set-config", group, "share.auto.offset.reset=earliest")
    assert f"set share.auto.offset.reset=earliest for group {group}" in res.stderr
    return topic, group


def spawn(broker: RunningBroker, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, *args, "-b", broker.bootstrap_servers],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=sigint_as_at_a_terminal,
    )


def read_lines(stream: IO[bytes] | None, n: int) -> list[bytes]:
    assert stream is not None
    return [stream.readline() for _ in range(n)]


# -- pure ------------------------------------------------------------------------------------


def test_share_record_to_json_adds_the_delivery_count() -> None:
    rec = ShareRecord("t", 1, 7, 99, b"k", b"\xff", (("h", b"v"),), 0, 3, 2)
    assert share_record_to_json(rec) == {
        "topic": "t",
        "partition": 1,
        "offset": 7,
        "timestamp": 99,
        "timestamp_type": "CreateTime",
        "key": "k",
        "value": {"base64": "/w=="},
        "headers": [["h", "v"]],
        "delivery_count": 2,
    }


# -- group configs ---------------------------------------------------------------------------


def test_group_configs_set_delete_and_validation(broker: RunningBroker) -> None:
    group = fresh("cfg")
    run(broker, "groups", "set-config", group, "share.auto.offset.reset=earliest")
    run(
        broker, "groups", "set-config", group,
        "share.record.lock.duration.ms=15000", "share.isolation.level=read_committed",
    )  # fmt: skip
    (desc,) = json.loads(run(broker, "groups", "configs", group, "--json").stdout)
    configs = {c["name"]: (c["value"], c["source"]) for c in desc["configs"]}
    assert configs["share.auto.offset.reset"] == ("earliest", "group")
    assert configs["share.record.lock.duration.ms"] == ("15000", "group")
    assert configs["share.isolation.level"] == ("read_committed", "group")
    assert configs["share.delivery.count.limit"][1] == "default"
    text = run(broker, "groups", "configs", group).stdout
    assert f"Group: {group}" in text and "SOURCE" in text
    assert any(line.split() == ["share.auto.offset.reset", "earliest", "group"] for line in
               text.splitlines())  # fmt: skip

    res = run(broker, "groups", "set-config", group, "--delete", "share.isolation.level")
    assert f"deleted share.isolation.level of group {group}" in res.stderr
    only = json.loads(run(broker, "groups", "configs", group, "--overrides", "--json").stdout)
    assert {c["name"]: c["value"] for c in only[0]["configs"]} == {
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": "15000",
    }

    # The broker's validation, in one line; nothing of the request is applied.
    bad = run(
        broker, "groups", "set-config", group,
        "share.auto.offset.reset=sometimes", "share.record.lock.duration.ms=20000", ok=False,
    )  # fmt: skip
    assert bad.exit_code == 1
    assert "refused the change (INVALID_CONFIG)" in bad.output
    assert "share.auto.offset.reset: 'sometimes': must be" in bad.output
    assert "Traceback" not in bad.output
    low = run(broker, "groups", "set-config", group, "share.record.lock.duration.ms=5", ok=False)
    assert low.exit_code == 1 and "share.record.lock.duration.ms: 5 is below 1000" in low.output
    unknown = run(broker, "groups", "set-config", group, "share.no.such=1", ok=False)
    assert unknown.exit_code == 1 and "unknown group config 'share.no.such'" in unknown.output
    (after,) = json.loads(run(broker, "groups", "configs", group, "--json").stdout)
    assert {c["name"]: c["value"] for c in after["configs"]}["share.record.lock.duration.ms"] == (
        "15000"
    )

    for args in ([group], [group, "novalue"], [group, "a=1", "--delete", "a"]):
        res = run(broker, "groups", "set-config", *args, ok=False)
        assert res.exit_code == 2, res.output


# -- share-consume ---------------------------------------------------------------------------


def test_share_consume_prints_earlier_records_and_accepts_them(broker: RunningBroker) -> None:
    values = [f"job {i}" for i in range(12)]
    topic, group = share_topic(broker, 2, values)
    res = run(broker, "share-consume", topic, "-G", group, "-c", "12", "-J")
    records = json_lines(res.stdout)
    assert sorted(r["value"] for r in records) == sorted(values)
    assert all(r["delivery_count"] == 1 and r["topic"] == topic for r in records)
    assert {r["partition"] for r in records} <= {0, 1}
    assert "12 records consumed and accepted" in res.stderr

    # Accepted and committed: a later member gets only what was produced since.
    run(broker, "produce", topic, "-K", ":", "-Z", "-p", "1", "-q", input=b"k1:after\n:null-key\n")
    res = run(broker, "share-consume", topic, "-G", group, "-c", "2", "-K", "=", "-Z", "NULL")
    assert res.stdout.splitlines() == ["k1=after", "NULL=null-key"]
    assert "2 records consumed and accepted" in res.stderr


def test_share_consume_idle_timeout_and_quiet(broker: RunningBroker) -> None:
    topic, group = share_topic(broker, 1, ["a", "b", "c"])
    res = run(broker, "share-consume", topic, "-G", group, "--idle-timeout", "3", "-q")
    assert res.stdout == "a\nb\nc\n"
    assert res.stderr == ""
    # --max-messages is -c's Kafka spelling; -D separates values.
    run(broker, "produce", topic, "-q", input=b"d\ne\nf\n")
    res = run(broker, "share-consume", topic, "-G", group, "--max-messages", "2", "-D", "|")
    assert res.stdout == "d|e|"


def test_ack_release_comes_back_with_delivery_count_2(broker: RunningBroker) -> None:
    values = [f"r{i}" for i in range(5)]
    topic, group = share_topic(broker, 1, values)
    first = run(broker, "share-consume", topic, "-G", group, "--ack", "release", "-c", "5", "-J")
    assert "5 records consumed and released" in first.stderr
    seen = json_lines(first.stdout)
    assert [(r["offset"], r["value"], r["delivery_count"]) for r in seen] == [
        (i, v, 1) for i, v in enumerate(values)
    ]
    again = json_lines(run(broker, "share-consume", topic, "-G", group, "-c", "5", "-J").stdout)
    assert [(r["offset"], r["value"], r["delivery_count"]) for r in again] == [
        (i, v, 2) for i, v in enumerate(values)
    ]
    # The second run accepted them: the next record delivered is a new one.
    run(broker, "produce", topic, "-q", input=b"marker\n")
    (last,) = json_lines(run(broker, "share-consume", topic, "-G", group, "-c", "1", "-J").stdout)
    assert (last["value"], last["delivery_count"]) == ("marker", 1)


def test_ack_reject_is_never_delivered_again(broker: RunningBroker) -> None:
    topic, group = share_topic(broker, 1, ["poison", "pill"])
    res = run(broker, "share-consume", topic, "-G", group, "--ack", "REJECT", "-c", "2")
    assert res.stdout == "poison\npill\n" and "2 records consumed and rejected" in res.stderr
    run(broker, "produce", topic, "-q", input=b"fine\n")
    assert run(broker, "share-consume", topic, "-G", group, "-c", "1").stdout == "fine\n"


def test_two_processes_print_each_record_exactly_once(broker: RunningBroker) -> None:
    values = [f"m{i}" for i in range(20)]
    topic, group = share_topic(broker, 2, values)
    # Each member stops after half: both take part, whoever acquires first (what a
    # member acquired past its -c goes back to the group for the other).
    procs = [spawn(broker, "share-consume", topic, "-G", group, "-c", "10", "-J") for _ in "ab"]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert b"10 records consumed and accepted" in err
        outputs.append([r["value"] for r in json_lines(out.decode())])
    assert [len(o) for o in outputs] == [10, 10]
    assert sorted(outputs[0] + outputs[1]) == sorted(values)
    # Nothing is left for a third member but what is produced now.
    run(broker, "produce", topic, "-q", "-p", "0", input=b"last\n")
    assert run(broker, "share-consume", topic, "-G", group, "-c", "1").stdout == "last\n"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_commits_and_leaves_groups_show_the_member(
    broker: RunningBroker, signum: signal.Signals
) -> None:
    values = [f"s{i}" for i in range(5)]
    topic, group = share_topic(broker, 2, values)
    proc = spawn(broker, "share-consume", topic, "-G", group, "-J", "-X", "client.id=share-cli")
    try:
        printed = [json.loads(line) for line in read_lines(proc.stdout, 5)]
        assert sorted(r["value"] for r in printed) == values

        # groups list/describe while the member is in the group
        listed = json.loads(run(broker, "groups", "list", "--type", "share", "--json").stdout)
        assert {"group_id": group, "protocol_type": "share", "state": "Stable",
                "group_type": "share"} in listed  # fmt: skip
        classic = json.loads(run(broker, "groups", "list", "-t", "classic", "--json").stdout)
        assert group not in {g["group_id"] for g in classic}
        table = run(broker, "groups", "list").stdout
        assert any(line.split() == [group, "Stable", "share", "share"] for line in
                   table.splitlines())  # fmt: skip
        (desc,) = json.loads(run(broker, "groups", "describe", group, "--json").stdout)
        assert desc["type"] == "share" and desc["state"] == "Stable"
        assert desc["group_epoch"] >= 1 and desc["assignment_epoch"] >= 1
        (member,) = desc["members"]
        assert member["client_id"] == "share-cli" and member["host"]
        assert member["subscribed_topics"] == [topic]
        assert member["assignment"] == [[topic, 0], [topic, 1]]
        text = run(broker, "groups", "describe", group).stdout
        assert f"Group: {group}  Type: share  State: Stable" in text
        assert member["member_id"] in text and f"{topic}:0,1" in text and "share-cli" in text

        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # As a shell reports a process the signal ended (130 for SIGINT, 143 for SIGTERM).
    assert proc.returncode == 128 + signum, err
    assert out == b""
    assert signum.name.encode() in err and b"5 records consumed and accepted" in err
    assert b"Traceback" not in err

    (desc,) = json.loads(run(broker, "groups", "describe", group, "--json").stdout)
    assert desc["state"] == "Empty" and desc["members"] == []
    # The five were committed before it left: the next delivery is a new record.
    run(broker, "produce", topic, "-q", "-p", "1", input=b"next\n")
    (rec,) = json_lines(run(broker, "share-consume", topic, "-G", group, "-c", "1", "-J").stdout)
    assert (rec["value"], rec["delivery_count"]) == ("next", 1)


def test_closed_pipe_ends_quietly(broker: RunningBroker) -> None:
    topic, group = share_topic(broker, 1, [])
    lines = b"".join(b"line %d\n" % i for i in range(30000))
    run(broker, "produce", topic, "-q", "-z", "lz4", input=lines)
    # As `| head -1`: the reader goes away while far more than a pipe buffer is to come.
    with spawn(broker, "share-consume", topic, "-G", group) as proc:
        assert read_lines(proc.stdout, 1) == [b"line 0\n"]
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, err
    assert b"Traceback" not in err


def test_share_consume_errors(broker: RunningBroker) -> None:
    res = run(broker, "share-consume", "no-such-share-topic", "-G", "g", "-c", "1", ok=False)
    assert res.exit_code == 1 and "no such topic: no-such-share-topic" in res.output
    assert "no-such-share-topic" not in json.loads(run(broker, "topics", "list", "--json").stdout)
    res = run(
        broker, "share-consume", "t", "-G", "g", "-X", "share.acknowledgement.mode=implicit",
        ok=False,
    )  # fmt: skip
    assert res.exit_code == 2 and "--ack" in res.output
    res = run(broker, "share-consume", "t", ok=False)
    assert res.exit_code == 2 and "--group" in res.output
    res = run(broker, "share-consume", "t", "-G", "g", "--ack", "maybe", ok=False)
    assert res.exit_code == 2
    res = run(broker, "share-consume", "t", "-G", "g", "-X", "session.timeout.ms=1", ok=False)
    assert res.exit_code == 2 and "session.timeout.ms" in res.output
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    res = CliRunner().invoke(main, ["share-consume", "t", "-G", "g", "-b", closed])
    assert res.exit_code == 1 and "no broker available" in res.output
    assert "Traceback" not in res.output


def test_describe_keeps_the_output_of_groups_that_are_not_share_groups(
    broker: RunningBroker,
) -> None:
    res = run(broker, "groups", "describe", fresh("none"), "--json", ok=False)
    (desc,) = json.loads(res.stdout)
    assert "type" not in desc and desc["state"] == "Dead" and desc["partitions"] == []
    assert res.exit_code == 1 and "does not exist" in res.stderr
