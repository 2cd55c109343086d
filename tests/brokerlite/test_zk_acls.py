"""The ACL znodes' layout (no sockets): what brokerlite writes is what Kafka 3.9's
ZooKeeper-mode authorizer writes and reads (``ZkData.scala``: ``ZkAclStore``,
``LiteralAclChangeStore``, ``ExtendedAclChangeStore``; ``AclEntry``'s JSON with
``SecurityUtils``' Pascal-case names), and what it reads back decides as before."""

from __future__ import annotations

import json

import pytest

from trafka.brokerlite.cluster.zk_layout import ZkDataError
from trafka.brokerlite.security.authorizer import AclBinding, AclFilter, Authorizer
from trafka.brokerlite.security.zk_acls import (
    acl_roots,
    change_notification,
    decode_acls,
    encode_acls,
    group_by_resource,
    resource_path,
    resource_type_from_dir,
    updated_acls,
)
from trafka.codec.acl import AclOperation, AclPermissionType, AclResourceType, PatternType

T, P, Op, A = AclResourceType, PatternType, AclOperation, AclPermissionType


def acl(
    name: str = "orders",
    op: int = Op.READ,
    permission: int = A.ALLOW,
    *,
    principal: str = "User:alice",
    rtype: int = T.TOPIC,
    ptype: int = P.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, ptype, principal, host, op, permission)


def test_paths_follow_kafkas_zk_acl_store() -> None:
    assert resource_path(T.TOPIC, P.LITERAL, "orders") == "/kafka-acl/Topic/orders"
    assert (
        resource_path(T.CLUSTER, P.LITERAL, "kafka-cluster") == "/kafka-acl/Cluster/kafka-cluster"
    )
    assert (
        resource_path(T.TRANSACTIONAL_ID, P.PREFIXED, "tx-")
        == "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    )
    assert resource_path(T.DELEGATION_TOKEN, P.LITERAL, "t") == "/kafka-acl/DelegationToken/t"
    assert acl_roots() == [
        ("/kafka-acl", P.LITERAL),
        ("/kafka-acl-extended/prefixed", P.PREFIXED),
    ]
    with pytest.raises(ValueError):
        resource_path(T.TOPIC, P.MATCH, "orders")
    # Kafka writes names as they are; one with '/' would be a znode tree, not a znode.
    for bad in ("a/b", "", ".", ".."):
        with pytest.raises(ValueError, match="znode"):
            resource_path(T.GROUP, P.LITERAL, bad)


def test_resource_znode_json_is_kafkas_acl_entry_format() -> None:
    acls = [acl(op=Op.IDEMPOTENT_WRITE, permission=A.DENY, host="10.0.0.1"), acl()]
    doc = json.loads(encode_acls(acls))
    assert doc == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "Read",
                "host": "*",
            },
            {
                "principal": "User:alice",
                "permissionType": "Deny",
                "operation": "IdempotentWrite",
                "host": "10.0.0.1",
            },
        ],
    }
    back = decode_acls((T.TOPIC, P.LITERAL, "orders"), "/kafka-acl/Topic/orders", encode_acls(acls))
    assert set(back) == set(acls)


def test_decoding_reads_what_kafka_reads() -> None:
    # Kafka looks a name up in Pascal case, then in upper case (SecurityUtils.valueFromMap).
    data = json.dumps(
        {
            "version": 1,
            "acls": [
                {
                    "principal": "User:*",
                    "permissionType": "ALLOW",
                    "operation": "DESCRIBE_CONFIGS",
                    "host": "*",
                },
                {
                    "principal": "User:bob",
                    "permissionType": "Deny",
                    "operation": "All",
                    "host": "*",
                },
            ],
        }
    ).encode()
    resource = (T.GROUP, P.PREFIXED, "app-")
    got = decode_acls(resource, "/p", data)
    assert got == [
        AclBinding(T.GROUP, "app-", P.PREFIXED, "User:*", "*", Op.DESCRIBE_CONFIGS, A.ALLOW),
        AclBinding(T.GROUP, "app-", P.PREFIXED, "User:bob", "*", Op.ALL, A.DENY),
    ]
    assert resource_type_from_dir("/kafka-acl", "TransactionalId") == T.TRANSACTIONAL_ID
    assert resource_type_from_dir("/kafka-acl", "TOPIC") == T.TOPIC
    assert decode_acls(resource, "/p", b"") == []


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        b"[]",
        b'{"version":1}',
        b'{"version":2,"acls":[]}',
        b'{"version":1,"acls":[{"principal":"User:a","host":"*","operation":"Fly","permissionType":"Allow"}]}',
        b'{"version":1,"acls":[{"principal":"User:a","host":"*","operation":"Read","permissionType":"Any"}]}',
        b'{"version":1,"acls":[{"host":"*","operation":"Read","permissionType":"Allow"}]}',
        b'{"version":1,"acls":["User:a"]}',
    ],
)
def test_a_znode_kafka_would_not_write_is_refused_naming_its_path(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/kafka-acl/Topic/x"):
        decode_acls((T.TOPIC, P.LITERAL, "x"), "/kafka-acl/Topic/x", data)
    with pytest.raises(ZkDataError):
        resource_type_from_dir("/kafka-acl", "Planet")


def test_change_notifications_are_kafkas_literal_and_extended_events() -> None:
    path, data = change_notification((T.TOPIC, P.LITERAL, "a:b"))
    assert path == "/kafka-acl-changes/acl_changes_"
    assert data == b"TOPIC:a:b"  # split on the first ':' by the reader
    path, data = change_notification((T.GROUP, P.PREFIXED, "app-"))
    assert path == "/kafka-acl-extended-changes/acl_changes_"
    assert json.loads(data) == {
        "version": 1,
        "resourceType": "GROUP",
        "name": "app-",
        "patternType": "PREFIXED",
    }


def test_changes_are_grouped_per_znode_and_applied_to_its_content() -> None:
    allow, deny = acl(), acl(op=Op.WRITE, permission=A.DENY)
    other = acl(name="app-", rtype=T.GROUP, ptype=P.PREFIXED)
    grouped = group_by_resource([deny, other], [allow])
    assert grouped == {
        (T.TOPIC, P.LITERAL, "orders"): ([deny], [allow]),
        (T.GROUP, P.PREFIXED, "app-"): ([other], []),
    }
    assert updated_acls([allow], [deny], [allow]) == [deny]
    assert updated_acls([allow, deny], [deny], []) == [allow, deny]  # no duplicate
    assert updated_acls([allow], [], [allow]) == []


def test_an_authorizer_fed_from_the_znodes_decides_as_one_fed_by_requests() -> None:
    """What one broker wrote is what another decides with, once replaced in."""
    writer = Authorizer(None)
    results, new = writer.check_create([acl(op=Op.WRITE), acl(op=Op.WRITE, permission=A.DENY)])
    assert [code for code, _ in results] == [0, 0]
    assert writer.acls() == []  # checked only: nothing applies before ZooKeeper has it
    znode = encode_acls(updated_acls([], new, []))
    reader = Authorizer(None)
    reader.replace(decode_acls((T.TOPIC, P.LITERAL, "orders"), "/p", znode))
    assert not reader.authorize("User:alice", "10.1.1.1", Op.WRITE, T.TOPIC, "orders")
    matched, gone = reader.match_delete(
        [AclFilter(T.TOPIC, "orders", P.LITERAL, None, None, Op.ANY, A.DENY)]
    )
    assert gone == [acl(op=Op.WRITE, permission=A.DENY)] and matched[0][2] == gone
    reader.replace(updated_acls(reader.acls(), [], gone))
    assert reader.authorize("User:alice", "10.1.1.1", Op.WRITE, T.TOPIC, "orders")
    assert reader.authorize("User:alice", "10.1.1.1", Op.DESCRIBE, T.TOPIC, "orders")
    assert not reader.authorize("User:bob", "10.1.1.1", Op.WRITE, T.TOPIC, "orders")
