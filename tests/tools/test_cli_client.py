"""``trafka produce / consume / topics / groups`` against an in-process brokerlite.

The broker runs on its own thread; each command runs through click's
CliRunner (its own ``trio.run``), and one test runs the real entry point in
subprocesses to cover pipes.
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.from_thread
import click
import pytest
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.sdk import open_consumer, open_producer
from trafka.tools.cli import main
from trafka.tools.cli_client import MessageSplitter, OffsetSpec, parse_offset_spec
from trafka.tools.clikit import compile_format, parse_delimiter, parse_timestamp, record_to_json

pytestmark = pytest.mark.timeout(60)


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def run(broker: RunningBroker, *args: str, input: bytes | None = None, ok: bool = True) -> Result:
    result = CliRunner().invoke(
        main, [args[0], *args[1:], "-b", broker.bootstrap_servers], input=input
    )
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- pure helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\n", b"\n"),
        (":", b":"),
        ("\\t|\\x00", b"\t|\x00"),
        ("a\\\\b", b"a\\b"),
        ("\\r\\n", b"\r\n"),
    ],
)
def test_parse_delimiter(text: str, expected: bytes) -> None:
    assert parse_delimiter(text) == expected


@pytest.mark.parametrize("text", ["", "\\", "\\q", "\\x4"])
def test_parse_delimiter_rejects(text: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_delimiter(text)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 100])
def test_splitter_across_chunks(chunk: int) -> None:
    data = b"a||bb||||ccc||"
    splitter = MessageSplitter(b"||")
    out: list[bytes] = []
    for i in range(0, len(data), chunk):
        out += splitter.feed(data[i : i + chunk])
    out += splitter.finish()
    assert out == [b"a", b"bb", b"", b"ccc"]
    tail = MessageSplitter(b"\n")
    assert tail.feed(b"x\ny") == [b"x"]
    assert tail.finish() == [b"y"]


def test_offset_specs_and_timestamps() -> None:
    assert parse_offset_spec("beginning") == OffsetSpec("beginning")
    assert parse_offset_spec("END") == OffsetSpec("end")
    assert parse_offset_spec("42") == OffsetSpec("absolute", 42)
    assert parse_offset_spec("-5") == OffsetSpec("relative", 5)
    assert parse_offset_spec("s@1700000000000") == OffsetSpec("timestamp", 1_700_000_000_000)
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000  # naive means UTC
    assert parse_timestamp("2023-11-15T00:13:20+02:00") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000_000
    for bad in ("sometime", "-x", "s@yesterday"):
        with pytest.raises(click.BadParameter):
            parse_offset_spec(bad)


def test_record_to_json_binary_and_null() -> None:
    from trafka.sdk import ConsumerRecord

    rec = ConsumerRecord("t", 1, 7, 99, None, b"\xff\x00", (("h", b"v"), ("n", None)), 1)
    assert record_to_json(rec) == {
        "topic": "t",
        "partition": 1,
        "offset": 7,
        "timestamp": 99,
        "timestamp_type": "LogAppendTime",
        "key": None,
        "value": {"base64": "/wA="},
        "headers": [["h", "v"], ["n", None]],
    }


def test_kcat_format_tokens() -> None:
    rec = SimpleNamespace(
        topic="t",
        partition=2,
        offset=41,
        timestamp=1700000000000,
        key=b"k1",
        value=b"hello",
        headers=(("a", b"1"), ("b", None)),
    )
    render = compile_format("%t/%p@%o %T %k(%K)=%s(%S) [%h] 100%%\\n", null=b"NULL")
    assert render(rec) == b"t/2@41 1700000000000 k1(2)=hello(5) [a=1,b=NULL] 100%\n"
    nulls = SimpleNamespace(**{**rec.__dict__, "key": None, "value": None, "headers": ()})
    assert compile_format("%k|%K|%s|%S|%h", null=b"-")(nulls) == b"-|-1|-|-1|"
    for bad in ("%x", "tail %"):
        with pytest.raises(click.BadParameter, match="unknown format token"):
            compile_format(bad)


# -- against the broker ------------------------------------------------------------------------


def test_produce_then_consume_json(broker: RunningBroker) -> None:
    topic = fresh("pc")
    run(broker, "topics", "create", topic, "-p", "2")
    lines = b"".join(b"key%d:value %d\n" % (i % 3, i) for i in range(20)) + b"nokey\n"
    res = run(broker, "produce", topic, "-K", ":", "-H", "source=cli", "-H", "flag", input=lines)
    assert "21 of 21 messages delivered" in res.stderr
    res = run(broker, "consume", topic, "-e", "-J")
    records = json_lines(res.stdout)
    assert len(records) == 21
    assert "21 records consumed" in res.stderr
    by_value = {r["value"]: r for r in records}
    assert by_value["value 4"]["key"] == "key1"
    assert by_value["nokey"]["key"] is None
    assert by_value["value 4"]["headers"] == [["source", "cli"], ["flag", None]]
    assert by_value["value 4"]["timestamp_type"] == "CreateTime"
    # same key, same partition; offsets within a partition keep input order
    for key in ("key0", "key1", "key2"):
        same = [r for r in records if r["key"] == key]
        assert len({r["partition"] for r in same}) == 1
        assert [int(r["value"].split()[1]) for r in same] == sorted(
            int(r["value"].split()[1]) for r in same
        )


def test_consume_raw_offsets_and_count(broker: RunningBroker) -> None:
    topic = fresh("raw")
    run(broker, "topics", "create", topic, "-p", "1")
    data = b"".join(b"k%d\tv%d\n" % (i, i) for i in range(10)) + b"\tnull-key\n"
    run(broker, "produce", topic, "-K", "\\t", "-Z", "-p", "0", input=data)
    res = run(broker, "consume", topic, "-e", "-K", "=", "-Z", "NULL", "-q")
    assert res.stdout.splitlines() == [f"k{i}=v{i}" for i in range(10)] + ["NULL=null-key"]
    assert res.stderr == ""
    res = run(broker, "consume", topic, "-e", "-q", "-c", "2", "-f", "%p:%o %k=%s\\n")
    assert res.stdout.splitlines() == ["0:0 k0=v0", "0:1 k1=v1"]
    bad = run(broker, "consume", topic, "-e", "-f", "%q", ok=False)
    assert bad.exit_code == 2 and "unknown format token %q" in bad.output
    assert run(broker, "consume", topic, "-o", "-3", "-e", "-q").stdout.splitlines() == [
        "v8",
        "v9",
        "null-key",
    ]
    assert run(broker, "consume", topic, "-o", "4", "-c", "2", "-q").stdout == "v4\nv5\n"
    assert run(broker, "consume", topic, "-o", "end", "-e", "-q").stdout == ""
    res = run(broker, "consume", topic, "-p", "0", "-D", "|", "-c", "3", "-q")
    assert res.stdout == "v0|v1|v2|"


def test_consume_says_partition_ends_on_stderr_when_asked(broker: RunningBroker) -> None:
    # librdkafka's enable.partition.eof, as kcat takes it with -X: the ends are
    # notes on stderr, never records on stdout, and -c counts records only.
    topic = fresh("eof")
    run(broker, "topics", "create", topic, "-p", "2")
    run(broker, "produce", topic, "-p", "0", input=b"a\nb\n")
    res = run(broker, "consume", topic, "-e", "-q", "-X", "enable.partition.eof=true")
    assert res.stdout == "a\nb\n"
    ends = sorted(line for line in res.stderr.splitlines() if "reached the end" in line)
    assert ends == [
        f"% reached the end of {topic} [0] at offset 2",
        f"% reached the end of {topic} [1] at offset 0",
    ]
    res = run(broker, "consume", topic, "-c", "2", "-q", "-X", "enable.partition.eof=true")
    assert res.stdout == "a\nb\n"
    assert run(broker, "consume", topic, "-e", "-q").stderr == ""  # off by default


def produce_timestamped(broker: RunningBroker, topic: str) -> None:
    """m0..m5 to partition 0 of ``topic``, timestamped 1700000000000 + i ms."""

    async def produce() -> None:
        async with open_producer(bootstrap_servers=broker.bootstrap_servers) as p:
            for i in range(6):
                await p.send(topic, b"m%d" % i, partition=0, timestamp_ms=1_700_000_000_000 + i)

    anyio.run(produce)


def test_consume_from_timestamp(broker: RunningBroker) -> None:
    topic = fresh("ts")
    produce_timestamped(broker, topic)
    res = run(broker, "consume", topic, "-o", "s@1700000000003", "-e", "-J", "-q")
    assert [r["value"] for r in json_lines(res.stdout)] == ["m3", "m4", "m5"]
    iso = "s@2023-11-14T22:13:20.004+00:00"
    res = run(broker, "consume", topic, "-o", iso, "-e", "-q")
    assert res.stdout == "m4\nm5\n"
    assert run(broker, "consume", topic, "-o", "s@1800000000000", "-e", "-q").stdout == ""


# Runs the command line with the offsets-for-times answer handed to the command
# only once the fetch the consumer starts on assignment (from its default reset)
# is in flight: the order a busy process's scheduling can give, made certain.
_LATE_LOOKUP = """
import sys, anyio
from trafka.sdk.consumer import Consumer
from trafka.tools.cli import main

ask = Consumer.offsets_for_times

async def offsets_for_times(self, timestamps):
    found = await ask(self, timestamps)
    with anyio.fail_after(20):
        while not all(self.core.fetcher.partitions[tp].in_flight for tp in timestamps):
            await anyio.sleep(0.01)
    return found

Consumer.offsets_for_times = offsets_for_times
main(sys.argv[1:])
"""


def test_consume_from_a_late_timestamp_ends_when_the_first_fetch_answers_last(
    broker: RunningBroker,
) -> None:
    """``-o s@TS -e`` with TS after every record: each partition starts at its end
    (KIP-79: ListOffsets finds no offset, -1) and -e exits once it is there. The
    answer to the fetch sent before the seek is dropped; the end it carried must
    still count, or the incremental session's later answers, which leave the
    partition out (KIP-227: nothing new), never tell it again (the CI hang).
    -e learns the ends from fetch answers only with partition ends asked for
    (``enable.partition.eof``; else it looks them up and fetches nothing before
    the seek, test_cli_consume_end.py)."""
    topic = fresh("ts-late")
    produce_timestamped(broker, topic)
    args = ["consume", topic, "-b", broker.bootstrap_servers, "-o", "s@1800000000000", "-e"]
    # The broker holds the first fetch (it asks for more bytes than there are).
    args += ["-X", "fetch.min.bytes=1048576", "-X", "fetch.wait.max.ms=500"]
    args += ["-X", "enable.partition.eof=true"]
    done = subprocess.run(
        [sys.executable, "-c", _LATE_LOOKUP, *args], capture_output=True, timeout=40
    )
    assert (done.returncode, done.stdout) == (0, b""), done.stderr
    assert (
        done.stderr
        == f"% reached the end of {topic} [0] at offset 6\n0 records consumed\n".encode()
    )


def test_produce_files_and_progress(broker: RunningBroker, tmp_path: Path) -> None:
    topic = fresh("files")
    a, b = tmp_path / "a.bin", tmp_path / "b.txt"
    a.write_bytes(b"\xff\x01 whole\nfile")
    b.write_bytes(b"one\ntwo\n")
    run(broker, "produce", topic, str(a), "-q")
    res = run(broker, "produce", topic, str(b), "-l", "--progress")
    assert "2 records, 8 of 8 bytes" in res.stderr
    res = run(broker, "consume", topic, "-e", "-J", "-q")
    values = [r["value"] for r in json_lines(res.stdout)]
    assert values == [{"base64": "/wEgd2hvbGUKZmlsZQ=="}, "one", "two"]
    res = run(broker, "produce", topic, "-c", "2", "-q", input=b"x\ny\nz\n")
    assert len(json_lines(run(broker, "consume", topic, "-e", "-J", "-q").stdout)) == 5


def test_group_consume_commits_and_lag(broker: RunningBroker) -> None:
    topic = fresh("grp")
    group = fresh("g")
    run(broker, "topics", "create", topic, "-p", "2")
    run(broker, "produce", topic, "-q", input=b"".join(b"%d\n" % i for i in range(30)))
    first = run(broker, "consume", topic, "-G", group, "-c", "12", "-q").stdout.split()
    assert len(first) == 12
    res = run(broker, "groups", "describe", group, "--json")
    (desc,) = json.loads(res.stdout)
    assert desc["state"] == "Empty" and desc["members"] == []
    assert desc["total_lag"] == 18
    assert sum(p["log_end_offset"] for p in desc["partitions"]) == 30
    # the next member starts where the first one committed
    rest = run(broker, "consume", topic, "-G", group, "-e", "-q").stdout.split()
    assert sorted(map(int, first + rest)) == list(range(30))
    text = run(broker, "groups", "describe", group).stdout
    assert "TotalLag: 0" in text and "LOG-END-OFFSET" in text
    listed = json.loads(run(broker, "groups", "list", "--json").stdout)
    assert {
        "group_id": group,
        "protocol_type": "consumer",
        "state": "Empty",
        "group_type": "classic",
    } in listed


def test_describing_a_group_that_does_not_exist_fails(broker: RunningBroker) -> None:
    res = run(broker, "groups", "describe", fresh("nosuch"), ok=False)
    assert res.exit_code == 1
    assert "does not exist" in res.output


def test_reset_offsets_dry_run_execute_and_active_group(broker: RunningBroker) -> None:
    topic = fresh("reset")
    group = fresh("g")
    run(broker, "topics", "create", topic, "-p", "2")

    async def produce() -> None:
        async with open_producer(bootstrap_servers=broker.bootstrap_servers) as p:
            for i in range(10):
                await p.send(topic, b"x", partition=i % 2, timestamp_ms=1_000_000 + i)

    anyio.run(produce)
    run(broker, "consume", topic, "-G", group, "-e", "-q")

    def committed() -> dict[int, int]:
        (d,) = json.loads(run(broker, "groups", "describe", group, "--json").stdout)
        return {p["partition"]: p["current_offset"] for p in d["partitions"]}

    assert committed() == {0: 5, 1: 5}
    res = run(broker, "groups", "reset-offsets", group, "--all-topics", "--to-earliest")
    assert "dry run" in res.stderr and "NEW-OFFSET" in res.stdout
    assert committed() == {0: 5, 1: 5}
    run(broker, "groups", "reset-offsets", group, "-t", topic, "--to-earliest", "--execute")
    assert committed() == {0: 0, 1: 0}
    run(
        broker,
        "groups",
        "reset-offsets",
        group,
        "-t",
        f"{topic}:1",
        "--to-offset",
        "99",
        "--execute",
    )
    assert committed() == {0: 0, 1: 5}  # clamped to the log end
    # timestamps 1_000_004 .. : partition 0 has 1_000_004 at offset 2, partition 1 1_000_005 at 2
    res = run(
        broker,
        "groups", "reset-offsets", group, "--all-topics", "--to-datetime", "1000004",
        "--execute", "--json",
    )  # fmt: skip
    assert {p["partition"]: p["new_offset"] for p in json.loads(res.stdout)} == {0: 2, 1: 2}
    run(broker, "groups", "reset-offsets", group, "--all-topics", "--to-latest", "--execute")
    assert committed() == {0: 5, 1: 5}
    bad = run(broker, "groups", "reset-offsets", group, "--all-topics", ok=False)
    assert bad.exit_code == 2 and "exactly one of" in bad.output

    # A group with a live member is refused.
    with anyio.from_thread.start_blocking_portal() as portal:
        cm = open_consumer(
            topic,
            bootstrap_servers=broker.bootstrap_servers,
            group_id=group,
            heartbeat_interval_ms=100,
            fetch_max_wait_ms=50,  # its close waits for the fetch held at the end
        )
        blocking = portal.wrap_async_context_manager(cm)
        consumer = blocking.__enter__()
        try:

            async def wait_assigned() -> None:
                with anyio.fail_after(20):
                    while not consumer.assignment():
                        await consumer.getmany(timeout_ms=50)

            portal.call(wait_assigned)
            res = run(
                broker, "groups", "reset-offsets", group, "--all-topics", "--to-earliest",
                "--execute", ok=False,
            )  # fmt: skip
            assert res.exit_code == 1 and "only be reset while it is inactive" in res.output
        finally:
            blocking.__exit__(None, None, None)
    assert committed() == {0: 5, 1: 5}


def test_topics_lifecycle(broker: RunningBroker) -> None:
    topic = fresh("life")
    run(broker, "topics", "create", topic, "-p", "3", "-c", "retention.ms=123456")
    again = run(broker, "topics", "create", topic, ok=False)
    assert again.exit_code == 1 and "TOPIC_ALREADY_EXISTS" in again.output
    run(broker, "topics", "create", topic, "--if-not-exists")
    assert json.loads(run(broker, "topics", "list", "--json").stdout)[topic] == 3
    assert topic in run(broker, "topics", "list").stdout
    run(broker, "produce", topic, "-p", "1", "-q", input=b"a\nb\n")
    (desc,) = json.loads(run(broker, "topics", "describe", topic, "--json").stdout)
    assert desc["configs"] == {"retention.ms": "123456"}
    assert [(p["partition"], p["latest_offset"]) for p in desc["partitions"]] == [
        (0, 0),
        (1, 2),
        (2, 0),
    ]
    assert all(p["leader"] >= 0 and p["isr"] == p["replicas"] for p in desc["partitions"])
    # Sizes on disk: partition 1 holds the two records, the others nothing.
    sizes = [p["size_bytes"] for p in desc["partitions"]]
    assert sizes[0] == sizes[2] == 0 and sizes[1] > 0
    text = run(broker, "topics", "describe", topic).stdout
    assert "PartitionCount: 3" in text and "retention.ms=123456" in text
    assert "SIZE" in text and f" {sizes[1]}" in text
    run(broker, "topics", "delete", topic)
    assert topic not in json.loads(run(broker, "topics", "list", "--json").stdout)
    gone = run(broker, "topics", "delete", topic, ok=False)
    assert gone.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in gone.output
    assert gone.output.count("UNKNOWN_TOPIC_OR_PARTITION") == 1, gone.output  # said once
    run(broker, "topics", "delete", topic, "--if-exists")
    missing = run(broker, "topics", "describe", topic, ok=False)
    assert missing.exit_code == 1


def test_env_bootstrap_and_errors(broker: RunningBroker) -> None:
    runner = CliRunner(env={"TRAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers})
    res = runner.invoke(main, ["topics", "list", "--json"])
    assert res.exit_code == 0 and isinstance(json.loads(res.stdout), dict)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    for args in (["topics", "list"], ["consume", "x", "-e"], ["produce", "x"]):
        res = CliRunner().invoke(main, [*args, "-b", closed], input=b"a\n")
        assert res.exit_code == 1, res.output
        assert "no broker available" in res.output
        assert "Traceback" not in res.output
    res = run(broker, "produce", "x", "-X", "linger.msx=1", input=b"a\n", ok=False)
    assert res.exit_code == 2 and "linger.msx" in res.output
    res = run(broker, "consume", "x", "-o", "stored", ok=False)
    assert res.exit_code == 2 and "needs a group" in res.output
    res = run(broker, "consume", "x", "-G", "g", "-o", "5", ok=False)
    assert res.exit_code == 2
    # Consuming a topic that does not exist fails at once and does not create it.
    res = run(broker, "consume", "no-such-topic", "-e", ok=False)
    assert res.exit_code == 1 and "no such topic: no-such-topic" in res.output
    assert "no-such-topic" not in json.loads(run(broker, "topics", "list", "--json").stdout)


def test_entry_point_pipes(broker: RunningBroker) -> None:
    topic = fresh("pipe")
    cli = [sys.executable, "-m", "trafka.tools.cli"]
    bs = ["-b", broker.bootstrap_servers]
    data = b"".join(b"line %d\n" % i for i in range(30000))
    done = subprocess.run(
        [*cli, "produce", topic, *bs, "-z", "lz4"], input=data, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert b"30000 of 30000 messages delivered" in done.stderr
    # The reader stops after one line (as `| head -1` does) while far more than a
    # pipe buffer is still to come: no traceback, status 0.
    with subprocess.Popen(
        [*cli, "consume", topic, *bs, "-e"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"line 0\n"
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, err
    assert b"Traceback" not in err


def test_produce_names_a_retried_refusal_while_it_retries_and_fails_with_it(
    broker: RunningBroker,
) -> None:
    """Kafka's topic config ``min.insync.replicas``: "When a producer sets acks to
    "all" (or "-1"), min.insync.replicas specifies the minimum number of replicas
    that must acknowledge a write for the write to be considered successful. If
    this minimum cannot be met, then the producer will raise an exception (either
    NotEnoughReplicas or NotEnoughReplicasAfterAppend)". NOT_ENOUGH_REPLICAS is
    retriable (errors.json), so ``produce -a all`` retries it until
    ``delivery.timeout.ms`` (120 s by default); as kcat does, it names the error
    on stderr while it retries, and the failure it exits 1 with names it too."""
    topic = fresh("min-isr")
    run(broker, "topics", "create", topic, "-c", "min.insync.replicas=2")
    cli = [sys.executable, "-m", "trafka.tools.cli", "produce", topic, "-a", "all"]
    bs = ["-b", broker.bootstrap_servers]
    lines: queue.Queue[bytes] = queue.Queue()
    # The default delivery.timeout.ms: the producer is still retrying when it names
    # the refusal (the deadline only bounds the test, well within that timeout).
    with subprocess.Popen(
        [*cli, *bs], stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    ) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(b"refused\n")
        proc.stdin.close()
        stderr = proc.stderr
        threading.Thread(target=lambda: [lines.put(x) for x in stderr], daemon=True).start()
        deadline = time.monotonic() + 30
        told: list[bytes] = []
        try:
            while not any(b"NOT_ENOUGH_REPLICAS" in line for line in told):
                try:
                    told.append(lines.get(timeout=max(deadline - time.monotonic(), 0.001)))
                except queue.Empty:
                    pytest.fail(f"NOT_ENOUGH_REPLICAS not named while retrying: {told}")
            assert proc.poll() is None, told  # still retrying, not failed yet
        finally:
            # Not terminate(): a first SIGTERM has produce deliver what it read,
            # retrying until delivery.timeout.ms.
            proc.kill()
    assert told[-1].startswith(b"warning: ") and f"{topic}-0".encode() in told[-1], told
    # Run to the end (a short delivery.timeout.ms): exit 1, the last error named.
    short = ["-X", "delivery.timeout.ms=2000", "-X", "request.timeout.ms=1000"]
    done = subprocess.run([*cli, *bs, *short], input=b"refused\n", capture_output=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert b"last error: [NOT_ENOUGH_REPLICAS (19)]" in done.stderr, done.stderr
    assert b"0 of 1 messages delivered" in done.stderr
    assert run(broker, "consume", topic, "-e", "-q").stdout == ""  # nothing was written
