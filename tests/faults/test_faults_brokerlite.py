"""Short fault schedules on a brokerlite cluster (ZooKeeper and three brokers, each in a
network namespace of its own; the clients on a host of their own, ``c1``; see
tests/faults/): one seeded cycle of each, under the workloads of workload.py and
txn_workload.py, checked by checker.py and txn_workload.check_transactions.

Kafka's promises under test. ``acks=all`` (docs, ``min.insync.replicas`` and the
design section "Replicated Logs: Quorums, ISRs, and State Machines",
https://kafka.apache.org/documentation/#design_replicatedlog): with ``acks=all``
and ``min.insync.replicas=2`` a write is acknowledged once every in-sync replica
has it and at least two do, and an acknowledged write is not lost as long as one
in-sync replica survives (no unclean election); an idempotent producer writes
each record once and in order per partition (KIP-98); a committed offset is what
the group resumes from, so it does not go backwards unless a client commits a
lower one (ours never does). Transactions (KIP-98, KIP-447, the design section
"Message Delivery Semantics", https://kafka.apache.org/documentation/#semantics):
a ``read_committed`` consumer sees all of a transaction's records or none, none
of an aborted one; offsets sent to a transaction are committed with it or not at
all, so consume-process-produce handles each input once. The proxy
(docs/proxy.md): a delivery report names the record's true offset or none. None
of the faults here takes down more than one broker, so none of these promises may
break.

Each fault is held past the timeout it is about (seeded: the seed is in the test's
id and printed; ``python tests/faults/run.py --schedules NAME --workloads W --seed N``
replays it), and the test also checks that the fault acted (the cluster reacted: an
ISR shrank, a leader or the controller moved; for a cut between a client or the
proxy and one leader, that leader's partitions got no acknowledgement while
another partition's did). The checker is shown not to be blind.
"""

from __future__ import annotations

import os

import pytest
from schedules import assert_kept, run_schedule

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SEED = int(os.environ.get("TRAFKA_FAULTS_SEED", "64"))


@pytest.mark.parametrize(
    ("schedule", "workload"),
    [
        ("leader-zk", "txn"),
        ("pause", "acks"),
        ("leader-followers", "acks"),
        ("controller", "acks"),
        ("client-leader", "txn"),
        ("proxy-leader", "proxy-journal"),
    ],
)
def test_schedule_keeps_promises(ns_cluster, schedule, workload):
    report, seen = run_schedule(ns_cluster, schedule, SEED, workload=workload)
    assert_kept(report, seen, SEED)
