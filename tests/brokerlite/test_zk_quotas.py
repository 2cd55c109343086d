"""The client quota znodes' layout (no sockets), as Kafka 3.9's ZooKeeper mode keeps
quotas (KIP-546 entities as dynamic configs, ``ZkAdminManager.alterClientQuotas``):
``/config/users/<user>``, ``/config/users/<user>/clients/<client-id>``,
``/config/clients/<client-id>``, ``/config/ips/<ip>``, ``<default>`` for a default
entity, ``{"version":1,"config":{...}}`` with string values, and a
``/config/changes/config_change_N`` notification naming the entity path (version 2)."""

from __future__ import annotations

import json

import pytest

from trafka.brokerlite.cluster.zk_layout import ZkDataError
from trafka.brokerlite.quotas import entity_of
from trafka.brokerlite.security.zk_quotas import (
    entity_path,
    entity_znode,
    name_of,
    quota_change_notification,
    quotas_of,
    updated_quota_config,
)
from trafka.brokerlite.security.zk_scram import (
    decode_user_config,
    encode_user_config,
    scram_of,
    updated_user_config,
)
from trafka.codec.sasl import ScramCredential


@pytest.mark.parametrize(
    ("pairs", "path"),
    [
        ([("user", "alice")], "/config/users/alice"),
        ([("user", None)], "/config/users/<default>"),
        ([("client-id", "c1")], "/config/clients/c1"),
        ([("client-id", None)], "/config/clients/<default>"),
        ([("user", "alice"), ("client-id", "c1")], "/config/users/alice/clients/c1"),
        ([("client-id", None), ("user", None)], "/config/users/<default>/clients/<default>"),
        ([("ip", "10.0.0.1")], "/config/ips/10.0.0.1"),
        ([("ip", "::1")], "/config/ips/%3A%3A1"),
        ([("ip", None)], "/config/ips/<default>"),
        ([("user", "CN=a/b,O=x")], "/config/users/CN%3Da%2Fb%2CO%3Dx"),
    ],
)
def test_entities_have_kafkas_znodes(pairs: list[tuple[str, str | None]], path: str) -> None:
    entity = entity_of(pairs)
    assert entity_znode(entity) == path
    assert entity_path(entity) == path.removeprefix("/config/")
    # Every part reads back as the name it stands for.
    names = [name_of(part) for part in path.split("/")[3::2]]
    assert names == [dict(pairs)[t] for t in ("user", "client-id", "ip") if t in dict(pairs)]


def test_the_change_notification_names_the_entity_path() -> None:
    prefix, data = quota_change_notification(entity_of([("user", "alice"), ("client-id", "c")]))
    assert prefix == "/config/changes/config_change_"
    assert json.loads(data) == {"version": 2, "entity_path": "users/alice/clients/c"}


def test_values_are_written_as_kafka_writes_them() -> None:
    user = entity_of([("user", "alice")])
    config = updated_quota_config(
        user, {}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}, []
    )
    assert config == {"producer_byte_rate": "1024", "request_percentage": "12.5"}
    ip = entity_of([("ip", "10.0.0.1")])
    assert updated_quota_config(ip, {}, {"connection_creation_rate": 7.0}, []) == {
        "connection_creation_rate": "7"
    }
    path = entity_znode(user)
    assert quotas_of(path, user, decode_user_config(path, encode_user_config(config))) == {
        "producer_byte_rate": 1024.0,
        "request_percentage": 12.5,
    }
    assert updated_quota_config(user, config, {}, ["producer_byte_rate", "absent"]) == {
        "request_percentage": "12.5"
    }


def test_quotas_and_scram_credentials_share_a_users_znode() -> None:
    user = entity_of([("user", "carol")])
    path = entity_znode(user)
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=b"s" * 24, iterations=4096)
    with_scram = updated_user_config({}, {"SCRAM-SHA-256": cred})
    both = updated_quota_config(user, with_scram, {"consumer_byte_rate": 10.0}, [])
    assert scram_of(path, both) == {"SCRAM-SHA-256": cred}
    assert quotas_of(path, user, both) == {"consumer_byte_rate": 10.0}
    # Removing the quota keeps the credential; removing the credential keeps the quota.
    assert scram_of(path, updated_quota_config(user, both, {}, ["consumer_byte_rate"])) == {
        "SCRAM-SHA-256": cred
    }
    assert quotas_of(path, user, updated_user_config(both, {"SCRAM-SHA-256": None})) == {
        "consumer_byte_rate": 10.0
    }


@pytest.mark.parametrize("text", ["fast", "nan", "inf", ""])
def test_a_value_that_is_not_a_finite_number_is_refused_naming_the_path(text: str) -> None:
    user = entity_of([("user", "alice")])
    with pytest.raises(ZkDataError, match="/config/users/alice"):
        quotas_of("/config/users/alice", user, {"producer_byte_rate": text})


def test_entries_an_entity_does_not_take_are_ignored() -> None:
    ip = entity_of([("ip", "10.0.0.1")])
    assert quotas_of("/config/ips/10.0.0.1", ip, {"producer_byte_rate": "5", "x": "y"}) == {}
