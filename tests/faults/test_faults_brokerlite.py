"""Short fault schedules on a brokerlite cluster (ZooKeeper and three brokers, each in a
network namespace of its own; see tests/faults/): one seeded cycle of each, under
the workload of workload.py, checked by checker.py.

Kafka's promise under test (docs, ``min.insync.replicas`` and the design section
"Replicated Logs: Quorums, ISRs, and State Machines",
https://kafka.apache.org/documentation/#design_replicatedlog): with ``acks=all``
and ``min.insync.replicas=2`` a write is acknowledged once every in-sync replica
has it and at least two do, and an acknowledged write is not lost as long as one
in-sync replica survives (no unclean election); an idempotent producer writes
each record once and in order per partition (KIP-98); a committed offset is what
the group resumes from, so it does not go backwards unless a client commits a
lower one (ours never does). None of the faults here takes down more than one
broker, so none of these promises may break: no acknowledged record lost, no
delivery report naming an offset that does not hold its record, no duplicate or
reordering within a key, nothing a consumer read later gone, no committed offset
going backwards.

Each fault is held past the timeout it is about (seeded: the seed is in the test's
id and printed; ``python tests/faults/run.py --schedules NAME --seed N`` replays
it), and the test also checks that the cluster reacted to it (an ISR shrank, a
leader or the controller moved): a fault that did nothing proves nothing. The
checker is shown to find a record removed from the log read back (it is not
blind).
"""

from __future__ import annotations

import os

import pytest
from checker import check
from schedules import run_schedule

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SEED = int(os.environ.get("TRAFKA_FAULTS_SEED", "64"))


@pytest.mark.parametrize("schedule", ["leader-zk", "pause", "leader-followers", "controller"])
def test_schedule_keeps_acks_all_promises(ns_cluster, schedule):
    report, seen = run_schedule(ns_cluster, schedule, SEED)
    assert seen["effects"] == [True], f"the fault had no effect on the cluster (seed {SEED})"
    assert report.acked > 0
    assert report.broken == {}, f"seed {SEED}:\n{report.table()}"
    # The checker is not blind: one acknowledged record taken out of the log is found.
    partition, offset = next(iter(seen["told"].acked.values()))
    tampered = {p: list(values) for p, values in seen["log"].items()}
    tampered[partition][offset] = b""
    found = check(seen["told"], tampered, [], 0.0).counts
    assert found.get("lost") == 1, found
