"""The delegation-token znodes' layout (no sockets), as Kafka 3.9's
``DelegationTokenManagerZk`` writes them: ``/delegation_token/tokens/<tokenId>`` holds
version 3 token information with sanitized principals and no HMAC, and
``/delegation_token/token_changes/token_change_N`` the token id; and which change
notifications Kafka's ``ZkNodeChangeNotificationListener`` purges (created more than
15 minutes before now)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trafka.brokerlite.cluster.zk_layout import ZkDataError
from trafka.brokerlite.security.delegation_tokens import DelegationTokens, TokenInfo
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
from trafka.codec.errors import ErrorCode

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


def broker_tokens(tmp_path: Path, name: str) -> DelegationTokens:
    """One broker's token manager in cluster mode (its journal never written)."""
    tokens = DelegationTokens.open(
        tmp_path / name,
        secret_key="shared-secret",
        max_lifetime_ms=7 * 86_400_000,
        expiry_time_ms=86_400_000,
        expiry_check_interval_ms=3_600_000,
        now_ms=0,
    )
    tokens.use_cluster({})
    return tokens


def test_two_brokers_share_tokens_through_what_zookeeper_holds(tmp_path: Path) -> None:
    one, two = broker_tokens(tmp_path, "one"), broker_tokens(tmp_path, "two")
    try:
        code, token = one.create("User:alice", "User:alice", ["User:bob"], -1, 1000)
        assert code == ErrorCode.NONE and token is not None
        # The change waits to be written to ZooKeeper, as its znode.
        writes = one.take_writes()
        assert writes == [token] and one.take_writes() == []
        zk = {token.token_id: decode_token(PATH, encode_token(token))}
        two.use_cluster(zk)  # type: ignore[arg-type]
        # The other broker derives the same HMAC and logs the token in.
        assert two.hmac(token.token_id) == one.hmac(token.token_id)
        assert two.scram_credential("SCRAM-SHA-256", token.token_id, 2000) is not None
        # ... and renews it by its HMAC; the renewal waits to be written too.
        code, expiry = two.renew(one.hmac(token.token_id), "User:bob", 5000, 2000)
        assert (code, expiry) == (ErrorCode.NONE, 7000)
        [renewed] = two.take_writes()
        assert isinstance(renewed, TokenInfo) and renewed.expiry_ms == 7000
        # An expiry removes it: a token id to delete.
        code, _ = two.expire(one.hmac(token.token_id), "User:alice", -1, 3000)
        assert code == ErrorCode.NONE and two.take_writes() == [token.token_id]
        one.use_cluster({})
        assert one.scram_credential("SCRAM-SHA-256", token.token_id, 3000) is None
        assert one.renew(one.hmac(token.token_id), "User:alice", -1, 3000)[0] == (
            ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        )
        # The journals were never written.
        assert not (tmp_path / "one").read_bytes().strip(b"\0").count(b"alice")
    finally:
        one.close()
        two.close()
