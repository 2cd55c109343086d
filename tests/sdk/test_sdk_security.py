"""The client's TLS and SASL, against the scripted fake broker.

The fake broker's SASL handlers are the server side of :mod:`trafka.codec.sasl`
(checked against RFC 7677's example in tests/codec/test_sasl.py); its TLS is
anyio's, with certificates made by trustme. These tests check what the client
does with them: authenticate every connection before any other request, fail
at once (AuthenticationError, not a timeout) when the credentials or the
certificate are refused, recover once the broker accepts again, and move large
answers through TLS. tests/brokerlite has the same against brokerlite and real
clients.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import pytest
import trustme
from anyio.streams.tls import TLSListener
from sdk_fakebroker import FakeBroker, current_connection

from trafka.codec import ErrorCode
from trafka.codec.messages import k17_sasl_handshake as hs
from trafka.codec.messages import k36_sasl_authenticate as au
from trafka.codec.sasl import (
    PlainServer,
    SaslAuthenticationError,
    ScramCredential,
    ScramServer,
)
from trafka.sdk import open_admin, open_consumer, open_producer
from trafka.sdk.config import ProducerConfig
from trafka.sdk.errors import AuthenticationError, ConfigError, TransactionFatalError

pytestmark = pytest.mark.anyio

QUICK = {"reconnect_backoff_ms": 5, "reconnect_backoff_max_ms": 20, "retry_backoff_ms": 5}
USERS = {"alice": "alice-secret", "b,o=b": "pa,ss=w\u00f6rd"}  # names and passwords to escape


class SaslScript:
    """SaslHandshake and SaslAuthenticate handlers for a FakeBroker.

    SCRAM needs state across two requests of one connection; the handlers find
    it by the nonce, which only that connection knows.
    """

    def __init__(self, broker: FakeBroker, mechanisms: tuple[str, ...]) -> None:
        self.mechanisms = mechanisms
        self.users = dict(USERS)
        self.mechanism: dict[str, str] = {}  # the last handshake's mechanism
        self.scram: dict[str, ScramServer] = {}
        self.tamper: Callable[[bytes], bytes] | None = None  # the server-final, rewritten
        self.authenticated: set[int] = set()  # connection numbers
        self.unauthenticated_requests: list[int] = []  # API keys
        broker.handlers[17] = self.handshake
        broker.handlers[36] = self.authenticate
        broker.before = self.check

    def check(self, key: int) -> None:
        if key not in (17, 18, 36) and current_connection.get() not in self.authenticated:
            self.unauthenticated_requests.append(key)

    def credential(self, mechanism: str) -> Callable[[str], ScramCredential | None]:
        def lookup(user: str) -> ScramCredential | None:
            password = self.users.get(user)
            return None if password is None else ScramCredential.from_password(mechanism, password)

        return lookup

    def handshake(self, header: Any, body: Any) -> Any:
        if body.mechanism not in self.mechanisms:
            return hs.SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=list(self.mechanisms)
            )
        self.mechanism["last"] = body.mechanism
        return hs.SaslHandshakeResponse(error_code=0, mechanisms=list(self.mechanisms))

    def authenticate(self, header: Any, body: Any) -> Any:
        token = bytes(body.auth_bytes)
        mechanism = self.mechanism["last"]
        try:
            if mechanism == "PLAIN":
                answer = PlainServer(self.users.get).respond(token)
                self.authenticated.add(current_connection.get())
            elif token.startswith(b"n,"):
                server = ScramServer(mechanism, self.credential(mechanism))
                answer = server.server_first(token)
                nonce = answer.decode().split(",")[0][2:]
                self.scram[nonce] = server
            else:
                nonce = token.decode().split(",r=")[1].split(",")[0]
                answer = self.scram.pop(nonce).server_final(token)
                self.authenticated.add(current_connection.get())
                if self.tamper is not None:
                    answer = self.tamper(answer)
        except SaslAuthenticationError as exc:
            return au.SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message=f"Authentication failed: {exc}",
                auth_bytes=b"",
            )
        return au.SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=answer)


def sasl(mechanism: str, user: str = "alice", password: str | None = None) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_username": user,
        "sasl_password": USERS[user] if password is None else password,
        **QUICK,
    }


def authenticated_first(broker: FakeBroker, script: SaslScript) -> None:
    """Every connection authenticated, and none sent other requests before it had."""
    assert script.unauthenticated_requests == []
    assert script.authenticated == set(range(1, broker.connections + 1))
    assert broker.connections >= 1


# -- SASL ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "b,o=b"])
async def test_every_connection_authenticates_before_its_first_request(
    fake_broker: FakeBroker, mechanism: str, user: str
) -> None:
    script = SaslScript(fake_broker, ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    with anyio.fail_after(15):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, **sasl(mechanism, user)
        ) as producer:
            meta = await producer.send_and_wait("t", b"v", partition=1)
    assert meta.partition == 1
    assert [r.value for r in fake_broker.records("t", 1)] == [b"v"]
    authenticated_first(fake_broker, script)


async def test_scram_bytes_on_the_wire_follow_rfc_5802(fake_broker: FakeBroker) -> None:
    SaslScript(fake_broker, ("SCRAM-SHA-256",))
    async with open_admin(
        bootstrap_servers=fake_broker.bootstrap, **sasl("SCRAM-SHA-256", "b,o=b")
    ) as admin:
        await admin.list_topics()
    tokens = [bytes(b.auth_bytes) for k, _, b in fake_broker.requests if k == 36]
    first, final = tokens[0].decode(), tokens[1].decode()
    assert first.startswith("n,,n=b=2Co=3Db,r=")  # the name escaped, no channel binding
    assert final.startswith("c=biws,r=" + first.split(",r=")[1])
    assert ",p=" in final


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_wrong_password_fails_at_once_with_the_brokers_message(
    fake_broker: FakeBroker, mechanism: str
) -> None:
    SaslScript(fake_broker, ("PLAIN", "SCRAM-SHA-512"))
    with anyio.fail_after(10):  # max.block.ms is 60 s: the error must not wait for it
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, **sasl(mechanism, password="nope")
        ) as producer:
            with pytest.raises(AuthenticationError) as caught:
                await producer.send_and_wait("t", b"v")
    assert caught.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Authentication failed" in str(caught.value)
    assert fake_broker.records("t", 0) == []
    assert {k for k, _, _ in fake_broker.requests} == {17, 18, 36}


async def test_unknown_user_fails_like_a_wrong_password(fake_broker: FakeBroker) -> None:
    script = SaslScript(fake_broker, ("SCRAM-SHA-256",))
    script.users["mallory"] = "x"
    config = sasl("SCRAM-SHA-256", "alice")
    config["sasl_username"] = "nobody"
    with anyio.fail_after(10):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap, **config) as admin:
            with pytest.raises(AuthenticationError, match="invalid credentials"):
                await admin.list_topics()


async def test_a_mechanism_the_broker_does_not_enable_names_those_it_does(
    fake_broker: FakeBroker,
) -> None:
    SaslScript(fake_broker, ("SCRAM-SHA-256", "SCRAM-SHA-512"))
    with anyio.fail_after(10):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap, **sasl("PLAIN")) as admin:
            with pytest.raises(AuthenticationError) as caught:
                await admin.list_topics()
    assert caught.value.code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert "SCRAM-SHA-256, SCRAM-SHA-512" in str(caught.value)


async def test_a_listener_without_sasl_is_named_as_the_likely_mistake(
    fake_broker: FakeBroker,
) -> None:
    original = fake_broker.api_versions

    def without_sasl(header: Any, body: Any) -> Any:
        answer = original(header, body)
        answer.api_keys[:] = [k for k in answer.api_keys if k.api_key not in (17, 36)]
        return answer

    fake_broker.handlers[18] = without_sasl
    with anyio.fail_after(10):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap, **sasl("PLAIN")) as admin:
            with pytest.raises(AuthenticationError, match="SASL_PLAINTEXT"):
                await admin.list_topics()


async def test_a_server_that_does_not_know_the_password_is_not_trusted(
    fake_broker: FakeBroker,
) -> None:
    # SCRAM is mutual: a server-final signature that does not match means the
    # server never had the credentials (an impostor that accepted anything).
    script = SaslScript(fake_broker, ("SCRAM-SHA-256",))
    script.tamper = lambda answer: b"v=" + b"A" * 43 + b"="
    with anyio.fail_after(10):
        async with open_admin(
            bootstrap_servers=fake_broker.bootstrap, **sasl("SCRAM-SHA-256")
        ) as admin:
            with pytest.raises(AuthenticationError, match="signature"):
                await admin.list_topics()
    assert {k for k, _, _ in fake_broker.requests} <= {17, 18, 36}


async def test_consumer_raises_the_refusal_and_recovers_when_the_broker_accepts(
    fake_broker: FakeBroker,
) -> None:
    script = SaslScript(fake_broker, ("PLAIN",))
    script.users["alice"] = "rotated"
    with anyio.fail_after(20):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap,
            auto_offset_reset="earliest",
            **sasl("PLAIN"),
        ) as consumer:
            consumer.assign([("one", 0)])
            with pytest.raises(AuthenticationError):
                await consumer.getmany(timeout_ms=5000)
            with pytest.raises(AuthenticationError):  # still refused: raised again
                await consumer.getmany(timeout_ms=5000)
            script.users["alice"] = USERS["alice"]  # the broker takes the client's password now
            async with open_producer(
                bootstrap_servers=fake_broker.bootstrap, **sasl("PLAIN")
            ) as producer:
                await producer.send_and_wait("one", b"after", partition=0)
            got: list[bytes] = []
            while not got:
                try:
                    batches = await consumer.getmany(timeout_ms=200)
                except AuthenticationError:
                    await anyio.sleep(0.05)  # until its next connect succeeds
                    continue
                got = [r.value for recs in batches.values() for r in recs]
    assert got == [b"after"]


# -- configuration -------------------------------------------------------------------------


def test_credentials_from_any_clients_spelling_and_never_in_repr() -> None:
    java = ProducerConfig.from_dict(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "scram-sha-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="al\\"ice" password="p@ss word";',
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert (java.sasl_username, java.sasl_password) == ('al"ice', "p@ss word")
    assert java.sasl_mechanism == "SCRAM-SHA-256" and not java.ssl_check_hostname
    librdkafka = ProducerConfig.from_dict(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "hunter2",
            "ssl.ca.location": "/tmp/ca.pem",
        }
    )
    kafka_python = ProducerConfig.from_dict(
        security_protocol="SASL_PLAINTEXT", sasl_plain_username="u", sasl_plain_password="hunter2"
    )
    assert (librdkafka.sasl_username, librdkafka.sasl_password) == ("u", "hunter2")
    assert (kafka_python.sasl_username, kafka_python.sasl_password) == ("u", "hunter2")
    assert librdkafka.ssl_cafile == "/tmp/ca.pem"
    for config in (java, librdkafka, kafka_python):
        assert "hunter2" not in repr(config) and "p@ss" not in repr(config)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"security_protocol": "SASL_SSL"}, "needs sasl.username and sasl.password"),
        ({"security_protocol": "sasl_plaintext", "sasl_username": "u"}, "needs sasl.username"),
        ({"security_protocol": "TLS"}, "security.protocol must be one of"),
        ({"sasl_mechanism": "GSSAPI"}, "GSSAPI is not supported"),
        ({"sasl_mechanism": "SCRAM-SHA-1"}, "sasl.mechanism must be one of"),
        ({"ssl_context": "not a context"}, "must be an ssl.SSLContext"),
        ({"security_protocol": "ssl", "ssl_keyfile": "k.pem"}, "without ssl.certfile"),
    ],
)
def test_security_settings_that_cannot_work_are_refused(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig.from_dict(**settings)


async def test_an_unreadable_ca_file_is_a_config_error_when_the_client_opens(
    tmp_path: Any,
) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.cafile"):
        async with open_admin(
            bootstrap_servers="127.0.0.1:9", security_protocol="SSL", ssl_cafile=str(tmp_path / "x")
        ):
            pass


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def serve_tls(
    broker: FakeBroker, ca: trustme.CA, *, names: tuple[str, ...], client_ca: bool = False
) -> AsyncIterator[None]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    if client_ca:
        ca.configure_trust(context)
        context.verify_mode = ssl.CERT_REQUIRED
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    broker.port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener = TLSListener(tcp, context, standard_compatible=False)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, broker.serve)
        yield
        tg.cancel_scope.cancel()


@pytest.fixture
async def tls_broker(fake_broker: FakeBroker, ca: trustme.CA) -> AsyncIterator[FakeBroker]:
    async for _ in serve_tls(fake_broker, ca, names=("127.0.0.1", "localhost")):
        yield fake_broker


def tls(ca: trustme.CA, tmp_path: Any, **more: Any) -> dict[str, Any]:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return {"security_protocol": "SSL", "ssl_cafile": str(path), **QUICK, **more}


async def test_large_answers_cross_tls_whole(
    tls_broker: FakeBroker, ca: trustme.CA, tmp_path: Any
) -> None:
    # Several MB each way: partial TLS writes, and records the TLS layer
    # decrypted before the reader asked (it must not sleep on them).
    values = [bytes([i % 251]) * 3000 + i.to_bytes(4, "big") for i in range(2000)]
    with anyio.fail_after(30):
        async with open_producer(
            bootstrap_servers=tls_broker.bootstrap, linger_ms=20, **tls(ca, tmp_path)
        ) as producer:
            for v in values:
                await producer.send("one", v, partition=0)
            await producer.flush()
        async with open_consumer(
            bootstrap_servers=tls_broker.bootstrap,
            auto_offset_reset="earliest",
            **tls(ca, tmp_path),
        ) as consumer:
            consumer.assign([("one", 0)])
            got: list[bytes] = []
            while len(got) < len(values):
                for recs in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend(r.value for r in recs)
    assert got == values


async def test_sasl_over_tls(tls_broker: FakeBroker, ca: trustme.CA, tmp_path: Any) -> None:
    script = SaslScript(tls_broker, ("SCRAM-SHA-512",))
    settings = {**sasl("SCRAM-SHA-512"), **tls(ca, tmp_path), "security_protocol": "SASL_SSL"}
    with anyio.fail_after(15):
        async with open_producer(bootstrap_servers=tls_broker.bootstrap, **settings) as producer:
            await producer.send_and_wait("t", b"secret", partition=2)
    assert [r.value for r in tls_broker.records("t", 2)] == [b"secret"]
    authenticated_first(tls_broker, script)


async def test_a_certificate_from_an_unknown_ca_is_refused_at_once(
    tls_broker: FakeBroker, tmp_path: Any
) -> None:
    other = trustme.CA()
    with anyio.fail_after(10):
        async with open_admin(
            bootstrap_servers=tls_broker.bootstrap, **tls(other, tmp_path)
        ) as admin:
            with pytest.raises(AuthenticationError, match="did not verify") as caught:
                await admin.list_topics()
    assert caught.value.code is None
    assert tls_broker.requests == []


async def test_the_certificate_must_name_the_host_unless_told_not_to_check(
    fake_broker: FakeBroker, ca: trustme.CA, tmp_path: Any
) -> None:
    async for _ in serve_tls(fake_broker, ca, names=("broker.example",)):
        with anyio.fail_after(10):
            async with open_admin(
                bootstrap_servers=fake_broker.bootstrap, **tls(ca, tmp_path)
            ) as admin:
                with pytest.raises(AuthenticationError, match=r"(IP address|Hostname) mismatch"):
                    await admin.list_topics()
            unchecked = tls(ca, tmp_path, ssl_check_hostname=False)
            async with open_admin(bootstrap_servers=fake_broker.bootstrap, **unchecked) as admin:
                assert set(await admin.list_topics()) == {"t", "one"}


async def test_client_certificate_for_a_broker_that_requires_one(
    fake_broker: FakeBroker, ca: trustme.CA, tmp_path: Any
) -> None:
    client = ca.issue_cert("client@example")
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    client.cert_chain_pems[0].write_to_path(str(cert))
    client.private_key_pem.write_to_path(str(key))
    async for _ in serve_tls(fake_broker, ca, names=("127.0.0.1",), client_ca=True):
        settings = tls(ca, tmp_path, ssl_certfile=str(cert), ssl_keyfile=str(key))
        with anyio.fail_after(10):
            async with open_admin(bootstrap_servers=fake_broker.bootstrap, **settings) as admin:
                assert set(await admin.list_topics()) == {"t", "one"}


async def test_a_callers_own_ssl_context_is_used_as_given(
    tls_broker: FakeBroker, ca: trustme.CA
) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with anyio.fail_after(10):
        async with open_admin(
            bootstrap_servers=tls_broker.bootstrap,
            security_protocol="ssl",
            ssl_context=context,
            **QUICK,
        ) as admin:
            assert set(await admin.list_topics()) == {"t", "one"}


async def test_init_transactions_fails_fatally_on_refused_credentials(
    fake_broker: FakeBroker,
) -> None:
    SaslScript(fake_broker, ("SCRAM-SHA-256",))
    settings = {**sasl("SCRAM-SHA-256", password="nope"), "transactional_id": "tx"}
    with anyio.fail_after(10):  # max.block.ms is 60 s
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, **settings) as producer:
            with pytest.raises(TransactionFatalError) as caught:
                await producer.init_transactions()
    assert isinstance(caught.value.__cause__, AuthenticationError)
    assert caught.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
