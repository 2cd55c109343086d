"""The control: one short schedule of tests/faults on Apache Kafka 3.9 (ZooKeeper and
three brokers in network namespaces, the same settings as brokerlite's), the
transactional workload under a leader cut from ZooKeeper. Kafka keeps the promises
that test_faults_brokerlite.py's docstring lists (with their sources); this shows
the workload and checker find nothing broken where Kafka keeps them, so a finding
on brokerlite is brokerlite's."""

from __future__ import annotations

import pytest
from late_requests import abandoned_commit_lands_late, late_txn_offset_commit
from schedules import assert_kept, run_schedule
from test_faults_brokerlite import SEED

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.timeout(900)]


def test_kafka_keeps_promises_under_a_leader_cut_from_zookeeper(kafka_ns_cluster):
    report, seen = run_schedule(kafka_ns_cluster, "leader-zk", SEED, workload="txn")
    assert_kept(report, seen, SEED)


def test_kafka_applies_an_abandoned_commit_after_a_later_one(kafka_ns_cluster):
    """What test_faults_brokerlite.test_an_abandoned_commit_lands_after_a_later_one_as_on_kafka
    holds brokerlite to: Kafka's own behaviour (its docstring says why)."""
    seen = abandoned_commit_lands_late(kafka_ns_cluster)
    assert seen[0] == 10 and seen[-1] == 5, seen


def test_kafka_refuses_a_txn_offset_commit_landing_after_its_abort(kafka_ns_cluster):
    """What test_faults_brokerlite.test_a_txn_offset_commit_landing_after_its_abort_leaves_nothing_pending
    holds brokerlite to (its docstring says why): Kafka's own behaviour."""
    seen = late_txn_offset_commit(kafka_ns_cluster)
    assert len(seen) >= 3 and all(s == 1 for s in seen[-3:]), seen
