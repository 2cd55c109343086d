"""The SCRAM znodes' layout (no sockets): ``/config/users/<user>`` holds Kafka's
``{"version":1,"config":{...}}`` with each SCRAM mechanism's credential as
``salt=..,stored_key=..,server_key=..,iterations=N`` (base64; Kafka 3.9's
``ScramCredentialUtils``), and ``/config/changes/config_change_N`` announces it
(``ConfigEntityChangeNotificationSequenceZNode``: version 2, ``entity_path``)."""

from __future__ import annotations

import base64
import json

import pytest

from trafka.brokerlite.cluster.zk_layout import ZkDataError
from trafka.brokerlite.security.zk_scram import (
    config_change_notification,
    decode_user_config,
    desanitize,
    encode_user_config,
    sanitize,
    scram_of,
    updated_user_config,
    user_config_path,
)
from trafka.codec.sasl import ScramCredential

PATH = user_config_path("carol")


def credential(mechanism: str = "SCRAM-SHA-256", password: str = "carol-pw") -> ScramCredential:
    return ScramCredential.from_password(mechanism, password, salt=b"s" * 24, iterations=4096)


def test_a_credential_is_written_as_kafkas_salted_hashes_only() -> None:
    cred = credential()
    config = updated_user_config({"consumer_byte_rate": "1024"}, {"SCRAM-SHA-256": cred})
    data = encode_user_config(config)
    doc = json.loads(data)
    assert PATH == "/config/users/carol"
    assert doc["version"] == 1
    assert doc["config"]["consumer_byte_rate"] == "1024"  # other entries kept
    text = doc["config"]["SCRAM-SHA-256"]
    assert text == (
        f"salt={base64.b64encode(cred.salt).decode()},"
        f"stored_key={base64.b64encode(cred.stored_key).decode()},"
        f"server_key={base64.b64encode(cred.server_key).decode()},iterations=4096"
    )
    assert b"carol-pw" not in data
    assert scram_of(PATH, decode_user_config(PATH, data)) == {"SCRAM-SHA-256": cred}


def test_a_deletion_removes_only_its_mechanism() -> None:
    both = updated_user_config(
        {}, {"SCRAM-SHA-256": credential(), "SCRAM-SHA-512": credential("SCRAM-SHA-512")}
    )
    left = updated_user_config(both, {"SCRAM-SHA-256": None})
    assert list(scram_of(PATH, left)) == ["SCRAM-SHA-512"]
    assert updated_user_config(left, {"SCRAM-SHA-256": None}) == left


def test_the_change_notification_is_kafkas_version_2_entity_path() -> None:
    prefix, data = config_change_notification("carol")
    assert prefix == "/config/changes/config_change_"
    assert json.loads(data) == {"version": 2, "entity_path": "users/carol"}


@pytest.mark.parametrize(
    "data",
    [
        b"{nope",
        b"[]",
        b'{"version":1,"config":{"a":1}}',
        b'{"version":1,"config":{"SCRAM-SHA-256":"salt=AA==,iterations=4096"}}',
        b'{"version":1,"config":{"SCRAM-SHA-256":"salt=!!,stored_key=AA==,server_key=AA==,iterations=4096"}}',
        b'{"version":1,"config":{"SCRAM-SHA-256":"salt=AA==,stored_key=AA==,server_key=AA==,iterations=x"}}',
    ],
)
def test_a_znode_kafka_would_not_write_is_refused_naming_its_path(data: bytes) -> None:
    with pytest.raises(ZkDataError, match=PATH):
        scram_of(PATH, decode_user_config(PATH, data))


def test_an_empty_znode_has_no_config() -> None:
    assert decode_user_config(PATH, b"") == {} and scram_of(PATH, {}) == {}


def test_user_names_are_sanitized_as_kafkas_sanitizer_does() -> None:
    # URL-encoding, with '*' and '~' encoded and a space as %20 (Kafka's Sanitizer).
    name = "CN=a b*c~d/e@f.g-h_i"
    assert sanitize(name) == "CN%3Da%20b%2Ac%7Ed%2Fe%40f.g-h_i"
    assert desanitize(sanitize(name)) == name
    assert user_config_path(name) == "/config/users/CN%3Da%20b%2Ac%7Ed%2Fe%40f.g-h_i"
    _, data = config_change_notification("a/b")
    assert json.loads(data)["entity_path"] == "users/a%2Fb"
