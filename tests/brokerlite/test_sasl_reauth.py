"""SASL re-authentication (KIP-368) in the sans-IO broker core.

The core's clock is the test's (``Core.now``), so session expiry is exact here:
a session authenticated at ``t`` with a lifetime ``L`` is closed by the first
request after ``t + L``, and re-authenticating before then renews it.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_security import MECHANISMS, SASL, USERS, Login, last_answer, metadata_works

from trafka.brokerlite.outcomes import Close
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k17_sasl_handshake as handshake
from trafka.codec.messages import k36_sasl_authenticate as authenticate
from trafka.codec.oauthbearer import client_message, unsecured_token

LIFETIME = 1500


@pytest.fixture
def reauth(open_core: Any) -> Any:
    """A SASL_PLAINTEXT core with ``connections_max_reauth_ms`` = LIFETIME."""
    return open_core(**SASL, connections_max_reauth_ms=LIFETIME)


def authenticate_once(
    core: Any, mechanism: str, user: str, password: str, *, conn_id: int = 1
) -> int:
    """Handshake v1 and the mechanism's tokens; returns the session lifetime answered."""
    response = core.call(
        17, 1, handshake.SaslHandshakeRequest(mechanism=mechanism), conn_id=conn_id
    )
    assert response.error_code == ErrorCode.NONE, response
    client = Login(mechanism, user, password)
    answer = None
    lifetime = -1
    while (token := client.next_token(answer)) is not None:
        response = core.call(
            36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=token), conn_id=conn_id
        )
        assert response.error_code == ErrorCode.NONE, response
        answer, lifetime = response.auth_bytes, response.session_lifetime_ms
    return int(lifetime)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_session_lifetime_is_the_setting_and_reauthentication_renews_it(
    reauth: Any, mechanism: str
) -> None:
    assert authenticate_once(reauth, mechanism, "alice", USERS["alice"]) == LIFETIME
    for _ in range(3):
        reauth.now += LIFETIME - 100  # before expiry: the connection still serves
        metadata_works(reauth)
        assert authenticate_once(reauth, mechanism, "alice", USERS["alice"]) == LIFETIME
    assert reauth.broker.connections.sasl_reauthentications == 3
    assert reauth.broker.connections.principal(1) == "alice"
    reauth.now += LIFETIME  # exactly at expiry: still alive (Kafka closes only after it)
    metadata_works(reauth)
    assert reauth.broker.connections.sasl_sessions_expired == 0


def test_a_request_after_expiry_closes_the_connection_unanswered(reauth: Any) -> None:
    authenticate_once(reauth, "PLAIN", "alice", USERS["alice"])
    authenticate_once(reauth, "PLAIN", "bob", USERS["bob"], conn_id=2)
    reauth.now += LIFETIME + 1
    outcome = reauth.send(3, 12, _metadata(), conn_id=1)
    assert isinstance(outcome, Close) and outcome.reply is None
    assert "expired" in outcome.reason
    assert reauth.broker.connections.sasl_sessions_expired == 1


def test_a_reauthentication_begun_after_expiry_renews_the_session(reauth: Any) -> None:
    """Kafka closes an expired connection used "for anything other than
    re-authentication" (its ops docs, expired-connections-killed-count): its
    SocketServer lets a SaslHandshake begin a re-authentication before it looks
    at the expiry. A client whose handshake reaches the broker a moment late
    (queued behind its own requests) re-authenticates and goes on."""
    authenticate_once(reauth, "PLAIN", "alice", USERS["alice"])
    reauth.now += LIFETIME + 6
    assert authenticate_once(reauth, "PLAIN", "alice", USERS["alice"]) == LIFETIME
    metadata_works(reauth)
    assert reauth.broker.connections.sasl_sessions_expired == 0
    assert reauth.broker.connections.sasl_reauthentications == 1


def test_reauthentication_with_another_mechanism_fails(reauth: Any) -> None:
    authenticate_once(reauth, "SCRAM-SHA-256", "alice", USERS["alice"])
    # Kafka answers the handshake (the mechanism is enabled) and fails the first token.
    response = reauth.call(17, 1, handshake.SaslHandshakeRequest(mechanism="PLAIN"))
    assert response.error_code == ErrorCode.NONE
    outcome = reauth.send(
        36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret")
    )
    answer = last_answer(reauth, outcome)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "re-authentication of mechanism 'SCRAM-SHA-256'" in answer.error_message


def test_reauthentication_as_another_principal_fails(reauth: Any) -> None:
    authenticate_once(reauth, "PLAIN", "alice", USERS["alice"])
    reauth.call(17, 1, handshake.SaslHandshakeRequest(mechanism="PLAIN"))
    outcome = reauth.send(
        36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=b"\0bob\0" + USERS["bob"].encode())
    )
    answer = last_answer(reauth, outcome)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "cannot change principals" in answer.error_message


def test_only_sasl_authenticate_may_come_during_reauthentication(reauth: Any) -> None:
    authenticate_once(reauth, "PLAIN", "alice", USERS["alice"])
    reauth.call(17, 1, handshake.SaslHandshakeRequest(mechanism="PLAIN"))
    outcome = reauth.send(3, 12, _metadata())
    assert isinstance(outcome, Close) and "during SASL re-authentication" in outcome.reason


def test_reauthentication_at_most_once_a_second(reauth: Any) -> None:
    authenticate_once(reauth, "PLAIN", "alice", USERS["alice"])
    reauth.now += 100
    authenticate_once(reauth, "PLAIN", "alice", USERS["alice"])  # the first: allowed
    reauth.now += 999
    again = reauth.call(17, 1, handshake.SaslHandshakeRequest(mechanism="PLAIN"))
    assert (again.error_code, again.mechanisms) == (ErrorCode.ILLEGAL_SASL_STATE, [])
    metadata_works(reauth)  # refused, but the connection stays (as Kafka's does)
    reauth.now += 1
    assert authenticate_once(reauth, "PLAIN", "alice", USERS["alice"]) == LIFETIME


def test_without_the_setting_plain_and_scram_sessions_never_expire(open_core: Any) -> None:
    core = open_core(**SASL)
    assert authenticate_once(core, "SCRAM-SHA-512", "alice", USERS["alice"]) == 0
    core.now += 10 * 86_400_000
    metadata_works(core)
    again = core.call(17, 1, handshake.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE  # no re-authentication
    metadata_works(core)


@pytest.mark.parametrize(
    ("max_reauth_ms", "token_ms", "expected"),
    [(0, 60_000, 60_000), (1500, 60_000, 1500), (120_000, 60_000, 60_000)],
)
def test_oauthbearer_lifetime_is_bounded_by_the_token(
    open_core: Any, max_reauth_ms: int, token_ms: int, expected: int
) -> None:
    core = open_core(
        security_protocol="SASL_PLAINTEXT",
        sasl_enabled_mechanisms="OAUTHBEARER",
        connections_max_reauth_ms=max_reauth_ms,
    )

    def login() -> int:
        token = unsecured_token("carol", now_ms=core.now, lifetime_ms=token_ms)
        core.call(17, 1, handshake.SaslHandshakeRequest(mechanism="OAUTHBEARER"))
        message = client_message(token)
        response = core.call(36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=message))
        assert response.error_code == ErrorCode.NONE, response
        return int(response.session_lifetime_ms)

    assert login() == expected
    core.now += expected - 1
    assert login() == expected  # a fresh token re-authenticates the connection
    core.now += expected + 1
    outcome = core.send(3, 12, _metadata())
    assert isinstance(outcome, Close) and "expired" in outcome.reason


def _metadata() -> Any:
    from trafka.codec.messages import k03_metadata as metadata

    return metadata.MetadataRequest(topics=[])
