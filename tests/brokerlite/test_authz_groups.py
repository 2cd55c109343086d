"""ACL enforcement in the group, transaction and share-group handlers, as Kafka's
broker enforces it: through the sans-IO core with SASL-logged-in principals (``admin``
is a super user on connection 1, ``alice`` an ordinary user on connection 2), and
end to end with confluent-kafka over SASL_PLAINTEXT."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import create
from test_share_fetch import ack_request, fetch_request

from trafka.brokerlite import broker_in_thread
from trafka.brokerlite.security.authorizer import CLUSTER_NAME, AclBinding
from trafka.codec.acl import AclOperation as Op
from trafka.codec.acl import AclPermissionType, PatternType
from trafka.codec.acl import AclResourceType as Res
from trafka.codec.errors import ErrorCode as E
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k12_heartbeat as hb
from trafka.codec.messages import k13_leave_group as lg
from trafka.codec.messages import k14_sync_group as sg
from trafka.codec.messages import k15_describe_groups as dg
from trafka.codec.messages import k16_list_groups as lsg
from trafka.codec.messages import k22_init_producer_id as ipi
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k27_write_txn_markers as wtm
from trafka.codec.messages import k28_txn_offset_commit as toc
from trafka.codec.messages import k42_delete_groups as dlg
from trafka.codec.messages import k47_offset_delete as od
from trafka.codec.messages import k65_describe_transactions as dt
from trafka.codec.messages import k66_list_transactions as lt
from trafka.codec.messages import k68_consumer_group_heartbeat as cgh
from trafka.codec.messages import k69_consumer_group_describe as cgd
from trafka.codec.messages import k76_share_group_heartbeat as sgh
from trafka.codec.messages import k77_share_group_describe as sgd
from trafka.codec.messages import k90_describe_share_group_offsets as dso
from trafka.codec.messages import k91_alter_share_group_offsets as aso
from trafka.codec.messages import k92_delete_share_group_offsets as dlo

pytestmark = pytest.mark.timeout(60)

ADMIN, ALICE = 1, 2
USERS = (("alice", "pw"), ("admin", "pw"))
SECURED = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_users": USERS,
    "authorizer_class_name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super_users": ("User:admin",),
}
GROUP_OPS = (Op.READ, Op.DELETE, Op.DESCRIBE)


@pytest.fixture
def core(open_core: Any) -> Any:
    core = open_core(**SECURED)
    core.login("admin", "pw", conn_id=ADMIN)
    core.login("alice", "pw", conn_id=ALICE, peer="127.0.0.1:50001")
    create(core, "t1", 2)
    create(core, "t2", 1)
    return core


def allow(
    core: Any,
    rtype: int,
    name: str,
    op: int,
    *,
    prefixed: bool = False,
    deny: bool = False,
    principal: str = "User:alice",
) -> None:
    binding = AclBinding(
        int(rtype),
        name,
        int(PatternType.PREFIXED if prefixed else PatternType.LITERAL),
        principal,
        "*",
        int(op),
        int(AclPermissionType.DENY if deny else AclPermissionType.ALLOW),
    )
    assert core.broker.authorizer.create([binding]) == [(E.NONE, None)]


def alice(core: Any, key: int, version: int, body: Any) -> Any:
    return core.call(key, version, body, conn_id=ALICE)


def admin(core: Any, key: int, version: int, body: Any) -> Any:
    return core.call(key, version, body, conn_id=ADMIN)


def codes(topics: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in topics for p in t.partitions}


def commit_body(group: str, topics: dict[str, list[int]]) -> oc.OffsetCommitRequest:
    return oc.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            oc.OffsetCommitRequest.OffsetCommitRequestTopic(
                name=name,
                partitions=[
                    oc.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=5
                    )
                    for p in parts
                ],
            )
            for name, parts in topics.items()
        ],
    )


def join_body(group: str) -> jg.JoinGroupRequest:
    return jg.JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[jg.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )


# -- classic group membership -------------------------------------------------------------


def test_join_group_needs_read_on_the_group_prefixed_acls_count(core: Any) -> None:
    assert alice(core, 11, 5, join_body("app-1")).error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "app-", Op.READ, prefixed=True)
    # Past authorization: the coordinator's first answer to a new member.
    assert alice(core, 11, 5, join_body("app-1")).error_code == E.MEMBER_ID_REQUIRED
    assert alice(core, 11, 5, join_body("other")).error_code == E.GROUP_AUTHORIZATION_FAILED


def test_a_deny_overrides_an_allow_and_super_users_pass_anyway(core: Any) -> None:
    allow(core, Res.GROUP, "g", Op.READ)
    allow(core, Res.GROUP, "g", Op.READ, prefixed=True, deny=True, principal="User:*")
    assert alice(core, 11, 5, join_body("g")).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert admin(core, 11, 5, join_body("g")).error_code == E.MEMBER_ID_REQUIRED


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (12, 4, hb.HeartbeatRequest(group_id="g", generation_id=1, member_id="m")),
        (14, 5, sg.SyncGroupRequest(group_id="g", generation_id=1, member_id="m")),
        (
            13,
            5,
            lg.LeaveGroupRequest(
                group_id="g", members=[lg.LeaveGroupRequest.MemberIdentity(member_id="m")]
            ),
        ),
    ],
    ids=["heartbeat", "sync", "leave"],
)
def test_membership_calls_need_read_on_the_group(
    core: Any, key: int, version: int, body: Any
) -> None:
    assert alice(core, key, version, body).error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "g", Op.READ)
    outcome = core.send(key, version, body, conn_id=ALICE)
    answer = core.decode(outcome)
    assert answer.error_code != E.GROUP_AUTHORIZATION_FAILED


# -- offsets ------------------------------------------------------------------------------


def test_offset_commit_needs_read_on_the_group_and_per_topic(core: Any) -> None:
    body = commit_body("g", {"t1": [0, 1], "t2": [0]})
    assert set(codes(alice(core, 8, 9, body).topics).values()) == {E.GROUP_AUTHORIZATION_FAILED}
    allow(core, Res.GROUP, "g", Op.READ)
    allow(core, Res.TOPIC, "t1", Op.READ)
    assert codes(alice(core, 8, 9, body).topics) == {
        ("t1", 0): E.NONE,
        ("t1", 1): E.NONE,
        ("t2", 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    committed = core.broker.groups.store.group_offsets("g")
    assert set(committed) == {("t1", 0), ("t1", 1)}


def test_offset_fetch_needs_describe_and_hides_undescribable_topics(core: Any) -> None:
    admin(core, 8, 9, commit_body("g", {"t1": [0], "t2": [0]}))
    named = [of.OffsetFetchRequest.OffsetFetchRequestTopics(name=n, partition_indexes=[0]) for n in ("t1", "t2")]  # fmt: skip
    v8 = of.OffsetFetchRequest(groups=[of.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=named), of.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="h", topics=None)])  # fmt: skip
    answer = alice(core, 9, 8, v8)
    assert [g.error_code for g in answer.groups] == [E.GROUP_AUTHORIZATION_FAILED] * 2
    allow(core, Res.GROUP, "g", Op.DESCRIBE)
    allow(core, Res.TOPIC, "t1", Op.READ)  # (READ implies DESCRIBE)
    first, second = alice(core, 9, 8, v8).groups
    assert second.error_code == E.GROUP_AUTHORIZATION_FAILED
    got = {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in first.topics for p in t.partitions}  # fmt: skip
    assert got == {("t1", 0): (5, E.NONE), ("t2", 0): (-1, E.TOPIC_AUTHORIZATION_FAILED)}
    every = alice(core, 9, 8, of.OffsetFetchRequest(groups=[of.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None)]))  # fmt: skip
    assert [t.name for t in every.groups[0].topics] == ["t1"]
    # Before v8: one group, the error at the top (v2+) or on each partition (v1).
    one = [of.OffsetFetchRequest.OffsetFetchRequestTopic(name="t1", partition_indexes=[0])]
    assert alice(core, 9, 7, of.OffsetFetchRequest(group_id="h", topics=one)).error_code == E.GROUP_AUTHORIZATION_FAILED  # fmt: skip
    v1 = alice(core, 9, 1, of.OffsetFetchRequest(group_id="h", topics=one))
    assert codes(v1.topics) == {("t1", 0): E.GROUP_AUTHORIZATION_FAILED}
    assert codes(alice(core, 9, 7, of.OffsetFetchRequest(group_id="g", topics=None)).topics) == {("t1", 0): E.NONE}  # fmt: skip


def test_offset_delete_needs_delete_on_the_group_and_read_per_topic(core: Any) -> None:
    admin(core, 8, 9, commit_body("g", {"t1": [0], "t2": [0]}))
    body = od.OffsetDeleteRequest(group_id="g", topics=[od.OffsetDeleteRequest.OffsetDeleteRequestTopic(name=n, partitions=[od.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]) for n in ("t1", "t2")])  # fmt: skip
    assert alice(core, 47, 0, body).error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "g", Op.DELETE)
    allow(core, Res.TOPIC, "t1", Op.READ)
    answer = alice(core, 47, 0, body)
    assert answer.error_code == E.NONE
    assert codes(answer.topics) == {("t1", 0): E.NONE, ("t2", 0): E.TOPIC_AUTHORIZATION_FAILED}
    assert set(core.broker.groups.store.group_offsets("g")) == {("t2", 0)}


# -- coordinators and group administration ------------------------------------------------


def test_find_coordinator_needs_describe_per_key(core: Any) -> None:
    allow(core, Res.GROUP, "g", Op.DESCRIBE)
    allow(core, Res.TRANSACTIONAL_ID, "tx-", Op.DESCRIBE, prefixed=True)
    groups = alice(core, 10, 4, fc.FindCoordinatorRequest(key_type=0, coordinator_keys=["g", "h"]))
    assert [(c.key, c.error_code, c.node_id) for c in groups.coordinators] == [
        ("g", E.NONE, core.broker.node_id),
        ("h", E.GROUP_AUTHORIZATION_FAILED, -1),
    ]
    txns = alice(core, 10, 4, fc.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx-1", "x"]))
    assert [c.error_code for c in txns.coordinators] == [E.NONE, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]  # fmt: skip
    old = alice(core, 10, 3, fc.FindCoordinatorRequest(key="x", key_type=1))
    assert (old.error_code, old.node_id) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)


def test_describe_groups_per_group_with_the_principal_s_operations(core: Any) -> None:
    admin(core, 8, 9, commit_body("g", {"t1": [0]}))
    allow(core, Res.GROUP, "g", Op.DESCRIBE)
    answer = alice(core, 15, 5, dg.DescribeGroupsRequest(groups=["g", "h"], include_authorized_operations=True))  # fmt: skip
    g, h = answer.groups
    assert (g.group_id, g.error_code, g.group_state) == ("g", E.NONE, "Empty")
    assert g.authorized_operations == 1 << Op.DESCRIBE
    assert (h.group_id, h.error_code) == ("h", E.GROUP_AUTHORIZATION_FAILED)
    mine = admin(core, 15, 5, dg.DescribeGroupsRequest(groups=["g"], include_authorized_operations=True))  # fmt: skip
    assert mine.groups[0].authorized_operations == sum(1 << op for op in GROUP_OPS)


def test_list_groups_shows_describable_groups_or_all_with_cluster_describe(core: Any) -> None:
    for group in ("app-1", "app-2", "other"):
        admin(core, 8, 9, commit_body(group, {"t1": [0]}))
    assert alice(core, 16, 5, lsg.ListGroupsRequest()).groups == []
    allow(core, Res.GROUP, "app-", Op.READ, prefixed=True)
    assert [g.group_id for g in alice(core, 16, 5, lsg.ListGroupsRequest()).groups] == ["app-1", "app-2"]  # fmt: skip
    allow(core, Res.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)
    assert len(alice(core, 16, 5, lsg.ListGroupsRequest()).groups) == 3


def test_delete_groups_needs_delete_per_group(core: Any) -> None:
    for group in ("g", "h"):
        admin(core, 8, 9, commit_body(group, {"t1": [0]}))
    allow(core, Res.GROUP, "g", Op.DELETE)
    answer = alice(core, 42, 2, dlg.DeleteGroupsRequest(groups_names=["h", "g"]))
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("h", E.GROUP_AUTHORIZATION_FAILED),
        ("g", E.NONE),
    ]
    assert core.broker.groups.store.group_offsets("h")
    assert not core.broker.groups.store.group_offsets("g")


# -- KIP-848 consumer groups --------------------------------------------------------------


def consumer_hb(group: str, topics: list[str]) -> cgh.ConsumerGroupHeartbeatRequest:
    return cgh.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        rebalance_timeout_ms=10_000,
        subscribed_topic_names=topics,
        topic_partitions=[],
    )


def test_consumer_group_heartbeat_needs_group_read_and_topic_describe(core: Any) -> None:
    assert alice(core, 68, 1, consumer_hb("g", ["t1"])).error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "g", Op.READ)
    assert alice(core, 68, 1, consumer_hb("g", ["t1"])).error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert "g" not in core.broker.groups.consumer.groups  # (refused before the coordinator)
    allow(core, Res.TOPIC, "t1", Op.DESCRIBE)
    joined = alice(core, 68, 1, consumer_hb("g", ["t1"]))
    assert (joined.error_code, joined.member_epoch) == (E.NONE, 1)


def test_consumer_group_describe_hides_groups_with_undescribable_topics(core: Any) -> None:
    assert admin(core, 68, 1, consumer_hb("g", ["t1"])).error_code == E.NONE
    body = cgd.ConsumerGroupDescribeRequest(group_ids=["g", "h"], include_authorized_operations=True)  # fmt: skip
    assert [x.error_code for x in alice(core, 69, 0, body).groups] == [E.GROUP_AUTHORIZATION_FAILED] * 2  # fmt: skip
    allow(core, Res.GROUP, "g", Op.DESCRIBE)
    g = alice(core, 69, 0, body).groups[0]
    assert (g.error_code, g.members) == (E.TOPIC_AUTHORIZATION_FAILED, [])
    allow(core, Res.TOPIC, "t1", Op.DESCRIBE)
    g, h = alice(core, 69, 0, body).groups
    assert (g.error_code, len(g.members), g.authorized_operations) == (E.NONE, 1, 1 << Op.DESCRIBE)
    assert h.error_code == E.GROUP_AUTHORIZATION_FAILED


def test_group_describes_without_an_authorizer_report_every_group_operation(
    open_core: Any,
) -> None:
    """As Kafka without an authorizer: asked-for operations are all of a group's."""
    core = open_core()
    create(core, "t1")
    assert core.call(68, 1, consumer_hb("g", ["t1"])).error_code == E.NONE
    every = sum(1 << op for op in (Op.READ, Op.DELETE, Op.DESCRIBE))
    for asked, expected in ((True, every), (False, -(2**31))):
        body = cgd.ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=asked)  # fmt: skip
        (g,) = core.call(69, 0, body).groups
        assert (g.error_code, g.authorized_operations) == (E.NONE, expected)


# -- transactions -------------------------------------------------------------------------


def init_pid(tid: str | None) -> ipi.InitProducerIdRequest:
    return ipi.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )


def test_init_producer_id_transactional_needs_write_on_the_id(core: Any) -> None:
    assert alice(core, 22, 5, init_pid("tx-1")).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # fmt: skip
    allow(core, Res.TRANSACTIONAL_ID, "tx-", Op.WRITE, prefixed=True)
    granted = alice(core, 22, 5, init_pid("tx-1"))
    assert (granted.error_code, granted.producer_id >= 0) == (E.NONE, True)


@pytest.mark.parametrize("grant", ["idempotent-write", "write-some-topic"])
def test_init_producer_id_idempotent_needs_idempotent_write_or_some_topic_write(
    core: Any, grant: str
) -> None:
    assert alice(core, 22, 5, init_pid(None)).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    if grant == "idempotent-write":
        allow(core, Res.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)
    else:
        allow(core, Res.TOPIC, "t2", Op.WRITE)
    assert alice(core, 22, 5, init_pid(None)).error_code == E.NONE


def started(core: Any, tid: str) -> tuple[int, int]:
    allow(core, Res.TRANSACTIONAL_ID, tid, Op.WRITE)
    answer = alice(core, 22, 5, init_pid(tid))
    assert answer.error_code == E.NONE
    return answer.producer_id, answer.producer_epoch


def add_partitions(tid: str, pid: int, epoch: int) -> apt.AddPartitionsToTxnRequest:
    return apt.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t1", partitions=[0, 1]),
            apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t2", partitions=[0, 7]),
        ],
    )


def txn_codes(answer: Any) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def test_add_partitions_to_txn_needs_write_on_the_id_and_each_topic(core: Any) -> None:
    body = add_partitions("tx", 1, 0)
    assert set(txn_codes(alice(core, 24, 3, body)).values()) == {E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}  # fmt: skip
    pid, epoch = started(core, "tx")
    body = add_partitions("tx", pid, epoch)
    allow(core, Res.TOPIC, "t1", Op.WRITE)
    assert txn_codes(alice(core, 24, 3, body)) == {
        ("t1", 0): E.OPERATION_NOT_ATTEMPTED,
        ("t1", 1): E.OPERATION_NOT_ATTEMPTED,
        ("t2", 0): E.TOPIC_AUTHORIZATION_FAILED,
        ("t2", 7): E.TOPIC_AUTHORIZATION_FAILED,
    }
    allow(core, Res.TOPIC, "t2", Op.WRITE)
    # Authorized: the coordinator's own answer (partition 7 does not exist).
    assert txn_codes(alice(core, 24, 3, body))[("t2", 7)] == E.UNKNOWN_TOPIC_OR_PARTITION
    # v4+ is the brokers' form: CLUSTER_ACTION on the cluster.
    batch = apt.AddPartitionsToTxnRequest(transactions=[])
    assert alice(core, 24, 4, batch).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert admin(core, 24, 4, batch).error_code == E.NONE


def test_add_offsets_end_txn_and_txn_offset_commit(core: Any) -> None:
    offsets = aot.AddOffsetsToTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g")  # fmt: skip
    assert alice(core, 25, 4, offsets).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    end = et.EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True)
    assert alice(core, 26, 5, end).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    pid, epoch = started(core, "tx")
    offsets = aot.AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g")  # fmt: skip
    assert alice(core, 25, 4, offsets).error_code == E.GROUP_AUTHORIZATION_FAILED
    commit = toc.TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=pid,
        producer_epoch=epoch,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            toc.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name=n,
                partitions=[
                    toc.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=3
                    )
                ],
            )
            for n in ("t1", "t2")
        ],
    )
    assert set(codes(alice(core, 28, 4, commit).topics).values()) == {E.GROUP_AUTHORIZATION_FAILED}
    allow(core, Res.GROUP, "g", Op.READ)
    assert alice(core, 25, 4, offsets).error_code == E.NONE
    allow(core, Res.TOPIC, "t1", Op.READ)
    assert codes(alice(core, 28, 4, commit).topics) == {("t1", 0): E.NONE, ("t2", 0): E.TOPIC_AUTHORIZATION_FAILED}  # fmt: skip
    assert alice(core, 26, 5, et.EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True)).error_code == E.NONE  # fmt: skip
    core.poll()
    assert core.broker.groups.store.offset("g", "t1", 0).offset == 3
    other = toc.TxnOffsetCommitRequest(transactional_id="other", group_id="g", topics=commit.topics)  # fmt: skip
    assert set(codes(alice(core, 28, 4, other).topics).values()) == {E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}  # fmt: skip


def test_write_txn_markers_needs_alter_or_cluster_action_on_the_cluster(core: Any) -> None:
    body = wtm.WriteTxnMarkersRequest(
        markers=[
            wtm.WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=99,
                producer_epoch=0,
                transaction_result=False,
                topics=[
                    wtm.WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                        name="t2", partition_indexes=[0]
                    )
                ],
                coordinator_epoch=0,
            )
        ]
    )

    def code() -> int:
        return alice(core, 27, 1, body).markers[0].topics[0].partitions[0].error_code

    assert code() == E.CLUSTER_AUTHORIZATION_FAILED
    allow(core, Res.CLUSTER, CLUSTER_NAME, Op.ALTER)
    assert code() == E.NONE


def test_describe_and_list_transactions_show_only_describable_ids(core: Any) -> None:
    allow(core, Res.TOPIC, "t", Op.WRITE, prefixed=True)
    for tid in ("tx-a", "tx-b"):
        pid, epoch = started(core, tid)
        body = apt.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[
                apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=n, partitions=[0])
                for n in ("t1", "t2")
            ],
        )
        assert set(txn_codes(alice(core, 24, 3, body)).values()) == {E.NONE}
    listed = admin(core, 66, 1, lt.ListTransactionsRequest())
    assert sorted(s.transactional_id for s in listed.transaction_states) == ["tx-a", "tx-b"]
    # alice may WRITE (so DESCRIBE) both ids and topics; a DENY takes tx-b and t2 away.
    allow(core, Res.TRANSACTIONAL_ID, "tx-b", Op.DESCRIBE, deny=True)
    allow(core, Res.TOPIC, "t2", Op.DESCRIBE, deny=True)
    mine = alice(core, 66, 1, lt.ListTransactionsRequest()).transaction_states
    assert [s.transactional_id for s in mine] == ["tx-a"]
    body = dt.DescribeTransactionsRequest(transactional_ids=["tx-b", "tx-a"])
    described = alice(core, 65, 0, body).transaction_states
    assert [(s.transactional_id, s.error_code) for s in described] == [
        ("tx-b", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("tx-a", E.NONE),
    ]
    assert [t.topic for t in described[1].topics] == ["t1"]


# -- share groups -------------------------------------------------------------------------


def share_hb(group: str, member: str, topics: list[str] | None) -> sgh.ShareGroupHeartbeatRequest:
    return sgh.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=topics
    )


def test_share_group_heartbeat_and_describe(core: Any) -> None:
    member = str(uuid.uuid4())
    assert alice(core, 76, 1, share_hb("q", member, ["t1"])).error_code == E.GROUP_AUTHORIZATION_FAILED  # fmt: skip
    allow(core, Res.GROUP, "q", Op.READ)
    assert alice(core, 76, 1, share_hb("q", member, ["t1"])).error_code == E.TOPIC_AUTHORIZATION_FAILED  # fmt: skip
    allow(core, Res.TOPIC, "t1", Op.READ)
    assert alice(core, 76, 1, share_hb("q", member, ["t1"])).error_code == E.NONE
    body = sgd.ShareGroupDescribeRequest(group_ids=["q", "z"], include_authorized_operations=True)
    q, z = alice(core, 77, 1, body).groups
    assert (q.error_code, len(q.members)) == (E.NONE, 1)
    assert q.authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert z.error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.TOPIC, "t1", Op.DESCRIBE, deny=True)
    assert alice(core, 77, 1, body).groups[0].error_code == E.TOPIC_AUTHORIZATION_FAILED


def test_share_fetch_and_acknowledge_need_group_and_topic_read(core: Any) -> None:
    t1 = core.broker.logs.topic("t1").topic_id
    t2 = core.broker.logs.topic("t2").topic_id
    member = str(uuid.uuid4())
    denied = alice(core, 78, 1, fetch_request(member, 0, [(t1, 0)], group="q"))
    assert denied.error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "q", Op.READ)
    allow(core, Res.TOPIC, "t1", Op.READ)
    answer = alice(core, 78, 1, fetch_request(member, 0, [(t1, 0), (t2, 0)], group="q"))
    assert answer.error_code == E.NONE
    by_topic = {t.topic_id: [p.error_code for p in t.partitions] for t in answer.responses}
    assert by_topic.get(t2) == [E.TOPIC_AUTHORIZATION_FAILED]
    assert E.TOPIC_AUTHORIZATION_FAILED not in by_topic.get(t1, [])
    acked = alice(core, 78, 1, fetch_request(member, 1, acks={(t2, 0): [(0, 0, [1])]}, group="q"))
    part = next(t for t in acked.responses if t.topic_id == t2).partitions[0]
    assert (part.error_code, part.acknowledge_error_code) == (E.TOPIC_AUTHORIZATION_FAILED,) * 2
    body = ack_request(member, 2, {(t2, 0): [(0, 0, [1])]})
    body = type(body)(group_id="q", member_id=member, share_session_epoch=2, topics=body.topics)
    ack = alice(core, 79, 1, body)
    assert ack.error_code == E.NONE
    assert [p.error_code for t in ack.responses for p in t.partitions] == [E.TOPIC_AUTHORIZATION_FAILED]  # fmt: skip
    wrong = type(body)(group_id="nope", member_id=member, share_session_epoch=3, topics=[])
    assert alice(core, 79, 1, wrong).error_code == E.GROUP_AUTHORIZATION_FAILED


def test_share_group_offsets_apis(core: Any) -> None:
    member = str(uuid.uuid4())
    assert admin(core, 76, 1, share_hb("q", member, ["t1", "t2"])).error_code == E.NONE
    leave = sgh.ShareGroupHeartbeatRequest(group_id="q", member_id=member, member_epoch=-1)
    assert admin(core, 76, 1, leave).error_code == E.NONE  # (offsets change in empty groups)
    topics = [dso.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestTopic(topic_name=n, partitions=[0]) for n in ("t1", "t2")]  # fmt: skip
    describe = dso.DescribeShareGroupOffsetsRequest(groups=[dso.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id="q", topics=topics)])  # fmt: skip
    assert alice(core, 90, 1, describe).groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "q", Op.DESCRIBE)
    allow(core, Res.TOPIC, "t1", Op.DESCRIBE)
    group = alice(core, 90, 1, describe).groups[0]
    got = {(t.topic_name, p.partition_index): (p.error_code, p.start_offset) for t in group.topics for p in t.partitions}  # fmt: skip
    assert got[("t2", 0)] == (E.TOPIC_AUTHORIZATION_FAILED, -1)
    assert got[("t1", 0)][0] == E.NONE

    alter = aso.AlterShareGroupOffsetsRequest(group_id="q", topics=[aso.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(topic_name=n, partitions=[aso.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)]) for n in ("t1", "t2")])  # fmt: skip
    assert alice(core, 91, 0, alter).error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "q", Op.READ)
    allow(core, Res.TOPIC, "t1", Op.READ)
    altered = alice(core, 91, 0, alter)
    assert {t.topic_name: t.partitions[0].error_code for t in altered.responses} == {
        "t1": E.NONE,
        "t2": E.TOPIC_AUTHORIZATION_FAILED,
    }

    delete = dlo.DeleteShareGroupOffsetsRequest(group_id="q", topics=[dlo.DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=n) for n in ("t1", "t2")])  # fmt: skip
    assert alice(core, 92, 0, delete).error_code == E.GROUP_AUTHORIZATION_FAILED
    allow(core, Res.GROUP, "q", Op.DELETE)
    deleted = alice(core, 92, 0, delete)
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
        ("t2", E.TOPIC_AUTHORIZATION_FAILED),
        ("t1", E.NONE),
    ]


# -- end to end ---------------------------------------------------------------------------


@pytest.fixture
def secured_broker(tmp_path: Path) -> Iterator[Any]:
    with broker_in_thread(
        port=0, data_dir=tmp_path, group_initial_rebalance_delay_ms=0, **SECURED
    ) as running:
        yield running


def _client(running: Any, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": running.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": "pw",
        **extra,
    }


@pytest.mark.timeout(120)
def test_confluent_kafka_group_and_transactional_id_authorization(
    secured_broker: Any, topic_name: str
) -> None:
    ck = pytest.importorskip("confluent_kafka")
    admin_api = pytest.importorskip("confluent_kafka.admin")
    admin_client = admin_api.AdminClient(_client(secured_broker, "admin"))
    admin_client.create_topics([admin_api.NewTopic(topic_name, 1, 1)])["" + topic_name].result(30)

    def grant(rtype: Any, name: str, op: Any) -> None:
        binding = admin_api.AclBinding(
            rtype, name, admin_api.ResourcePatternType.LITERAL, "User:alice", "*", op,
            admin_api.AclPermissionType.ALLOW,
        )  # fmt: skip
        admin_client.create_acls([binding])[binding].result(30)

    grant(admin_api.ResourceType.TOPIC, topic_name, admin_api.AclOperation.ALL)
    # A consumer in a group without READ on the group.
    consumer = ck.Consumer(
        _client(secured_broker, "alice", **{"group.id": "grp", "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic_name])
    error = None
    deadline = time.monotonic() + 30
    while error is None and time.monotonic() < deadline:
        try:
            message = consumer.poll(0.5)
        except ck.KafkaException as exc:
            error = exc.args[0]
            break
        if message is not None and message.error() is not None:
            error = message.error()
    consumer.close()
    assert error is not None and error.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED

    # A transactional producer without WRITE on its transactional.id.
    producer = ck.Producer(_client(secured_broker, "alice", **{"transactional.id": "tid"}))
    with pytest.raises(ck.KafkaException) as failed:
        producer.init_transactions(30)
    assert failed.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    # With the ACLs in place both work.
    grant(admin_api.ResourceType.GROUP, "grp", admin_api.AclOperation.READ)
    grant(admin_api.ResourceType.TRANSACTIONAL_ID, "tid2", admin_api.AclOperation.WRITE)
    producer = ck.Producer(_client(secured_broker, "alice", **{"transactional.id": "tid2"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"hello")
    producer.commit_transaction(30)
    consumer = ck.Consumer(
        _client(secured_broker, "alice", **{"group.id": "grp", "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic_name])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            got = message.value()
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == b"hello"
