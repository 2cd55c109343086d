"""SASL in the sans-IO broker core, and the security settings.

The core is driven like the other core tests (``Core`` in conftest: requests
through the real codec both ways), with the client side of each mechanism from
:mod:`trafka.codec.sasl`. After a v0 SaslHandshake the tokens are bare frames,
handed to ``handle_frame`` as they are.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trafka.brokerlite.broker import Broker
from trafka.brokerlite.cli import build_config
from trafka.brokerlite.config import BrokerConfig, ConfigError
from trafka.brokerlite.outcomes import Close, Reply, SaslToken
from trafka.brokerlite.security.sasl import UserStore
from trafka.codec import sasl as codec_sasl
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k17_sasl_handshake as handshake
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k36_sasl_authenticate as authenticate
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import api, encode_request
from trafka.codec.sasl import ScramClient, plain_message

USERS = {"alice": "alice-secret", "bob": "b:o,b"}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_users": USERS}


@pytest.fixture
def sasl(open_core: Any) -> Any:
    """A core on a SASL_PLAINTEXT listener with the users of USERS."""
    return open_core(**SASL)


class Login:
    """One client's side of a mechanism: the tokens to send, answers checked."""

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.mechanism = mechanism
        self._plain = plain_message(user, password) if mechanism == "PLAIN" else None
        self._scram = None if self._plain else ScramClient(mechanism, user, password)
        self._sent = 0

    def next_token(self, answer: bytes | None) -> bytes | None:
        """The next token, given the server's last answer; None when done."""
        self._sent += 1
        if self._plain is not None:
            return self._plain if self._sent == 1 else None
        assert self._scram is not None
        if self._sent == 1:
            return self._scram.first_message()
        if self._sent == 2:
            assert answer is not None
            return self._scram.final_message(answer)
        assert answer is not None
        self._scram.verify(answer)  # the server proved it knows the credentials too
        return None


def handshake_ok(core: Any, mechanism: str, version: int = 1, conn_id: int = 1) -> None:
    response = core.call(
        17, version, handshake.SaslHandshakeRequest(mechanism=mechanism), conn_id=conn_id
    )
    assert response.error_code == ErrorCode.NONE
    assert response.mechanisms == MECHANISMS


def login(
    core: Any, mechanism: str, user: str, password: str, *, version: int = 2, conn_id: int = 1
) -> None:
    """Authenticate ``conn_id`` with a v1 handshake and SaslAuthenticate ``version``."""
    handshake_ok(core, mechanism, conn_id=conn_id)
    client = Login(mechanism, user, password)
    answer = None
    while (token := client.next_token(answer)) is not None:
        response = core.call(
            36, version, authenticate.SaslAuthenticateRequest(auth_bytes=token), conn_id=conn_id
        )
        assert response.error_code == ErrorCode.NONE, response
        if version >= 1:
            # No connections_max_reauth_ms: the session never expires (KIP-368).
            assert response.session_lifetime_ms == 0
        answer = response.auth_bytes


def raw_login(core: Any, mechanism: str, user: str, password: str, conn_id: int = 1) -> None:
    """Authenticate ``conn_id`` with a v0 handshake and bare tokens (KIP-43)."""
    handshake_ok(core, mechanism, version=0, conn_id=conn_id)
    client = Login(mechanism, user, password)
    answer = None
    while (token := client.next_token(answer)) is not None:
        outcome = core.broker.handle_frame(conn_id, token, core.now)
        assert isinstance(outcome, SaslToken), outcome
        assert outcome.encode() == [len(outcome.token).to_bytes(4, "big") + outcome.token]
        answer = outcome.token


def metadata_works(core: Any, conn_id: int = 1) -> None:
    body = core.call(3, 12, metadata.MetadataRequest(topics=[]), conn_id=conn_id)
    assert [b.node_id for b in body.brokers] == [1]


def last_answer(core: Any, outcome: Any) -> Any:
    """The answer a Close of a failed authentication sends before closing, decoded."""
    assert isinstance(outcome, Close), outcome
    assert outcome.reply is not None and outcome.failed_authentication
    return core.decode(outcome.reply)


# -- successful authentication --------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("version", [0, 1, 2])
def test_handshake_v1_then_authenticate(sasl: Any, mechanism: str, version: int) -> None:
    login(sasl, mechanism, "bob", USERS["bob"], version=version)
    assert sasl.broker.connections.principal(1) == "bob"
    assert not sasl.broker.connections.authenticating(1)
    metadata_works(sasl)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_handshake_v0_then_bare_tokens(sasl: Any, mechanism: str) -> None:
    raw_login(sasl, mechanism, "alice", USERS["alice"])
    assert sasl.broker.connections.principal(1) == "alice"
    metadata_works(sasl)


def test_plain_answers_an_empty_bare_token(sasl: Any) -> None:
    handshake_ok(sasl, "PLAIN", version=0)
    outcome = sasl.broker.handle_frame(1, plain_message("alice", USERS["alice"]), sasl.now)
    assert outcome == SaslToken(b"")
    assert outcome.encode() == [b"\0\0\0\0"]


def test_api_versions_before_authentication_lists_the_sasl_apis(sasl: Any) -> None:
    for _ in range(2):  # as often as the client likes
        response = sasl.call(18, 3, api_versions.ApiVersionsRequest())
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert ranges[17] == (0, 1) and ranges[36] == (0, 2)
    login(sasl, "PLAIN", "alice", USERS["alice"])
    metadata_works(sasl)


def test_connections_authenticate_separately(sasl: Any) -> None:
    login(sasl, "SCRAM-SHA-256", "alice", USERS["alice"], conn_id=1)
    outcome = sasl.send(3, 12, metadata.MetadataRequest(topics=[]), conn_id=2)
    assert isinstance(outcome, Close) and outcome.reply is None
    assert "Metadata request before SASL authentication" in outcome.reason
    metadata_works(sasl, conn_id=1)
    # A closed connection's id starts over unauthenticated (fail closed).
    sasl.broker.connection_closed(1)
    assert (
        sasl.broker.connections.authenticating(1) and sasl.broker.connections.principal(1) is None
    )
    assert isinstance(sasl.send(3, 12, metadata.MetadataRequest(topics=[])), Close)


def test_unauthenticated_frames_are_capped(sasl: Any) -> None:
    broker = sasl.broker
    assert broker.connections.max_frame_size(1) == 524_288
    login(sasl, "PLAIN", "alice", USERS["alice"])
    assert broker.connections.max_frame_size(1) == broker.config.socket_request_max_bytes


# -- failures ---------------------------------------------------------------------------


def failed_login(core: Any, mechanism: str, user: str, password: str) -> Close:
    handshake_ok(core, mechanism)
    client = Login(mechanism, user, password)
    answer = None
    while (token := client.next_token(answer)) is not None:
        outcome = core.send(36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=token))
        if isinstance(outcome, Close):
            return outcome
        answer = core.decode(outcome).auth_bytes
    raise AssertionError("authenticated")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_fail_alike_and_close(
    open_core: Any, mechanism: str
) -> None:
    core = open_core(**SASL)
    messages = []
    for user, password in [("alice", "wrong"), ("mallory", "alice-secret")]:
        response = last_answer(core, failed_login(core, mechanism, user, password))
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert mechanism.split("-")[0] in response.error_message
        assert user not in response.error_message and password not in response.error_message
        messages.append(response.error_message)
        assert core.broker.connections.principal(1) is None
        core.broker.connection_closed(1)  # what the driver does after a Close
    assert messages[0] == messages[1]


def test_wrong_password_after_a_v0_handshake_closes_without_an_answer(sasl: Any) -> None:
    handshake_ok(sasl, "SCRAM-SHA-512", version=0)
    client = ScramClient("SCRAM-SHA-512", "alice", "wrong")
    first = sasl.broker.handle_frame(1, client.first_message(), sasl.now)
    assert isinstance(first, SaslToken)
    outcome = sasl.broker.handle_frame(1, client.final_message(first.token), sasl.now)
    assert isinstance(outcome, Close) and outcome.reply is None
    assert outcome.failed_authentication
    assert "invalid credentials" in outcome.reason


@pytest.mark.parametrize("version", [0, 1])
def test_unsupported_mechanism_lists_the_enabled_ones_and_closes(
    open_core: Any, version: int
) -> None:
    core = open_core(**SASL, sasl_enabled_mechanisms="SCRAM-SHA-512")
    for mechanism in ("GSSAPI", "PLAIN", "scram-sha-512"):
        outcome = core.send(17, version, handshake.SaslHandshakeRequest(mechanism=mechanism))
        response = last_answer(core, outcome)
        assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["SCRAM-SHA-512"]
        assert mechanism in outcome.reason
        core.broker.connection_closed(1)


@pytest.mark.parametrize(
    ("key", "body"),
    [
        (3, metadata.MetadataRequest(topics=None)),
        (0, None),  # Produce
        (19, None),  # CreateTopics
        (60, None),  # DescribeCluster
    ],
)
def test_other_requests_before_authentication_close_unanswered(
    sasl: Any, key: int, body: Any
) -> None:
    info = api(key)
    request = body if body is not None else info.request_type()
    version = 9 if key == 0 else min(info.max_version, 7)
    outcome = sasl.send(key, version, request)
    assert isinstance(outcome, Close) and outcome.reply is None
    assert not outcome.failed_authentication  # closed at once, as Kafka does
    assert outcome.reason.startswith(f"{info.name} request before SASL authentication")
    assert outcome.client_id == "test-client"
    # Also between the handshake and the end of authentication.
    sasl.broker.connection_closed(1)
    handshake_ok(sasl, "SCRAM-SHA-256")
    assert isinstance(sasl.send(key, version, request), Close)


def test_authenticate_before_handshake_is_an_illegal_state(sasl: Any) -> None:
    outcome = sasl.send(36, 1, authenticate.SaslAuthenticateRequest(auth_bytes=b"\0a\0b"))
    response = last_answer(sasl, outcome)
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert "before a SaslHandshake" in response.error_message


def test_second_handshake_is_an_illegal_state(sasl: Any) -> None:
    handshake_ok(sasl, "SCRAM-SHA-256")
    outcome = sasl.send(17, 1, handshake.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    assert last_answer(sasl, outcome).error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_sasl_requests_after_authentication_are_refused_but_keep_the_connection(
    sasl: Any,
) -> None:
    login(sasl, "SCRAM-SHA-512", "alice", USERS["alice"])
    again = sasl.call(17, 1, handshake.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert (again.error_code, again.mechanisms) == (ErrorCode.ILLEGAL_SASL_STATE, [])
    token = sasl.call(36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=b"x"))
    assert token.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert "after successful authentication" in token.error_message
    metadata_works(sasl)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_a_listener_without_sasl_answers_illegal_state_and_serves_on(
    open_core: Any, tmp_path: Path, protocol: str
) -> None:
    tls = {"ssl_certfile": tmp_path / "absent.pem"} if protocol == "SSL" else {}
    core = open_core(security_protocol=protocol, **tls)  # the core never reads the files
    response = core.call(17, 1, handshake.SaslHandshakeRequest(mechanism="PLAIN"))
    assert (response.error_code, response.mechanisms) == (ErrorCode.ILLEGAL_SASL_STATE, [])
    response = core.call(36, 1, authenticate.SaslAuthenticateRequest(auth_bytes=b"\0a\0b"))
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert f"not enabled on this {protocol} listener" in response.error_message
    assert not core.broker.connections.authenticating(1)
    assert core.broker.connections.max_frame_size(1) == core.broker.config.socket_request_max_bytes
    metadata_works(core)


def test_a_truncated_sasl_authenticate_closes(sasl: Any) -> None:
    handshake_ok(sasl, "PLAIN")
    header = RequestHeader(
        request_api_key=36, request_api_version=1, correlation_id=9, client_id="t"
    )
    frame = encode_request(header, authenticate.SaslAuthenticateRequest(auth_bytes=b"x" * 40))[4:]
    outcome = sasl.broker.handle_frame(1, frame[:-10], sasl.now)
    assert isinstance(outcome, Close) and "malformed" in outcome.reason


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    mechanism=st.sampled_from(MECHANISMS),
    raw=st.booleans(),
    tokens=st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.sampled_from(
                [b"n,,n=alice,r=abc", b"\0alice\0", b"c=biws,r=abc,p=AAAA", b"n,,n=alice,r="]
            ),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_malformed_tokens_fail_one_connection_only(
    sasl: Any, mechanism: str, raw: bool, tokens: list[bytes]
) -> None:
    broker = sasl.broker
    broker.connection_closed(7)
    handshake_ok(sasl, mechanism, version=0 if raw else 1, conn_id=7)
    for token in tokens:
        if raw:
            outcome = broker.handle_frame(7, token, sasl.now)
        else:
            outcome = sasl.send(
                36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=token), conn_id=7
            )
        assert isinstance(outcome, Reply | SaslToken | Close), outcome
        if isinstance(outcome, Reply):
            response = sasl.decode(outcome)
            assert response.error_code == ErrorCode.NONE
        if isinstance(outcome, Close):
            if outcome.reply is not None:
                response = last_answer(sasl, outcome)
                assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            break
    assert broker.connections.principal(7) is None  # random bytes never authenticate
    # Another connection is unaffected.
    broker.connection_closed(8)
    login(sasl, "SCRAM-SHA-256", "alice", USERS["alice"], conn_id=8)
    metadata_works(sasl, conn_id=8)


def test_a_failing_mechanism_fails_its_connection_only(
    sasl: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Any, message: bytes) -> bytes:
        raise KeyError("a bug")

    monkeypatch.setattr(codec_sasl.PlainServer, "respond", broken)
    handshake_ok(sasl, "PLAIN")
    with caplog.at_level(logging.ERROR, logger="trafka.brokerlite"):
        outcome = sasl.send(36, 1, authenticate.SaslAuthenticateRequest(auth_bytes=b"\0a\0b"))
    response = last_answer(sasl, outcome)
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "internal error" in response.error_message and "a bug" not in response.error_message
    assert "internal error in SASL PLAIN" in caplog.text
    login(sasl, "SCRAM-SHA-256", "alice", USERS["alice"], conn_id=2)


# -- users --------------------------------------------------------------------------------


def test_users_keep_passwords_only_for_plain() -> None:
    scram_only = UserStore([("alice", "pw")], ["SCRAM-SHA-512"])
    assert scram_only.password("alice") is None
    assert scram_only.scram_credential("SCRAM-SHA-256", "alice") is None
    credential = scram_only.scram_credential("SCRAM-SHA-512", "alice")
    assert credential is not None and credential.iterations == 4096
    assert b"pw" not in repr(credential).encode()
    both = UserStore([("alice", "pw")], MECHANISMS)
    assert both.password("alice") == "pw"
    salts = {both.scram_credential(m, "alice").salt for m in MECHANISMS[1:]}  # type: ignore[union-attr]
    assert len(salts) == 2  # a random salt each
    assert both.scram_credential("SCRAM-SHA-256", "mallory") is None


def test_users_file(tmp_path: Path, open_core: Any) -> None:
    path = tmp_path / "users.txt"
    path.write_text("# the team\nalice:a:b:c\n\n  carol:pw  \n")
    core = open_core(security_protocol="SASL_PLAINTEXT", sasl_users_file=path, sasl_users="bob:x")
    login(core, "SCRAM-SHA-256", "alice", "a:b:c")
    login(core, "PLAIN", "carol", "pw", conn_id=2)
    login(core, "PLAIN", "bob", "x", conn_id=3)
    core.broker.close()
    for text, words in [
        ("alice\n", r"users\.txt:1: expected name:password"),
        ("alice:x\nalice:y\n", r"users\.txt:2: user 'alice' is given twice"),
        ("bob:y\n", "'bob' is given twice"),
        (":pw\n", "needs a name"),
        ("alice:\n", "empty password"),
        ("# nobody\n", None),
    ]:
        path.write_text(text)
        config = BrokerConfig(
            port=0,
            data_dir=tmp_path / "d",
            security_protocol="SASL_SSL",
            ssl_certfile=tmp_path / "c.pem",
            sasl_users_file=path,
            sasl_users=[] if words is None else ["bob:x"],
        )
        with pytest.raises(ConfigError, match=words or "no SASL users"):
            Broker(config, now_ms=0)
    config = dataclasses.replace(config, sasl_users_file=tmp_path / "absent.txt")
    with pytest.raises(ConfigError, match=r"sasl_users_file: cannot read .*absent\.txt"):
        Broker(config, now_ms=0)


# -- settings -------------------------------------------------------------------------------


def test_security_defaults_and_shapes() -> None:
    config = BrokerConfig()
    assert config.security_protocol == "PLAINTEXT"
    assert not config.sasl_enabled and not config.tls_enabled
    assert config.sasl_enabled_mechanisms == tuple(MECHANISMS)
    expected = (("alice", "alice-secret"), ("bob", "b:o,b"))
    for given_users in (
        USERS,
        ["alice:alice-secret", "bob:b:o,b"],
        [("alice", "alice-secret"), ("bob", "b:o,b")],
    ):
        sasl = BrokerConfig(security_protocol="sasl_plaintext", sasl_users=given_users)
        assert sasl.security_protocol == "SASL_PLAINTEXT" and sasl.sasl_enabled
        assert sasl.sasl_users == expected
    from_properties = BrokerConfig.from_mapping(
        {
            "listeners": "SASL_SSL://0.0.0.0:9093",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512, SCRAM-SHA-256",
            "sasl_users": "alice:pw-one,bob:pw-two",
            "ssl_certfile": "/etc/broker.pem",
            "ssl.key.password": "secret-key-pw",
            "ssl.client.auth": "REQUIRED",
            "ssl_cafile": "/etc/ca.pem",
            "sasl.server.max.receive.size": "1000",
            "security.inter.broker.protocol": "SASL_SSL",
        }
    )
    assert from_properties.security_protocol == "SASL_SSL" and from_properties.tls_enabled
    assert (from_properties.host, from_properties.port) == ("0.0.0.0", 9093)
    assert from_properties.sasl_enabled_mechanisms == ("SCRAM-SHA-512", "SCRAM-SHA-256")
    assert from_properties.sasl_users == (("alice", "pw-one"), ("bob", "pw-two"))
    assert from_properties.ssl_certfile == Path("/etc/broker.pem")
    assert from_properties.ssl_client_auth == "required"
    assert from_properties.sasl_server_max_receive_size == 1000
    # Secrets never show.
    text = repr(from_properties) + repr(from_properties.kafka_entries())
    for secret in ("pw-one", "pw-two", "secret-key-pw"):
        assert secret not in text
    assert ("listeners", "SASL_SSL://0.0.0.0:9093", False) in from_properties.kafka_entries()
    assert ("listeners", "PLAINTEXT://127.0.0.1:9092", True) in config.kafka_entries()


def test_listener_names_map_to_protocols() -> None:
    mapped = BrokerConfig.from_mapping(
        {
            "listeners": "EXTERNAL://:9094,CONTROLLER://:9093",
            "listener.security.protocol.map": "EXTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl_users": "alice:pw",
        }
    )
    assert mapped.security_protocol == "SASL_PLAINTEXT"
    with pytest.raises(ConfigError, match="listener name 'EXTERNAL' is not a security protocol"):
        BrokerConfig.from_mapping({"listeners": "EXTERNAL://:9094"})
    with pytest.raises(ConfigError, match="contradicts listeners"):
        BrokerConfig.from_mapping({"listeners": "SSL://:9093", "security_protocol": "PLAINTEXT"})
    # A listen address without a scheme keeps the protocol.
    kept = BrokerConfig(security_protocol="SASL_PLAINTEXT", sasl_users=USERS).with_overrides(
        {"listen": "127.0.0.1:0"}
    )
    assert kept.security_protocol == "SASL_PLAINTEXT"


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"security_protocol": "TLS"}, "security_protocol: 'TLS' is not one of"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "needs users: set sasl_users or sasl_users_file"),
        (
            {**SASL, "sasl_enabled_mechanisms": "PLAIN,GSSAPI,OAUTHBEARER"},
            "GSSAPI not supported",
        ),
        ({**SASL, "sasl_enabled_mechanisms": ""}, "needs a mechanism"),
        ({"security_protocol": "SSL"}, "set ssl_certfile and ssl_keyfile"),
        (
            {"security_protocol": "SSL", "ssl_certfile": "c.pem", "ssl_client_auth": "required"},
            "ssl_client_auth=required needs ssl_cafile",
        ),
        ({"ssl_client_auth": "sometimes"}, "ssl_client_auth: 'sometimes' is not one of"),
        ({"sasl_users": USERS}, "security_protocol is PLAINTEXT, which does not authenticate"),
        (
            {**SASL, "ssl_certfile": "c.pem", "ssl_keyfile": "k.pem"},
            "ssl_certfile, ssl_keyfile set but security_protocol is SASL_PLAINTEXT",
        ),
        ({**SASL, "sasl_users": ["alice"]}, "sasl_users: entry 1 is not name:password"),
        ({**SASL, "sasl_users": ["alice:x", "alice:y"]}, "'alice' is given twice"),
        ({**SASL, "sasl_users": {"alice": ""}}, "'alice' has an empty password"),
        ({**SASL, "sasl_server_max_receive_size": 0}, "sasl_server_max_receive_size: must be > 0"),
        ({"ssl.keystore.location": "/k.jks"}, "ssl.keystore.location is not supported: .*PEM"),
        ({"sasl.jaas.config": "x"}, "sasl_users or sasl_users_file"),
        ({"listener.security.protocol.map": "A=B"}, "expected NAME:PROTOCOL pairs"),
    ],
)
def test_contradictions_are_config_errors(settings: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        BrokerConfig.from_mapping(settings)
    assert "alice-secret" not in str(caught.value)


def test_cli_security_options(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("")
    config = build_config(
        None,
        {
            "listen": "SASL_SSL://127.0.0.1:0",
            "sasl_user": ("alice:pw", "bob:pw2"),
            "sasl_mechanisms": "SCRAM-SHA-512",
            "ssl_certfile": cert,
            "ssl_keyfile": cert,
            "ssl_cafile": cert,
            "ssl_client_auth": "requested",
        },
    )
    assert config.security_protocol == "SASL_SSL"
    assert config.sasl_users == (("alice", "pw"), ("bob", "pw2"))
    assert config.sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
    assert (config.ssl_certfile, config.ssl_client_auth) == (cert, "requested")
    assert build_config(None, {"security_protocol": "ssl", "ssl_certfile": cert}).tls_enabled
    with pytest.raises(ConfigError, match="needs users"):
        build_config(None, {"security_protocol": "SASL_PLAINTEXT"})


def test_inter_broker_settings_take_kafkas_names_and_fail_closed() -> None:
    """A cluster member on a SASL listener logs in to the others with its own
    credentials: Kafka's ``sasl.mechanism.inter.broker.protocol`` and the listener's
    JAAS line (``listener.name.<l>.<mechanism>.sasl.jaas.config``), or brokerlite's
    ``inter_broker_sasl_username``/``_password``; without them it does not start."""
    cluster = {"zookeeper_connect": "127.0.0.1:2181", "sasl_users": "alice:pw"}
    with pytest.raises(ConfigError, match="set inter_broker_sasl_username and") as missing:
        BrokerConfig.from_mapping({**cluster, "security_protocol": "SASL_PLAINTEXT"})
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in str(missing.value)
    # A single node needs none: it has nobody to log in to.
    BrokerConfig.from_mapping({"security_protocol": "SASL_PLAINTEXT", "sasl_users": "alice:pw"})

    scram = BrokerConfig.from_mapping(
        {
            **cluster,
            "listeners": "INTERNAL://127.0.0.1:9093",
            "listener.security.protocol.map": "INTERNAL:SASL_SSL",
            "ssl_certfile": "/etc/broker.pem",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="broker" password="br\\"oker-pw";'
            ),
        }
    )
    assert scram.sasl_mechanism_inter_broker_protocol == "SCRAM-SHA-512"
    assert (scram.inter_broker_sasl_username, scram.inter_broker_sasl_password) == (
        "broker",
        'br"oker-pw',
    )
    assert "oker-pw" not in repr(scram) + repr(scram.kafka_entries())

    # PLAIN's JAAS line also lists the users it accepts (user_<name>), as on Kafka.
    plain = BrokerConfig.from_mapping(
        {
            "zookeeper_connect": "127.0.0.1:2181",
            "security_protocol": "SASL_PLAINTEXT",
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="broker" password="b-pw" user_broker="b-pw" user_alice="a-pw";'
            ),
        }
    )
    assert plain.sasl_mechanism_inter_broker_protocol == "PLAIN"
    assert plain.sasl_users == (("broker", "b-pw"), ("alice", "a-pw"))
    assert plain.inter_broker_sasl_username == "broker"

    login = {"inter_broker_sasl_username": "b", "inter_broker_sasl_password": "p"}
    member = {**cluster, "security_protocol": "SASL_PLAINTEXT", **login}
    for given_settings, error in [
        # brokerlite's one listener is the inter-broker listener too.
        ({**member, "security.inter.broker.protocol": "PLAINTEXT"}, "not the listener's protocol"),
        ({**member, "inter.broker.listener.name": "OTHER"}, "is not brokerlite's listener"),
        (
            {
                **member,
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "security.inter.broker.protocol": "SASL_PLAINTEXT",
            },
            "only one of inter.broker.listener.name and security.inter.broker.protocol",
        ),
        # Kafka's rule: the mechanism must be enabled.
        (
            {
                **member,
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            },
            "must be one of sasl_enabled_mechanisms",
        ),
        (
            {**member, "sasl.enabled.mechanisms": "OAUTHBEARER"},
            "an OAUTHBEARER broker logs in with a token",
        ),
        # Credentials on a listener that would not use them.
        ({**cluster, "sasl_users": None, **login}, "which does not authenticate"),
        (
            {
                **member,
                "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="b" password="p";'
                ),
            },
            "SCRAM-SHA-256 needs the login module",
        ),
        (
            {
                **member,
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    'org.apache.kafka.common.security.plain.PlainLoginModule required username="b"'
                ),
            },
            "ends with ';'",
        ),
        (
            {
                **member,
                "listener.name.external.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="b" password="p";'
                ),
            },
            "names another listener",
        ),
        ({**member, "ssl_endpoint_identification_algorithm": "ldap"}, "is not 'https' or empty"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(error)):
            BrokerConfig.from_mapping(given_settings)


OAUTH_JAAS = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"


def oauth_login(*options: str) -> str:
    return (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        + " ".join(options)
        + ";"
    )


def test_inter_broker_oauthbearer_takes_kafkas_unsecured_login_options() -> None:
    """Kafka's unsecured OAUTHBEARER login module (``OAuthBearerUnsecuredLoginCallback
    Handler``'s options, Kafka 3.9): ``unsecuredLoginStringClaim_<claim>``,
    ``...ListClaim_<claim>`` (the value's first character separates the items),
    ``...NumberClaim_<claim>``, ``unsecuredLoginPrincipalClaimName`` (``sub``) and
    ``unsecuredLoginLifetimeSeconds`` (3600); ``iat`` and ``exp`` are its own."""
    from trafka.brokerlite.cluster.inter_broker import inter_broker_login
    from trafka.codec.oauthbearer import TokenValidator

    member = {
        "zookeeper_connect": "127.0.0.1:2181",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
    }
    config = BrokerConfig.from_mapping(
        {
            **member,
            OAUTH_JAAS: oauth_login(
                'unsecuredLoginStringClaim_who="broker"',
                'unsecuredLoginPrincipalClaimName="who"',
                'unsecuredLoginListClaim_scope="|replicate|admin"',
                'unsecuredLoginNumberClaim_rank="3"',
                'unsecuredLoginLifetimeSeconds="60"',
            ),
        }
    )
    # The only mechanism enabled is the brokers' too (Kafka's default is GSSAPI).
    assert config.sasl_mechanism_inter_broker_protocol == "OAUTHBEARER"
    assert config.inter_broker_sasl_username == "broker"
    login = inter_broker_login(config)
    assert login is not None
    token = login.token(now_ms=1_000_000)
    validator = TokenValidator(principal_claim="who", required_scopes=("replicate",))
    valid = validator.validate(token, now_ms=1_000_000)
    assert (valid.principal, valid.expires_ms) == ("broker", 1_060_000)
    assert valid.claims["rank"] == 3 and valid.claims["iat"] == 1000
    with pytest.raises(Exception, match="expired"):
        validator.validate(token, now_ms=1_060_000 + 31_000)

    for options, error in [
        (('username="broker"',), "not 'username'"),
        (('unsecuredLoginStringClaim_scope="x"',), "unsecuredLoginStringClaim_sub, which must"),
        (
            ('unsecuredLoginStringClaim_sub="b"', 'unsecuredLoginNumberClaim_exp="1"'),
            "iat and exp are set from the token's lifetime",
        ),
        (
            ('unsecuredLoginStringClaim_sub="b"', 'unsecuredLoginLifetimeSeconds="0"'),
            "must be positive",
        ),
        (('unsecuredLoginStringClaim_sub="b"', 'unsecuredLoginFoo="1"'), "is not one of Kafka"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(error)):
            BrokerConfig.from_mapping({**member, OAUTH_JAAS: oauth_login(*options)})
    # Fail closed: no login, or peers that would refuse an unsecured token.
    with pytest.raises(ConfigError, match=re.escape(f"OAUTHBEARER: set {OAUTH_JAAS}")):
        BrokerConfig.from_mapping(member)
    with pytest.raises(ConfigError, match="refuses; use SCRAM or PLAIN between brokers"):
        BrokerConfig.from_mapping(
            {
                **member,
                OAUTH_JAAS: oauth_login('unsecuredLoginStringClaim_sub="b"'),
                "sasl_oauthbearer_jwks_endpoint_url": "https://idp.example/jwks",
            }
        )
