"""SASL/OAUTHBEARER against brokerlite: confluent-kafka (librdkafka's unsecured
JWT and ``oauth_cb``), kafka-python and aiokafka token providers, and trafka's
SDK (unsecured tokens, its own providers, and OIDC client credentials against a
local token endpoint).

The broker requires the scope ``kafka`` in every token, so a token that parses
but lacks it is refused with ``insufficient_scope``; an expired one with
``invalid_token``. SCRAM keeps working on the same listener.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from reauth_flow import records_flow_while_reauthenticating

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec.oauthbearer import unsecured_token
from trafka.sdk import AuthenticationError, ConfigError, open_consumer, open_producer
from trafka.sdk.config import ClientConfig

pytestmark = pytest.mark.timeout(120)

SASL = {"security_protocol": "sasl_plaintext", "sasl_mechanism": "OAUTHBEARER"}


def now_ms() -> int:
    return int(time.time() * 1000)


def oauth_broker(data_dir: Path, **settings: Any) -> Any:
    """brokerlite on 127.0.0.1 with a SASL_PLAINTEXT listener taking OAUTHBEARER
    (``settings`` add to or override that)."""
    return broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data_dir,
        security_protocol="SASL_PLAINTEXT",
        **{"sasl_enabled_mechanisms": "OAUTHBEARER", **settings},
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with oauth_broker(
        tmp_path_factory.mktemp("oauth"),
        sasl_enabled_mechanisms="OAUTHBEARER,SCRAM-SHA-256",
        sasl_users="scram-user:scram-secret",
        sasl_oauthbearer_required_scopes="kafka",
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield running


# -- librdkafka ------------------------------------------------------------------------------


def _confluent(bs: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bs,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        **extra,
    }


def test_confluent_kafka_with_unsecured_jwts(broker: RunningBroker) -> None:
    from confluent_kafka import Consumer, Producer

    bs, topic = broker.bootstrap_servers, "oauth-librdkafka"
    conf = _confluent(
        bs,
        **{
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=alice scope=kafka,other extension_traceId=7",
        },
    )
    producer = Producer(conf)
    delivered: list[Any] = []
    for i in range(5):
        producer.produce(topic, b"v%d" % i, key=b"k", on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0 and delivered == [None] * 5
    consumer = Consumer({**conf, "group.id": "oauth-g", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"v%d" % i for i in range(5)]
    finally:
        consumer.close()


# Tokens of 10 s: librdkafka takes a new one at 80% of the lifetime, so a
# connection that re-authenticated just before with the old one holds a session
# of at least 2 s. Much shorter tokens can leave a session under a second, and a
# connection may not re-authenticate twice within a second (Kafka's rule, which
# brokerlite keeps): it would be refused and its session would expire. Sessions
# of 5 s, not 1.5: librdkafka re-authenticates shortly before a session ends,
# and with 1.5 s sessions it came too late once on a machine at load 20 (the
# session expired), a verdict on the machine's load, not on either side.
@pytest.mark.parametrize(
    ("reauth_ms", "token_seconds", "wanted"),
    [(5000, 3600, 6), (0, 10, 4)],
    ids=["connections.max.reauth.ms", "token-lifetime"],
)
@pytest.mark.slow
def test_librdkafka_reauthenticates_oauthbearer_sessions(
    tmp_path: Path, reauth_ms: int, token_seconds: int, wanted: int
) -> None:
    """KIP-368 with OAUTHBEARER: a session ends at the broker's
    ``connections.max.reauth.ms`` or at the token's ``exp``, whichever comes
    first. librdkafka refreshes its token when it has to and re-authenticates
    each connection in place before its session ends: records keep flowing both
    ways, and the broker never closes a connection for an expired session."""
    from confluent_kafka import Consumer, Producer

    with oauth_broker(
        tmp_path / "data",
        connections_max_reauth_ms=reauth_ms,
        group_initial_rebalance_delay_ms=0,
    ) as running:
        errors: list[Any] = []
        conf = _confluent(
            running.bootstrap_servers,
            **{
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": f"principal=alice lifeSeconds={token_seconds}",
                "error_cb": errors.append,
            },
        )
        producer = Producer({**conf, "linger.ms": 5})
        consumer = Consumer({**conf, "group.id": "oauth-reauth-g"})
        records_flow_while_reauthenticating(
            running.broker, producer, consumer, "oauth-reauth", wanted, errors
        )


def _refused_by_librdkafka(bs: str, token: str) -> str:
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []

    def oauth_cb(_config: str) -> tuple[str, float]:
        return token, time.time() + 3600

    producer = Producer(
        _confluent(bs, oauth_cb=oauth_cb, error_cb=errors.append, **{"message.timeout.ms": 5000})
    )
    producer.produce("oauth-refused", b"never")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(
        e.code() == KafkaError._AUTHENTICATION for e in errors
    ):
        producer.poll(0.2)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    producer.purge()
    return str(auth[0].str())


def test_librdkafka_tokens_without_the_scope_or_expired_are_refused(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    no_scope = unsecured_token("alice", now_ms=now_ms(), scope=["other"])
    assert "lacks the required scope" in _refused_by_librdkafka(bs, no_scope)
    expired = unsecured_token("alice", now_ms=now_ms() - 7_200_000, lifetime_ms=60_000)
    assert "expired" in _refused_by_librdkafka(bs, expired)


# -- kafka-python and aiokafka ---------------------------------------------------------------


def test_kafka_python_token_provider(broker: RunningBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def __init__(self, scope: list[str]) -> None:
            self.scope = scope

        def token(self) -> str:
            return unsecured_token("carol", now_ms=now_ms(), scope=self.scope)

    bs, topic = broker.bootstrap_servers, "oauth-kafka-python"
    common = {
        "bootstrap_servers": bs,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
    }
    producer = KafkaProducer(sasl_oauth_token_provider=Provider(["kafka"]), **common)
    try:
        meta = producer.send(topic, b"from kafka-python", key=b"k").get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, sasl_oauth_token_provider=Provider(["kafka"]), auto_offset_reset="earliest", **common
    )
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        assert got == [b"from kafka-python"] and meta.offset == 0
    finally:
        consumer.close()


def test_aiokafka_token_provider(broker: RunningBroker) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return unsecured_token("dave", now_ms=now_ms(), scope=["kafka"])

    async def main() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Provider(),
        )
        await producer.start()
        try:
            meta = await producer.send_and_wait("oauth-aiokafka", b"from aiokafka", key=b"k")
            return int(meta.offset)
        finally:
            await producer.stop()

    assert asyncio.run(main()) == 0


# -- trafka's SDK ----------------------------------------------------------------------------


async def _round_trip(bs: str, topic: str, **config: Any) -> list[bytes]:
    settings = {**SASL, **config}
    async with open_producer(bootstrap_servers=bs, **settings) as producer:
        await (await producer.send(topic, b"hello", key=b"k"))
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", group_id=f"{topic}-g", **settings
    ) as consumer:
        consumer.subscribe([topic])
        with anyio.fail_after(30):
            return [(await consumer.getone()).value]


def test_sdk_unsecured_tokens_and_its_own_providers(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    calls: list[str] = []

    def plain() -> tuple[str, dict[str, str]]:
        calls.append("plain")
        return unsecured_token("erin", now_ms=now_ms(), scope=["kafka"]), {"traceId": "1"}

    class AsyncProvider:
        async def token(self) -> str:
            calls.append("async")
            return unsecured_token("frank", now_ms=now_ms(), scope=["kafka"])

        def extensions(self) -> dict[str, str]:
            return {"tenant": "blue"}

    async def main() -> None:
        unsecured = {
            "enable_sasl_oauthbearer_unsecure_jwt": True,
            "sasl_oauthbearer_config": "principal=grace scope=kafka lifeSeconds=60",
        }
        assert await _round_trip(bs, "oauth-sdk-1", **unsecured) == [b"hello"]
        assert await _round_trip(bs, "oauth-sdk-2", sasl_oauth_token_provider=plain) == [b"hello"]
        provider = AsyncProvider()
        assert await _round_trip(bs, "oauth-sdk-3", sasl_oauth_token_provider=provider) == [
            b"hello"
        ]
        # Java's JAAS spelling of an unsecured login works too.
        jaas = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="heidi";'
        )
        with pytest.raises(AuthenticationError, match="lacks the required scope"):
            await _round_trip(bs, "oauth-sdk-4", sasl_jaas_config=jaas)

    anyio.run(main)
    assert "plain" in calls and "async" in calls


def test_sdk_refusals_are_authentication_errors(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers

    async def attempt(provider: Any) -> str:
        with pytest.raises(AuthenticationError) as info:
            await _round_trip(bs, "oauth-refused", sasl_oauth_token_provider=provider)
        return str(info.value)

    async def main() -> None:
        expired = unsecured_token("x", now_ms=now_ms() - 7_200_000, lifetime_ms=1000)
        assert "expired" in await attempt(lambda: expired)
        no_scope = unsecured_token("x", now_ms=now_ms())
        message = await attempt(lambda: no_scope)
        assert "lacks the required scope" in message and no_scope not in message

        def broken() -> str:
            raise RuntimeError("vault unreachable")

        assert "vault unreachable" in await attempt(broken)
        assert "not a token string" in await attempt(lambda: 42)

    anyio.run(main)


class _JsonEndpoint:
    """A local HTTP server whose answers ``respond(method, headers, body)`` gives as
    ``(status, JSON document or None)``."""

    def __init__(self, respond: Callable[[str, Any, bytes], tuple[int, Any]], path: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                status, document = respond(self.command, self.headers, self.rfile.read(length))
                body = b"" if document is None else json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # http.server looks the methods up by name

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _TokenEndpoint(_JsonEndpoint):
    """An OAuth token endpoint: client credentials in, unsecured JWTs out."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        super().__init__(self._token, "/token")

    def _token(self, method: str, headers: Any, body: bytes) -> tuple[int, Any]:
        form = dict(urllib.parse.parse_qsl(body.decode()))
        self.requests.append(form)
        expected = "Basic " + base64.b64encode(b"svc:s3cret").decode()
        if headers.get("Authorization", "") != expected:
            return 401, None
        if method != "POST" or form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        scope = form.get("scope", "").split()
        token = unsecured_token("svc", now_ms=now_ms(), scope=scope)
        return 200, {"access_token": token, "token_type": "bearer", "expires_in": 300}


def test_sdk_oidc_client_credentials(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    endpoint = _TokenEndpoint()
    try:
        oidc = {
            "sasl_oauthbearer_method": "oidc",
            "sasl_oauthbearer_token_endpoint_url": endpoint.url,
            "sasl_oauthbearer_client_id": "svc",
            "sasl_oauthbearer_client_secret": "s3cret",
            "sasl_oauthbearer_scope": "kafka",
        }

        async def main() -> None:
            async with open_producer(bootstrap_servers=bs, **SASL, **oidc) as producer:
                for i in range(3):
                    await (await producer.send(f"oauth-oidc-{i}", b"v", key=b"k"))
            # Several connections (bootstrap, then the broker), one token request.
            assert len(endpoint.requests) == 1
            assert endpoint.requests[0] == {"grant_type": "client_credentials", "scope": "kafka"}
            wrong = {**oidc, "sasl_oauthbearer_client_secret": "nope"}
            with pytest.raises(AuthenticationError, match="HTTP 401"):
                async with open_producer(bootstrap_servers=bs, **SASL, **wrong) as producer:
                    await (await producer.send("oauth-oidc-x", b"v", key=b"k"))

        anyio.run(main)
        # The secret never shows.
        config = ClientConfig(bootstrap_servers=bs, **SASL, **oidc)
        assert "s3cret" not in repr(config)
    finally:
        endpoint.close()


def test_scram_still_works_beside_oauthbearer(broker: RunningBroker) -> None:
    async def main() -> list[bytes]:
        return await _round_trip(
            broker.bootstrap_servers,
            "oauth-scram",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_username="scram-user",
            sasl_password="scram-secret",
        )

    assert anyio.run(main) == [b"hello"]


def test_sdk_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="needs a token source"):
        ClientConfig(**SASL)
    with pytest.raises(ConfigError, match=r"token\.endpoint\.url"):
        ClientConfig(**SASL, sasl_oauthbearer_method="oidc")
    with pytest.raises(ConfigError, match="principal"):
        ClientConfig(
            **SASL, enable_sasl_oauthbearer_unsecure_jwt=True, sasl_oauthbearer_config="scope=a"
        )
    with pytest.raises(ConfigError, match="unknown setting"):
        ClientConfig(
            **SASL,
            enable_sasl_oauthbearer_unsecure_jwt=True,
            sasl_oauthbearer_config="principal=a colour=red",
        )
    with pytest.raises(ConfigError, match="token\\(\\) method"):
        ClientConfig(**SASL, sasl_oauth_token_provider="not callable")
    with pytest.raises(ConfigError, match="http"):
        ClientConfig(
            **SASL,
            sasl_oauthbearer_method="oidc",
            sasl_oauthbearer_token_endpoint_url="file:///etc/passwd",
            sasl_oauthbearer_client_id="a",
            sasl_oauthbearer_client_secret="b",
        )
    # Dotted names, as librdkafka spells them.
    config = ClientConfig.from_dict(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": "principal=ivan",
        }
    )
    assert "ivan" in repr(config.sasl_oauth_token_provider)


def test_brokerlite_settings() -> None:
    from trafka.brokerlite.config import BrokerConfig
    from trafka.brokerlite.config import ConfigError as BrokerConfigError

    # OAUTHBEARER alone needs no users; it is never on by default.
    config = BrokerConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_enabled_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_expected_audience="kafka, broker",
    )
    assert config.sasl_oauthbearer_expected_audience == ("kafka", "broker")
    assert "OAUTHBEARER" not in BrokerConfig().sasl_enabled_mechanisms
    with pytest.raises(BrokerConfigError, match="needs users"):
        BrokerConfig(
            security_protocol="SASL_PLAINTEXT", sasl_enabled_mechanisms="OAUTHBEARER,PLAIN"
        )
    with pytest.raises(BrokerConfigError, match="jwks_endpoint_url"):
        BrokerConfig(
            security_protocol="SASL_PLAINTEXT",
            sasl_enabled_mechanisms="OAUTHBEARER",
            sasl_oauthbearer_jwks_endpoint_url="ftp://idp/jwks",
        )
    with pytest.raises(BrokerConfigError, match="clock_skew"):
        BrokerConfig(
            security_protocol="SASL_PLAINTEXT",
            sasl_enabled_mechanisms="OAUTHBEARER",
            sasl_oauthbearer_clock_skew_seconds=-1,
        )


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_with_an_unsecured_jwt(broker: RunningBroker) -> None:
    common = [
        "kcat", "-b", broker.bootstrap_servers,
        "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=OAUTHBEARER",
        "-X", "enable.sasl.oauthbearer.unsecure.jwt=true",
    ]  # fmt: skip
    good = [*common, "-X", "sasl.oauthbearer.config=principal=kim scope=kafka"]
    produced = subprocess.run(
        [*good, "-P", "-t", "oauth-kcat", "-K", ":"],
        input=b"k:from kcat", capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [*good, "-C", "-t", "oauth-kcat", "-o", "beginning", "-e", "-q"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert consumed.stdout.splitlines() == [b"from kcat"], consumed.stderr
    refused = subprocess.run(
        [*common, "-X", "sasl.oauthbearer.config=principal=kim", "-L", "-m", "5"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and b"required scope" in refused.stderr


# -- signed tokens: the identity provider's keys (KIP-768) -----------------------------------


class _JwksEndpoint(_JsonEndpoint):
    """Serves a JWK set document that the test can change (key rotation)."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.reads = 0
        super().__init__(self._keys, "/jwks.json")

    def _keys(self, method: str, headers: Any, body: bytes) -> tuple[int, Any]:
        self.reads += 1
        return 200, self.document


ISSUER = "https://idp.test"


def _signed(key: Any, **claims: Any) -> str:
    now = time.time()
    return str(key.sign({"sub": "svc", "iss": ISSUER, "iat": now, "exp": now + 600, **claims}))


async def _produce_with(bs: str, token: Any) -> int:
    async with open_producer(
        bootstrap_servers=bs, sasl_oauth_token_provider=lambda: token, **SASL
    ) as producer:
        meta = await (await producer.send("signed", b"v", key=b"k"))
        return int(meta.offset)


def test_signed_tokens_checked_against_a_rotating_key_set(tmp_path: Path) -> None:
    from oauth_keys import SigningKey, jwks

    old, new = SigningKey("2025", "RS256"), SigningKey("2026", "ES256")
    endpoint = _JwksEndpoint(jwks(old))
    try:
        with oauth_broker(
            tmp_path / "data",
            sasl_oauthbearer_jwks_endpoint_url=endpoint.url,
            sasl_oauthbearer_jwks_endpoint_refresh_ms=100,
            sasl_oauthbearer_expected_issuer=ISSUER,
        ) as running:
            bs = running.bootstrap_servers

            async def refused(token: str) -> str:
                with pytest.raises(AuthenticationError) as info:
                    await _produce_with(bs, token)
                return str(info.value)

            async def main() -> None:
                assert await _produce_with(bs, _signed(old)) >= 0
                assert "signed tokens only" in await refused(
                    unsecured_token("svc", now_ms=now_ms())
                )
                assert "no key" in await refused(_signed(new))
                assert "issuer" in await refused(_signed(old, iss="https://elsewhere"))
                # The provider publishes its next key; the broker reads it at its next refresh.
                endpoint.document = jwks(old, new)
                reads = endpoint.reads
                with anyio.fail_after(20):
                    while endpoint.reads < reads + 2:
                        await anyio.sleep(0.05)
                assert await _produce_with(bs, _signed(new)) >= 0

            anyio.run(main)
            # librdkafka hands its own signed token over through oauth_cb.
            from confluent_kafka import Producer

            delivered: list[Any] = []
            producer = Producer(
                _confluent(bs, oauth_cb=lambda _c: (_signed(old), time.time() + 600))
            )
            producer.produce(
                "signed", b"from librdkafka", on_delivery=lambda e, m: delivered.append(e)
            )
            assert producer.flush(30) == 0 and delivered == [None]
    finally:
        endpoint.close()


def test_a_key_set_from_a_file_and_one_that_cannot_be_read(tmp_path: Path) -> None:
    from oauth_keys import SigningKey, jwks

    key = SigningKey("file-key", "PS256")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(key)))
    with oauth_broker(tmp_path / "a", sasl_oauthbearer_jwks_endpoint_url=path.as_uri()) as running:
        assert anyio.run(_produce_with, running.bootstrap_servers, _signed(key)) >= 0
    # A key set that cannot be read: the broker serves, and refuses every token.
    missing = (tmp_path / "nowhere.json").as_uri()
    with (
        oauth_broker(tmp_path / "b", sasl_oauthbearer_jwks_endpoint_url=missing) as running,
        pytest.raises(AuthenticationError, match="no key"),
    ):
        anyio.run(_produce_with, running.bootstrap_servers, _signed(key))
