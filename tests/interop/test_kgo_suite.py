"""franz-go's own ``pkg/kgo`` tests (v1.22.3, from the Go module proxy; see
kgo_suite.py) run unchanged against brokerlite, with Apache Kafka 4.x as the
control: every kgo test that passes on Kafka must pass on brokerlite (issue #84).

The suite runs once per broker (module fixtures): against a brokerlite of its
own (one node, ``KGO_TEST_RF=1``), the worker's shared Kafka 4.x node and a
three-node brokerlite cluster (broker processes on a private ZooKeeper chroot,
``KGO_TEST_RF=3``). A test that skips on brokerlite while it runs on Kafka is a
miss, as a failure is; so is a test of the binary (``-test.list``) that
brokerlite's run never reported.

Kafka is the control: it judges brokerlite's misses. Both are pinned (Kafka
4.4.0, franz-go v1.22.3), so which kgo tests Kafka passes does not change with
trafka's code. In ``make test`` Kafka therefore runs only the tests brokerlite
did not pass (none, on a good day: a run of seconds instead of its whole
suite's 50 s of wall and some 30 s of CPU, Kafka's and the Go binary's), and
each that passes there is a miss: the verdict the whole control would give.
The whole control (Kafka's own run of every test, and the page's Kafka rows,
``test_kgo_suite_on_kafka``) runs side by side with brokerlite's under
``TRAFKA_KGO_CONTROL=1``, ``make compat`` (``TRAFKA_WRITE_COMPAT=1``) and the
cluster's opt-in run. franz-go's share-group tests (which need share groups at
Kafka 4.2's protocol, ShareFetch and ShareAcknowledge v2, and skip without them)
are measured apart, as their own row.

A kgo test that fails (or never ends) in the whole suite's run is run again
alone (kgo_suite.retry): some have deadlines of their own (a 30 s poll, a 15 s
wait) that a loaded machine's broker can miss among the whole suite's traffic.
One that passes then counts, with a warning naming it and its first failure.

Cost, on a loaded two-core machine (load 9-11): Kafka 4.x's run some 50 s and a
brokerlite node's 45 s, run side by side (``-test.parallel 8``, ``KGO_TEST_RECORDS`` 10,000
instead of franz-go's 500,000: 10 s of the Go binary's CPU, 15 s of the
broker's); the cluster's (three broker processes, every record replicated
twice, 1,000 records) 170 s at load 5-9 and 246 s at load 10-16, its brokers
spending 120-160 s of CPU, as Kafka 4.4's three-node cluster does (176 s and
140 s of CPU at load 10-25); TestTxnEtl (100-150 s: six chains of consumer
groups, four at a time) and the sequential TestClient_Produce (20,000 records
produced one by one, 40-90 s) set its length. The file is marked slow.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kgo_suite
import pytest
from kafka_fixtures import INTERNAL_TOPIC_SIZES
from kafka_peers import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(kgo_suite.DEADLINE_S + 300)]

#: The records of the cluster's group and transaction runs: at the single node's
#: 10,000, TestTxnEtl and TestGroupETL took 170 and 145 s of a 5-minute run on
#: three broker processes (each record replicated twice over); at 2,500, 207 and
#: 183 s of a 295 s run on a machine at load 10.
CLUSTER_RECORDS = 1_000

#: kgo tests left out of the cluster's comparison, with why: racy on any
#: cluster, Kafka's own included.
CLUSTER_RACY = {
    # Against a real broker it subscribes to two topics and __consumer_offsets
    # and polls until it has seen records of as many topics as it wants (two),
    # __consumer_offsets counting: when the records of __consumer_offsets and of
    # one topic come first (fetches from different leaders), it stops before the
    # other's. Run 8 times alone on Kafka 4.4's three-node cluster: 1 failed
    # ("did not consume from ...-orders"); 2 of 6 on brokerlite's.
    "Test848RegexBrokerResolves": "racy on a cluster (Kafka 4.4's too)",
}

SUITE = f"franz-go {kgo_suite.VERSION} pkg/kgo tests"


@pytest.fixture(scope="module")
def kgo_binary() -> tuple[Path, Path]:
    return kgo_suite.build()


def _measure(
    kgo_binary: tuple[Path, Path],
    broker: str,
    seeds: str,
    logs: Path,
    control: kgo_suite.Run | None = None,
    measured: kgo_suite.Run | None = None,
    **options: Any,
) -> kgo_suite.Run:
    """The suite's run against ``seeds`` (its output in ``logs``; ``measured`` when
    it ran already), the tests that failed in it and pass on ``control`` (or any,
    without one) run again alone (:func:`kgo_suite.retry`); each one passing only
    then is a warning."""
    if measured is None:
        measured = kgo_suite.run(*kgo_binary, broker, seeds, log=logs / "kgo.log", **options)
    among = set(measured.outcomes) if control is None else control.named("pass")
    kgo_suite.retry(*kgo_binary, measured, seeds, among, **options)
    for name, first in measured.retried.items():
        warnings.warn(
            f"kgo {name} on {broker} passed only when run again alone; in the whole "
            f"suite's run ({logs / 'kgo.log'}): {first}"[:1500],
            stacklevel=1,
        )
    return measured


#: What asks for the whole control (see the module's docstring).
WHOLE_CONTROL_ENV = ("TRAFKA_KGO_CONTROL", "TRAFKA_WRITE_COMPAT", "TRAFKA_KGO_CLUSTER")


def whole_control() -> bool:
    return any(os.environ.get(name) == "1" for name in WHOLE_CONTROL_ENV)


@pytest.fixture(scope="module")
def whole_runs(
    kgo_binary: tuple[Path, Path],
    kafka4: KafkaCluster,
    brokerlite_servers: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[str, Path, kgo_suite.Run]]:
    """The whole suite's run against a brokerlite node and, for the whole
    control, against Kafka side by side: each mostly waits on its broker (some
    50 s of wall time for 25 s of CPU), so together they take little more than
    one. By broker: (seeds, logs, run)."""
    targets = {
        "brokerlite": (brokerlite_servers, tmp_path_factory.mktemp("kgo-brokerlite-log")),
    }
    if whole_control():
        targets["Kafka 4.x"] = (kafka4.bootstrap_servers, tmp_path_factory.mktemp("kgo-kafka"))
    with ThreadPoolExecutor(len(targets)) as pool:
        runs = {
            broker: pool.submit(kgo_suite.run, *kgo_binary, broker, seeds, log=logs / "kgo.log")
            for broker, (seeds, logs) in targets.items()
        }
    return {broker: (*targets[broker], runs[broker].result()) for broker in targets}


@pytest.fixture(scope="module")
def on_kafka(
    kgo_binary: tuple[Path, Path], whole_runs: dict[str, tuple[str, Path, kgo_suite.Run]]
) -> kgo_suite.Run:
    """Kafka's run of the whole suite (the whole control only)."""
    if "Kafka 4.x" not in whole_runs:
        pytest.skip(
            "Kafka ran only the kgo tests brokerlite did not pass (test_kgo_suite_on_brokerlite);"
            " TRAFKA_KGO_CONTROL=1 runs its whole suite"
        )
    seeds, logs, measured = whole_runs["Kafka 4.x"]
    return _measure(kgo_binary, "Kafka 4.x", seeds, logs, measured=measured)


@pytest.fixture(scope="module")
def brokerlite_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A brokerlite of the module's own (the suite makes and deletes hundreds of
    topics), set as the shared ``brokerlite_peer`` is."""
    from trafka.brokerlite.server import broker_in_thread

    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("kgo-brokerlite"),
        group_initial_rebalance_delay_ms=0,
        log_segment_bytes=16 << 20,
        **INTERNAL_TOPIC_SIZES,
    ) as running:
        yield running.bootstrap_servers


@pytest.fixture(scope="module")
def on_brokerlite_cluster(
    kgo_binary: tuple[Path, Path],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[kgo_suite.Run, kgo_suite.Run]]:
    """The suite against three brokerlite processes (``KGO_TEST_RF=3``), with
    :data:`CLUSTER_RECORDS` records for its group and transaction runs.

    Opt-in (``TRAFKA_KGO_CLUSTER=1``): it costs 3-4 minutes of one worker,
    more than ``make test``'s 20-minute budget has room for."""
    if os.environ.get("TRAFKA_KGO_CLUSTER") != "1":
        pytest.skip("TRAFKA_KGO_CLUSTER=1 runs kgo's suite on a 3-node brokerlite (3-4 min)")
    from trafka.brokerlite.dev.local_cluster import ClusterProcesses

    on_kafka = request.getfixturevalue("on_kafka")  # the whole control (TRAFKA_KGO_CLUSTER)
    module_zk = request.getfixturevalue("module_zk")
    settings = {
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.replication.factor": 3,
        "transaction.state.log.replication.factor": 3,
    }
    root = tmp_path_factory.mktemp("kgo-cluster")
    cluster = ClusterProcesses(root, 3, settings=settings, zookeeper_connect=module_zk)
    try:
        cluster.start()
        measured = _measure(
            kgo_binary,
            "brokerlite (3 nodes)",
            cluster.bootstrap_servers,
            root,
            on_kafka,
            rf=3,
            records=CLUSTER_RECORDS,
        )
        yield measured, on_kafka
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def on_brokerlite(
    kgo_binary: tuple[Path, Path],
    whole_runs: dict[str, tuple[str, Path, kgo_suite.Run]],
    request: pytest.FixtureRequest,
) -> tuple[kgo_suite.Run, kgo_suite.Run]:
    """brokerlite's run, and Kafka's outcomes to judge it by: the whole
    control's, or (``make test``) those of the tests brokerlite did not pass,
    every test of the binary counting (one never reported is ``not run``), run
    on Kafka now and, when failing there, once more alone."""
    seeds, logs, measured = whole_runs["brokerlite"]
    if "Kafka 4.x" in whole_runs:
        control = request.getfixturevalue("on_kafka")
        return _measure(kgo_binary, "brokerlite", seeds, logs, control, measured=measured), control
    _measure(kgo_binary, "brokerlite", seeds, logs, measured=measured)
    for name in kgo_suite.listed(*kgo_binary) - set(measured.outcomes):
        measured.outcomes[name] = "not run"
    doubted = sorted(name for name, got in measured.outcomes.items() if got != "pass")
    kafka = request.getfixturevalue("kafka4")
    control = kgo_suite.Run("Kafka 4.x", {})
    if doubted:
        ran = kgo_suite.run(
            *kgo_binary, "Kafka 4.x", kafka.bootstrap_servers, log=logs / "kafka.log", only=doubted
        )
        control = _measure(kgo_binary, "Kafka 4.x", kafka.bootstrap_servers, logs, measured=ran)
    return measured, control


def _check_no_failure(run: kgo_suite.Run) -> None:
    failed = sorted(run.named("fail") | run.named("unfinished"))
    said = "\n".join(f"{name}: {run.reasons.get(name, '')}" for name in failed)
    assert not failed, f"{run.summary()}; failed:\n{said}\n{run.tail}"


def _check_passes_as(
    control: kgo_suite.Run,
    measured: kgo_suite.Run,
    apart: Iterable[str] = (),
    *,
    shares: bool = False,
    whole: bool = True,
) -> None:
    """Every test passing on ``control`` (``apart`` aside, and the share-group
    tests unless ``shares``) passes on ``measured``. A whole control passes
    some (else the harness, not a broker, is at fault); the control of the
    tests brokerlite did not pass may pass none."""
    assert control.named("pass") or not whole, control.summary()
    among = set(control.outcomes) - set(apart)
    if not shares:
        among -= kgo_suite.SHARE_GROUP_TESTS
    missed = kgo_suite.misses(control, measured, among)
    assert not missed, (
        f"{measured.summary()} ({control.summary()}); {len(missed)} passing on "
        f"{control.broker} do not pass on {measured.broker}:\n"
        + "\n".join(missed)
        + (f"\n{measured.tail}" if measured.tail else "")
    )


@pytest.mark.compat("Client suites", f"{SUITE}: the tests Kafka 4.x passes", peer="Kafka 4.x")
def test_kgo_suite_on_kafka(on_kafka: kgo_suite.Run) -> None:
    """The control: no kgo test fails on Kafka 4.x (those needing SASL skip)."""
    _check_no_failure(on_kafka)


@pytest.mark.compat("Client suites", f"{SUITE}: the tests Kafka 4.x passes", peer="brokerlite")
def test_kgo_suite_on_brokerlite(on_brokerlite: tuple[kgo_suite.Run, kgo_suite.Run]) -> None:
    measured, control = on_brokerlite
    _check_passes_as(control, measured, whole=whole_control())
    _check_no_failure(measured)


@pytest.mark.compat(
    "Client suites", f"{SUITE}: the tests Kafka 4.x passes, on a 3-node cluster", peer="brokerlite"
)
def test_kgo_suite_on_brokerlite_cluster(
    on_brokerlite_cluster: tuple[kgo_suite.Run, kgo_suite.Run],
) -> None:
    """Kafka's single node is the control here too (its three-node cluster is
    kept to the workers of tests/conftest.py's CONFINED files); the tests of
    :data:`CLUSTER_RACY` are left out, the share-group tests are in."""
    measured, on_kafka = on_brokerlite_cluster
    _check_passes_as(on_kafka, measured, CLUSTER_RACY, shares=True)
    racy = set(CLUSTER_RACY)
    _check_no_failure(
        dataclasses.replace(
            measured,
            outcomes={n: o for n, o in measured.outcomes.items() if n not in racy},
        )
    )


@pytest.mark.compat("Client suites", f"{SUITE}: share groups", peer="Kafka 4.x")
def test_kgo_share_groups_on_kafka(on_kafka: kgo_suite.Run) -> None:
    ran = {name: on_kafka.outcomes.get(name) for name in kgo_suite.SHARE_GROUP_TESTS}
    assert all(got == "pass" for got in ran.values()), ran


@pytest.mark.compat("Client suites", f"{SUITE}: share groups", peer="brokerlite")
def test_kgo_share_groups_on_brokerlite(on_brokerlite: tuple[kgo_suite.Run, kgo_suite.Run]) -> None:
    """franz-go's share-group tests run (not skip) and pass on brokerlite (issue
    #84), and none passing on Kafka misses here."""
    measured, control = on_brokerlite
    missed = kgo_suite.misses(control, measured, set(kgo_suite.SHARE_GROUP_TESTS))
    assert not missed, "\n".join(missed)
    ran = {name: measured.outcomes.get(name) for name in kgo_suite.SHARE_GROUP_TESTS}
    assert all(got == "pass" for got in ran.values()), ran


def test_parse_reads_each_top_level_outcome() -> None:
    """The reading of ``-test.v`` output: interleaved parallel tests, subtests left
    out, a skip's reason, a failure's lines, a test started and never ended."""
    output = "\n".join(
        [
            "=== RUN   TestA",
            "=== PAUSE TestA",
            "=== RUN   TestB",
            "=== PAUSE TestB",
            "=== RUN   TestC",
            "=== RUN   TestC/sub",
            "--- PASS: TestC (0.00s)",
            "    --- PASS: TestC/sub (0.00s)",
            "=== RUN   TestD",
            "=== PAUSE TestD",
            "=== CONT  TestA",
            "    a_test.go:1: broker does not do it",
            "=== CONT  TestB",
            "[12:00:00.000 1][INFO] a client's log line",
            "    b_test.go:2: did not consume from t",
            "=== NAME  TestA",
            "--- SKIP: TestA (0.00s)",
            "--- FAIL: TestB (1.50s)",
            "=== CONT  TestD",
            "panic: test timed out after 10m0s",
        ]
    )
    run = kgo_suite.parse("broker", output)
    assert run.outcomes == {
        "TestA": "skip",
        "TestB": "fail",
        "TestC": "pass",
        "TestD": "unfinished",
    }
    assert run.reasons == {
        "TestA": "a_test.go:1: broker does not do it",
        "TestB": "b_test.go:2: did not consume from t",
    }
    control = kgo_suite.Run("control", dict.fromkeys(run.outcomes, "pass"))
    assert kgo_suite.misses(control, run) == [
        "TestA: skip (a_test.go:1: broker does not do it)",
        "TestB: fail (b_test.go:2: did not consume from t)",
        "TestD: unfinished",
    ]
