"""The delegation-token znodes' layout (no sockets), as Kafka 3.9's
``DelegationTokenManagerZk`` writes them: ``/delegation_token/tokens/<tokenId>`` holds
version 3 token information with sanitized principals and no HMAC, and
``/delegation_token/token_changes/token_change_N`` the token id; and which change
notifications Kafka's ``ZkNodeChangeNotificationListener`` purges (created more than
15 minutes before now)."""

from __future__ import annotations

import json

import pytest

from trafka.brokerlite.cluster.zk_layout import ZkDataError
from trafka.brokerlite.security.delegation_tokens import TokenInfo
from trafka.brokerlite.security.zk_notifications import (
    CHANGE_EXPIRATION_MS,
    obsolete_notifications,
)
from trafka.brokerlite.security.zk_tokens import (
    decode_token,
    encode_token,
    token_change_notification,
    token_path,
)

TOKEN = TokenInfo(
    token_id="AbC-d_e",
    owner="User:alice",
    requester="User:CN=a,O=b",
    renewers=("User:bob",),
    issue_ms=1000,
    expiry_ms=2000,
    max_ms=3000,
)
PATH = token_path(TOKEN.token_id)


def test_a_token_is_written_as_kafka_writes_it() -> None:
    assert PATH == "/delegation_token/tokens/AbC-d_e"
    assert json.loads(encode_token(TOKEN)) == {
        "version": 3,
        "owner": "User%3Aalice",
        "tokenRequester": "User%3ACN%3Da%2CO%3Db",
        "renewers": ["User%3Abob"],
        "issueTimestamp": 1000,
        "maxTimestamp": 3000,
        "expiryTimestamp": 2000,
        "tokenId": "AbC-d_e",
    }
    assert decode_token(PATH, encode_token(TOKEN)) == TOKEN
    assert token_change_notification(TOKEN.token_id) == (
        "/delegation_token/token_changes/token_change_",
        b"AbC-d_e",
    )


def test_a_version_1_token_has_its_owner_as_requester() -> None:
    doc = json.loads(encode_token(TOKEN))
    doc["version"] = 1
    del doc["tokenRequester"]
    decoded = decode_token(PATH, json.dumps(doc).encode())
    assert decoded is not None and decoded.requester == "User:alice"


@pytest.mark.parametrize(
    "data",
    [
        b"{nope",
        b"[]",
        b'{"version":4,"tokenId":"x"}',
        b'{"version":3,"owner":"alice","tokenRequester":"User%3Aa","renewers":[],'
        b'"issueTimestamp":1,"maxTimestamp":1,"expiryTimestamp":1,"tokenId":"x"}',
        b'{"version":3,"owner":"User%3Aa","tokenRequester":"User%3Aa","renewers":[],'
        b'"issueTimestamp":"1","maxTimestamp":1,"expiryTimestamp":1,"tokenId":"x"}',
    ],
)
def test_a_znode_kafka_would_not_write_is_refused_naming_its_path(data: bytes) -> None:
    with pytest.raises(ZkDataError, match=PATH):
        decode_token(PATH, data)


def test_an_id_that_cannot_be_a_znode_is_refused() -> None:
    with pytest.raises(ValueError):
        token_path("a/b")


def test_notifications_older_than_15_minutes_are_obsolete() -> None:
    assert CHANGE_EXPIRATION_MS == 15 * 60 * 1000
    ctimes = {"n_2": 5000, "n_1": 1000, "n_3": 1001}
    now = 1001 + CHANGE_EXPIRATION_MS
    assert obsolete_notifications(ctimes, now) == ["n_1"]  # strictly older
    assert obsolete_notifications(ctimes, now + 1) == ["n_1", "n_3"]
    assert obsolete_notifications(ctimes, 0) == []
