"""franz-go's own ``pkg/kgo`` tests (v1.22.3, from the Go module proxy; see
kgo_suite.py) run unchanged against a brokerlite node, with Apache Kafka 4.x as
the control: every kgo test that passes on Kafka must pass on brokerlite (issue
#84). The three-node cluster's run is test_kgo_suite_cluster.py's.

The suite runs once per broker (module fixtures): against a brokerlite of its
own (one node, ``KGO_TEST_RF=1``) and the worker's shared Kafka 4.x node. A test
that skips on brokerlite while it runs on Kafka is a miss, as a failure is; so
is a test of the binary (``-test.list``) that brokerlite's run never reported.

Kafka is the control: it judges brokerlite's misses. Both are pinned (Kafka
4.4.0, franz-go v1.22.3), so which kgo tests Kafka passes does not change with
trafka's code. In ``make test`` Kafka therefore runs only the tests brokerlite
did not pass (none, on a good day: a run of seconds instead of its whole
suite's 50 s of wall and some 30 s of CPU, Kafka's and the Go binary's), and
each that passes there is a miss: the verdict the whole control would give
(kgo_suite.control_of_misses). The whole control (Kafka's own run of every
test, and the page's Kafka rows, ``test_kgo_suite_on_kafka``) runs side by side
with brokerlite's under ``TRAFKA_KGO_CONTROL=1`` and ``make compat``
(``TRAFKA_WRITE_COMPAT=1``). franz-go's share-group tests (which need share
groups at Kafka 4.2's protocol, ShareFetch and ShareAcknowledge v2, and skip
without them) are measured apart, as their own row.

A kgo test that fails (or never ends) in the whole suite's run is run again
alone (kgo_suite.retry): some have deadlines of their own (a 30 s poll, a 15 s
wait) that a loaded machine's broker can miss among the whole suite's traffic.
One that passes then counts, with a warning naming it and its first failure.

Cost, on a loaded two-core machine (load 9-11): Kafka 4.x's run some 50 s and a
brokerlite node's 45 s, run side by side (``-test.parallel 8``, ``KGO_TEST_RECORDS`` 10,000
instead of franz-go's 500,000: 10 s of the Go binary's CPU, 15 s of the
broker's). The file is marked slow.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kgo_suite
import pytest
from kafka_fixtures import INTERNAL_TOPIC_SIZES
from kafka_peers import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(kgo_suite.DEADLINE_S + 300)]

SUITE = kgo_suite.SUITE


@pytest.fixture(scope="module")
def kgo_binary() -> tuple[Path, Path]:
    return kgo_suite.build()


#: What asks for the whole control (see the module's docstring).
WHOLE_CONTROL_ENV = ("TRAFKA_KGO_CONTROL", "TRAFKA_WRITE_COMPAT")


def whole_control() -> bool:
    return any(os.environ.get(name) == "1" for name in WHOLE_CONTROL_ENV)


@pytest.fixture(scope="module")
def whole_runs(
    kgo_binary: tuple[Path, Path],
    brokerlite_servers: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> dict[str, tuple[str, Path, kgo_suite.Run]]:
    """The whole suite's run against a brokerlite node and, for the whole
    control, against Kafka side by side: each mostly waits on its broker (some
    50 s of wall time for 25 s of CPU), so together they take little more than
    one. By broker: (seeds, logs, run). The worker's Kafka node is asked for
    only then (or by the control of brokerlite's misses, when it has some)."""
    targets = {
        "brokerlite": (brokerlite_servers, tmp_path_factory.mktemp("kgo-brokerlite-log")),
    }
    if whole_control():
        kafka4: KafkaCluster = request.getfixturevalue("kafka4")
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
    return kgo_suite.measure(kgo_binary, "Kafka 4.x", seeds, logs, measured=measured)


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
        measured = kgo_suite.measure(kgo_binary, "brokerlite", seeds, logs, control, measured)
        return measured, control
    kgo_suite.measure(kgo_binary, "brokerlite", seeds, logs, measured=measured)

    def kafka() -> str:
        return str(request.getfixturevalue("kafka4").bootstrap_servers)

    return measured, kgo_suite.control_of_misses(kgo_binary, measured, kafka, logs)


@pytest.mark.compat("Client suites", f"{SUITE}: the tests Kafka 4.x passes", peer="Kafka 4.x")
def test_kgo_suite_on_kafka(on_kafka: kgo_suite.Run) -> None:
    """The control: no kgo test fails on Kafka 4.x (those needing SASL skip)."""
    kgo_suite.check_no_failure(on_kafka)


@pytest.mark.compat("Client suites", f"{SUITE}: the tests Kafka 4.x passes", peer="brokerlite")
def test_kgo_suite_on_brokerlite(on_brokerlite: tuple[kgo_suite.Run, kgo_suite.Run]) -> None:
    measured, control = on_brokerlite
    kgo_suite.check_passes_as(control, measured, whole=whole_control())
    kgo_suite.check_no_failure(measured)


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
