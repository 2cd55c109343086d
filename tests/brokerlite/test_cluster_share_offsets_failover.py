"""The share-group offsets admin across ``kill -9`` of the share coordinator's broker.

Three broker processes and a real ZooKeeper (the scenario and consumers of
``test_cluster_share_failover.py``). KIP-932: AlterShareGroupOffsets and
DeleteGroups are answered by the group coordinator, which changes the
share-partitions' state at their share coordinator (``__share_group_state``).
Killed with ``kill -9``: that share coordinator's broker. The admin's requests
are then answered by its partition's new leader; librdkafka's ShareConsumer
reads from the new start offset, and after DeleteGroups (the killed broker
restarted) a new group of the same name reads everything from
``share.auto.offset.reset``.

confluent-kafka's AdminClient (2.16) has no share-group offsets calls: trafka's
admin sends them.
"""

from __future__ import annotations

import pytest
from cluster_helpers import wait_for
from test_cluster_share_failover import (
    RECORDS,
    Ours,
    Theirs,
    accept_until,
    cluster,
    group_config_seen,
    prepare,
    values,
)

from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.sdk import SharePartitionOffsetInfo, TopicPartition
from trafka.sdk.blocking import Admin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

__all__ = ["cluster"]  # (the fixture, imported to be used here)


def test_offsets_admin_and_delete_groups_across_kill_9_of_the_share_coordinator(
    cluster: ClusterProcesses,
) -> None:
    group, partition, data_leader, state_leader = prepare(cluster)
    assert data_leader != state_leader
    bs = cluster.bootstrap_servers
    tp = TopicPartition("jobs", partition)
    first = Ours(bs, group, max_records=5)
    try:
        taken, accept = first.take()
        accept()
    finally:
        first.close()
    with Admin(bootstrap_servers=bs) as admin:
        found = admin.list_share_group_offsets(group, [tp])[tp]
        assert found is not None and found.start_offset == len(taken)

        cluster.kill(state_leader)
        # Answered once the key's __share_group_state partition has a new leader.
        admin.alter_share_group_offsets(group, {tp: 30})
        assert admin.list_share_group_offsets(group, [tp]) == {
            tp: SharePartitionOffsetInfo(30, 0, RECORDS - 30)
        }
        theirs = Theirs(bs, group)
        try:
            rest = accept_until(theirs, lambda t: len(t) >= RECORDS - 30)
        finally:
            theirs.close()
        assert sorted(rest) == sorted((b"r%d" % i, 1) for i in range(30, RECORDS))

        cluster.start_node(state_leader)
        admin.delete_groups([group])
        assert admin.list_share_group_offsets(group, [tp]) == {tp: None}
        admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    for node in (1, 2, 3):
        wait_for(
            f"node {node} to apply the group's configs",
            lambda n=node: group_config_seen(cluster, n, group) or None,
            30,
        )
    again = Ours(bs, group)
    try:
        everything = accept_until(again, lambda t: len(t) >= RECORDS)
    finally:
        again.close()
    assert sorted(values(everything)) == sorted(b"r%d" % i for i in range(RECORDS))
    assert {count for _, count in everything} == {1}
