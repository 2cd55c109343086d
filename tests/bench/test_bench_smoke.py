"""Every benchmark line of the Makefile's ``bench`` target runs to the end.

``make bench`` is run by hand, rarely, so a benchmark that broke (issue #45:
bench/broker.py died on INVALID_RECORD and nothing after it ran) went unseen.
Here each line of the target runs as written, with ``--smoke`` appended: every
bench script takes that flag and then uses tiny sizes, whatever its other
options say, so the run checks that the code works, not how fast. A new line in
the target is covered without touching this file; a new script needs a
``--smoke`` flag and an entry in :data:`RATIO_LINES`. A line that only repeats
what another line's smoke runs (:data:`COVERED`, checked) is left to that one.

Passing means: exit status 0 (the scripts exit non-zero when a measurement
failed, not only when they crash) and the lines that carry the benchmark's
ratios printed, with numbers in them. The figures themselves are not judged.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import java_harness  # tests/'s
import pytest

from trafka.brokerlite.dev.zookeeper_server import zookeeper_available

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = REPO / "Makefile"
SMOKE_FLAG = "--smoke"

# Per script (and, for bench/clients.py, per --suite): regular expressions of the
# lines that give its ratios (or, for failover, its verdict figure), each with the
# least number of times it must appear.
RATIO_LINES: dict[str, list[tuple[str, int]]] = {
    "codec.py": [(r"\s\d+\.\d\dx$", 10)],  # trafka / kafka-python per case and op
    # trafka / confluent-kafka per format and op, and the registry requests made.
    "schemas.py": [
        (
            r"^  \S+\s+(de)?serialize\s+trafka\s+[\d,]+/s\s+confluent-kafka\s+[\d,]+/s\s+\d+\.\d\dx$",
            6,
        ),
        (r"^  registry requests by trafka .*: \d+ writing", 1),
    ],
    # trafka's imports / aiokafka's (the goals of issue #48), and the CLI's time.
    "imports.py": [
        (
            r"^  trafka\.sdk(\.blocking)? / aiokafka\s+wall\s+\d+\.\d\dx\s+cpu\s+\d+\.\d\dx\s+goal",
            2,
        ),
        (r"^  trafka --help: wall \d+ ms\s+cpu \d+ ms", 1),
        # What the Spark data source costs each of Spark's Python workers.
        (
            r"^  a Spark task's Python worker, for trafka\.spark\.source: wall \d+ ms\s+cpu \d+ ms",
            1,
        ),
    ],
    "broker.py": [
        (r"\d+\.\d% of the append baseline \(target", 2),
        (r"\d+\.\d% of the sendfile baseline \(target", 2),
        (r"brokerlite / baseline\s+mean\s+\d+\.\d\dx\s+median\s+\d+\.\d\dx", 3),
    ],
    "cluster.py": [
        (r"\d+\.\d% of 1 node, RF 1, acks=1", 3),
        (r"median \d+\.\d\d s against the target session timeout", 1),
        # The session's expiry, read in ZooKeeper's log (the shared server's, in the smoke).
        (r"^  after ZooKeeper expired the session: \d+\.\d\d s", 1),
    ],
    "clients.py:throughput": [
        (r"^  vs \S+\s+produce\s+\d+\.\d\d\s+consume\s+\d+\.\d\d\s+consume \(common topic\)", 1)
    ],
    "clients.py:eos": [
        (r"^trafka (idempotent|transactional|pipelined): keeps \d+% of the plain rate", 3)
    ],
    "clients.py:share": [(r"^  trafka / confluent-kafka share-consume \d+\.\d\d$", 1)],
    # Issue 81's table, per broker: each trafka front's rate, its ratio to
    # confluent-kafka's and the target beside it, its CPU per record and peak RSS;
    # confluent-kafka's own row; the drop-in's consume ratio.
    "clients.py:producer": [
        (
            r"^  trafka(-try-send|-blocking|-compat)?\s+[\d,]+\s+\d+\.\d\dx\s+>= \d\.\dx, "
            r"(met|not met)\s+\d+\.\d\d\s+\d+\.\d$",
            4,
        ),
        (r"^  confluent-kafka\s+[\d,]+\s+\(the reference\)\s+\d+\.\d\d\s+\d+\.\d$", 1),
        (r"^  trafka-compat / confluent-kafka consume \d+\.\d\dx \(target >= 1\.0x", 1),
    ],
    # The table's rows: produce/s, its ratio to direct, consume/s, its ratio. A
    # smoke run has each path once and the direct base of each (setup, producer):
    # at least 4 paths and 2 bases on 2 setups (bench/proxy.py's smoke_plan; the
    # first line's 6 include the two encrypted ones, issue #83 item 8).
    "proxy.py": [
        (r"\s(plain|idempotent)\s+[\d,]+\s+\d+\.\d\d\s+[\d,]+\s+\d+\.\d\d\s", 6),
        (r"^  (3 nodes|Kafka 3)\s+idempotent\s+topic journal: \d+\.\d\dx no journal", 1),
        # The consume path: each proxied run against direct, and what limited it.
        (r"^  .* consume \d+\.\d\dx direct \(.*; limited by \w", 4),
        # The proxy's CPU per MB/s of values, each path through it (issue #83, item 8).
        (r"^  .* \d+\.\d ms \(\d+\.\d\) per MB/s of \d+-byte values", 2),
        # Open-loop latency (--rate): each proxied path against direct, p50 and p99.
        (r"\(open loop\)\s+\d+\.\d\d\s+\d+\.\d\d\s+[+-]\d+\.\d\d\s+[+-]\d+\.\d\d\s", 2),
    ],
    "spark.py": [
        (r"^(read|write)\s+[\d,]+\s+[\d,]+\s+\d+\.\d\d$", 2),
        # The ceiling of a Python data source, and merged tasks against one per partition.
        (r"^  trafka / ceiling \d+\.\d\d$", 1),
        (r"^  merged / one task per partition \d+\.\d\d$", 1),
        (r"^  exactly-once / at-least-once write \d+\.\d\d$", 1),
        (r"^stream latency .*: p50 \d+ ms, p99 \d+ ms over [1-9]", 1),
    ],
    # trafka's source / Spark's connector on Apache Kafka: count and agg per partition count.
    "spark_kafka.py": [(r"^(count|agg)\s+\d+\s+[\d,]+\s+[\d,]+\s+\d+\.\d\d$", 2)],
    # A batch read's planning: its time after the first query, and its requests;
    # then a stream's triggers in each partitionDiscovery mode, and the listing alone.
    "spark_plan.py": [
        (r"^\d+ queries, .*, then median \d+\.\d ms wall / \d+\.\d ms CPU; \d+\.\d conn", 1),
        (r"^requests per query: \d+\.\d \(", 1),
        (r"^  partitionDiscovery=\w+: \d+\.\d\d / \d+\.\d\d; requests per trigger: ", 2),
        (r"^  the partition listing alone .*: \d+\.\d{3} ms wall", 1),
    ],
}
CLIENTS_OPEN_LOOP = r"^open-loop produce latency against .*: p50 \d+\.\d\d ms, p99 \d+\.\d\d ms$"
NEEDS_ZOOKEEPER = {"cluster.py", "proxy.py"}  # 3-node clusters (proxy.py: --cluster 1,3)
NEEDS_JAVA = {"spark.py", "spark_kafka.py"}


def bench_lines(makefile: Path = MAKEFILE) -> list[list[str]]:
    """The ``bench`` target's recipe lines, as argument lists after ``$(PY)``."""
    lines = makefile.read_text().splitlines()
    # The target line names its prerequisites ($(STAMP), peers...): found by its name.
    start = next(i for i, line in enumerate(lines) if line.startswith("bench:")) + 1
    commands = []
    for line in lines[start:]:
        if not line.startswith("\t"):
            break
        words = shlex.split(line)
        assert words[0] == "$(PY)" and re.fullmatch(r"bench/\w+\.py", words[1]), (
            f"the bench target's line {line.strip()!r} is not `$(PY) bench/<script>.py ...`"
        )
        commands.append(words[1:])
    assert commands, "the Makefile's bench target lists no benchmark"
    return commands


COMPAT_LINE = r"^trafka-compat / trafka-blocking produce\s+\d+\.\d\d\s+consume\s+\d+\.\d\d$"


def expected_lines(command: list[str]) -> list[tuple[str, int]]:
    """What the ratio lines of this command look like (:data:`RATIO_LINES`)."""
    script = Path(command[0]).name
    if script == "clients.py":
        suite = "throughput"
        for i, word in enumerate(command):
            if word == "--suite":
                suite = command[i + 1]
            elif word.startswith("--suite="):
                suite = word.split("=", 1)[1]
        suites = ["throughput", "eos", "share"] if suite == "all" else [suite]
        expected = [line for s in suites for line in RATIO_LINES[f"clients.py:{s}"]]
        if suite == "producer" and "brokerlite,kafka" in command:
            # A table per broker (a smoke run has one workload on each).
            expected = [(pattern, least * 2) for pattern, least in expected]
        if any(word == "--rate" or word.startswith("--rate=") for word in command):
            # Open-loop latency (--rate), p50 and p99 against each broker.
            brokers = 2 if "brokerlite,kafka" in command else 1
            expected.append((CLIENTS_OPEN_LOOP, brokers))
        clients = next((command[i + 1] for i, w in enumerate(command) if w == "--clients"), None)
        if "throughput" in suites and (clients is None or "trafka-compat" in clients):
            # confluent-kafka's code on trafka.compat.confluent, against trafka.sdk.blocking.
            expected.append((COMPAT_LINE, 1))
        return expected
    if script not in RATIO_LINES:
        pytest.fail(f"bench/{script} is new: add what its ratio lines look like to RATIO_LINES")
    return RATIO_LINES[script]


COMMANDS = bench_lines()

#: A line whose smoke run would only repeat another's: the other line (the
#: value) runs its script with every option this one gives, with the same
#: values, and more (test_the_bench_target_is_read checks that), so its smoke
#: runs every path this one's would, and this one is not run again. make bench
#: still runs both. What is left out: bench/clients.py's one-node Apache Kafka
#: (its KafkaBroker, which takes the running node as its cluster class does the
#: running cluster) and Kafka's perf tools with acks=1: a JVM (the line's one
#: for its perf clients, bench/_kafka.py's script_session) and a brokerlite of
#: their own (some 20 to 35 s of the file when it ran four JVMs).
COVERED = {
    "bench/clients.py --broker brokerlite,kafka --clients trafka,confluent-kafka,java": (
        "bench/clients.py --broker brokerlite,kafka --cluster 3 --records 1000000 "
        "--clients trafka,confluent-kafka,java --rate 200"
    ),
}
SMOKED = [c for c in COMMANDS if shlex.join(c) not in COVERED]
# Each smoke run is a chain of process and JVM start-ups (brokers, ZooKeeper,
# Spark, one worker per client), so each test runs its own line, one at a time
# in a worker: the interop tests beside it keep tight timings. make pytest hands
# this module's tests to its workers one by one (tests/conftest.py's
# SPREAD_FILES): some 3 minutes of runs in all, which one worker ran alone at
# the start of the suite while the other had the rest.


def _skip_reason(command: list[str]) -> str | None:
    script = Path(command[0]).name
    clustered = script in NEEDS_ZOOKEEPER or "--cluster" in command  # clients.py --cluster 3
    if clustered and not zookeeper_available():
        return "ZooKeeper not found (make system-deps installs it)"
    if script in NEEDS_JAVA and shutil.which("java") is None:
        return "Java not found (make system-deps installs it)"
    return None


def _option(command: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in a command line."""
    for i, word in enumerate(command):
        if word == name and i + 1 < len(command):
            return command[i + 1]
        if word.startswith(f"{name}="):
            return word.split("=", 1)[1]
    return None


def _kafka_fixture(command: list[str]) -> str | None:
    """The session's Kafka the line runs on, if it runs on Kafka: the line
    takes the running cluster (bench/_kafka.py's TRAFKA_BENCH_KAFKA, or
    TRAFKA_BENCH_KAFKA3 for 3.x on ZooKeeper) instead of starting one of its
    own, so a worker starts a cluster once for these lines and the tests that
    share it. One node of 4.x for Spark and bench/clients.py's ``--broker
    kafka``, its three nodes for the proxy's ``--cluster 3``, the three 3.9
    nodes for bench/clients.py's ``--cluster 3``. (Kafka's ConsumerPerformance,
    which the clients lines run, once read nothing within its 10 s on the
    shared node of a loaded machine; it has 60 s since.)"""
    script = Path(command[0]).name
    if script == "spark_kafka.py":
        return "kafka4"
    if script == "proxy.py" and _option(command, "--upstream") == "kafka":
        return "kafka4_cluster"
    if script == "clients.py" and "kafka" in (_option(command, "--broker") or "").split(","):
        return "kafka3_cluster" if _option(command, "--cluster") == "3" else "kafka4"
    return None


def _brokerlite_cluster(command: list[str]) -> bool:
    """Whether the line starts a brokerlite cluster, whose brokers then use a
    chroot of the session's ZooKeeper (``zk_chroot``; bench/_kafka.py's
    TRAFKA_BENCH_ZOOKEEPER) instead of a private server: a JVM start less."""
    script = Path(command[0]).name
    if script == "cluster.py":
        return True
    if script == "proxy.py":
        setups = (_option(command, "--cluster") or "1,3").split(",")
        return _option(command, "--upstream") != "kafka" and any(int(n) > 1 for n in setups)
    if script == "clients.py":
        brokers = (_option(command, "--broker") or "brokerlite").split(",")
        return int(_option(command, "--cluster") or 1) > 1 and "brokerlite" in brokers
    return False


#: What names the compiled Java harness to a line (bench/_kafka.py's JAVA_HARNESS).
JAVA_HARNESS = "TRAFKA_BENCH_JAVA_HARNESS"
#: The environment variables that name a fixture's cluster to a line (bench/_kafka.py).
_KAFKA_ENV = {
    "kafka4": "TRAFKA_BENCH_KAFKA",
    "kafka4_cluster": "TRAFKA_BENCH_KAFKA",
    "kafka3_cluster": "TRAFKA_BENCH_KAFKA3",
}


def _run(
    command: list[str], tmp: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *command, SMOKE_FLAG],
        cwd=REPO,
        # Their temporary directories in pytest's, so a killed run leaves none behind.
        env={**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp), **(env or {})},
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


def _options(command: list[str]) -> dict[str, str]:
    """A line's ``--name value`` options (``--name=value`` too)."""
    options: dict[str, str] = {}
    for i, word in enumerate(command):
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            nxt = command[i + 1] if i + 1 < len(command) else ""
            options[name] = value if eq else ("" if nxt.startswith("--") else nxt)
    return options


def test_a_covered_line_is_covered() -> None:
    lines = {shlex.join(c): c for c in COMMANDS}
    for covered, by in COVERED.items():
        assert covered in lines and by in lines, f"not a line of the bench target: {covered}"
        assert lines[covered][0] == lines[by][0], (covered, by)
        mine, theirs = _options(lines[covered]), _options(lines[by])
        # --records is a size, which --smoke sets whatever the line says.
        assert all(theirs.get(k) == v for k, v in mine.items() if k != "--records"), (mine, theirs)
        assert by not in COVERED, f"{by} runs in the smoke only as part of another line"


def test_the_bench_target_is_read() -> None:
    scripts = {Path(c[0]).name for c in COMMANDS}
    assert {"codec.py", "broker.py", "clients.py", "spark.py"} <= scripts
    assert ["bench/clients.py", "--suite", "eos", "--records", "300000"] in COMMANDS
    # Each of the Kafka lines runs on a session's cluster (see _kafka_fixture).
    kafka = [_kafka_fixture(c) for c in SMOKED if _kafka_fixture(c) is not None]
    assert sorted(kafka) == ["kafka3_cluster", "kafka4", "kafka4", "kafka4_cluster"], COMMANDS
    # The brokerlite clusters (cluster.py, proxy.py --cluster 1,3, clients.py --cluster 3).
    assert sum(_brokerlite_cluster(c) for c in COMMANDS) == 3, COMMANDS


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", SMOKED, ids=[shlex.join(c) for c in SMOKED])
def test_bench_line_runs_at_a_tiny_size(
    command: list[str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    reason = _skip_reason(command)
    if reason is not None:
        pytest.skip(reason)
    expected = expected_lines(command)
    env = {}
    fixture = _kafka_fixture(command)
    if fixture is not None:
        kafka = request.getfixturevalue(fixture)
        name = _KAFKA_ENV[fixture]
        env[name] = kafka.bootstrap_servers
        env[f"{name}_PIDS"] = ",".join(
            str(node.proc.pid) for node in kafka.nodes if node.proc is not None
        )
    if "java" in (_option(command, "--clients") or "").split(","):
        # Kafka's perf clients run in one JVM (bench/_kafka.py's script_session),
        # from the classes compiled in this session's temporary folder, not the line's.
        env[JAVA_HARNESS] = str(java_harness.compiled())
    zookeeper = None
    if _brokerlite_cluster(command):
        zookeeper = request.getfixturevalue("zk_chroot").connect_string
        env["TRAFKA_BENCH_ZOOKEEPER"] = zookeeper
        # Where bench/cluster.py reads when the server expired a killed broker's session.
        env["TRAFKA_BENCH_ZOOKEEPER_LOG"] = str(request.getfixturevalue("zookeeper").log_path)
    done = _run(command, tmp_path, env)
    report = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    out = done.stdout.splitlines()
    for pattern, least in expected:
        found = [line for line in out if re.search(pattern, line)]
        assert len(found) >= least, f"{least}+ lines like {pattern!r} expected\n{report}"
    if fixture is not None:  # the line ran on the session's cluster, as asked
        assert f"the running cluster at {kafka.bootstrap_servers} " in done.stderr, report
    if zookeeper is not None:  # and its brokerlite cluster on the session's ZooKeeper
        assert f"the running server at {zookeeper} " in done.stderr, report
