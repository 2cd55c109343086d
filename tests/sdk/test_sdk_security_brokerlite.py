"""The client's TLS and SASL against brokerlite, and beside other clients.

brokerlite's SASL and TLS are checked against librdkafka, kafka-python and kcat
in tests/brokerlite/test_interop_security.py; here trafka's producer (plain,
idempotent, transactional), consumer group, admin client and command line run
through the same listeners, and records cross between trafka and the other
clients in both directions.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import trustme
from click.testing import CliRunner
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.errors import ApiTimeoutError, AuthenticationError, KafkaConnectionError
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(120)

USERS = {"alice": "alice-pw", "svc,1": "p=w,2"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("certs")
    server = ca.issue_cert("127.0.0.1", "localhost")
    paths = {name: str(folder / f"{name}.pem") for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    return paths


@pytest.fixture(scope="module")
def sasl_ssl(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, str]
) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "sasl-ssl",
        security_protocol="SASL_SSL",
        sasl_users=USERS,
        ssl_certfile=certs["cert"],
        ssl_keyfile=certs["key"],
    )


@pytest.fixture(scope="module")
def sasl_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "sasl-plaintext",
        security_protocol="SASL_PLAINTEXT",
        sasl_enabled_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
        sasl_users=USERS,
    )


@pytest.fixture(scope="module")
def plaintext(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "plaintext")


@pytest.fixture(scope="module")
def mutual_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Any]]:
    """A broker that requires client certificates, and the CA that signs them."""
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("mtls")
    server = ca.issue_cert("127.0.0.1")
    paths = {n: str(folder / f"{n}.pem") for n in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    for broker in module_broker(
        tmp_path_factory,
        "mtls",
        security_protocol="SSL",
        ssl_certfile=paths["cert"],
        ssl_keyfile=paths["key"],
        ssl_cafile=paths["ca"],
        ssl_client_auth="required",
    ):
        yield broker, ca


def over_tls(certs: dict[str, str], mechanism: str, user: str = "alice") -> dict[str, Any]:
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_username": user,
        "sasl_password": USERS[user],
        "ssl_cafile": certs["ca"],
    }


def scram256(user: str = "alice", password: str | None = None) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_username": user,
        "sasl_password": USERS[user] if password is None else password,
    }


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio", "asyncio"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_transactions_groups_and_admin_over_sasl_ssl(
    sasl_ssl: RunningBroker, certs: dict[str, str], mechanism: str, anyio_backend: str
) -> None:
    bs = sasl_ssl.bootstrap_servers
    topic, group = fresh("sec"), fresh("sec-group")
    settings = over_tls(certs, mechanism, "svc,1")
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs, **settings) as admin:
            await admin.create_topics([NewTopic(topic, 3)])
        async with open_producer(
            bootstrap_servers=bs, transactional_id=fresh("sec-tx"), **settings
        ) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                for i in range(60):
                    await producer.send(topic, b"kept-%d" % i, key=b"k%d" % i)
            producer.begin_transaction()
            await producer.send(topic, b"dropped", key=b"x")
            await producer.flush()
            await producer.abort_transaction()
            # Commits in a row, each begun while the last one's runs: over TLS the
            # answers are taken by asking each connection (a poll of the socket
            # cannot see the bytes TLS decrypted already).
            assert producer._sender._poller is None
            commits = []
            for t in range(3):
                producer.begin_transaction()
                for i in range(20):
                    await producer.send(topic, b"ahead-%d-%d" % (t, i), key=b"a%d" % i)
                commits.append(await producer.commit_transaction(wait=False))
            await commits[-1].wait()
            for commit in commits:
                commit.result()
        async with open_producer(bootstrap_servers=bs, **settings) as producer:  # idempotent
            for i in range(30):
                await producer.send(topic, b"plain-%d" % i, key=b"p%d" % i)
            # A batch big enough to be a frame part of its own (sendmsg elsewhere;
            # joined for TLS, which has none).
            await producer.send(topic, b"B" * 65536, key=b"big")
        got: list[bytes] = []
        async with open_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_wait_ms=50,  # its close waits for the fetch held at the end
            **settings,
        ) as consumer:
            while len(got) < 151:
                for recs in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in recs)
            await consumer.commit()
        async with open_admin(bootstrap_servers=bs, **settings) as admin:
            committed = await admin.list_consumer_group_offsets(group)
            ends = await admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(3)})
    ahead = [b"ahead-%d-%d" % (t, i) for t in range(3) for i in range(20)]
    assert sorted(got) == sorted(
        [b"kept-%d" % i for i in range(60)]
        + ahead
        + [b"plain-%d" % i for i in range(30)]
        + [b"B" * 65536]
    )
    assert sum(committed.values()) > 150  # past the markers
    assert committed == {tp: end[0] for tp, end in ends.items() if end is not None}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_records_cross_between_trafka_and_other_clients_over_scram(
    sasl_plain: RunningBroker, anyio_backend: str
) -> None:
    from confluent_kafka import Consumer
    from kafka import KafkaProducer

    bs = sasl_plain.bootstrap_servers
    topic = fresh("cross")
    async with open_admin(bootstrap_servers=bs, **scram256()) as admin:
        await admin.create_topics([NewTopic(topic, 2)])
    async with open_producer(bootstrap_servers=bs, **scram256()) as producer:
        for i in range(20):
            await producer.send(topic, b"trafka-%d" % i, partition=i % 2)
    kp = KafkaProducer(
        bootstrap_servers=bs,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        # kafka-python sends names unescaped (RFC 5802 wants "," as "=2C"), which
        # Kafka refuses too: it gets the plain name.
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
    )
    try:
        for i in range(20):
            kp.send(topic, b"kafka-python-%d" % i, partition=i % 2)
        kp.flush(30)
    finally:
        kp.close(10)
    expected = {b"trafka-%d" % i for i in range(20)} | {b"kafka-python-%d" % i for i in range(20)}

    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": fresh("cf"),
            "auto.offset.reset": "earliest",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "svc,1",  # librdkafka escapes it
            "sasl.password": USERS["svc,1"],
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.subscribe([topic])
        with anyio.fail_after(60):
            while seen != expected:
                msg = await anyio.to_thread.run_sync(consumer.poll, 0.5)
                if msg is not None and msg.error() is None:
                    seen.add(msg.value())
    finally:
        consumer.close()
    theirs: set[bytes] = set()
    async with open_consumer(
        bootstrap_servers=bs,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        **scram256("svc,1"),
    ) as ours:
        ours.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        with anyio.fail_after(30):
            while theirs != expected:
                for recs in (await ours.getmany(timeout_ms=500)).values():
                    theirs.update(r.value for r in recs)
    assert seen == theirs == expected


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_brokerlite_refusals_reach_the_caller_at_once(
    sasl_plain: RunningBroker, anyio_backend: str
) -> None:
    bs = sasl_plain.bootstrap_servers
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=bs, **scram256(password="wrong")) as admin:
            with pytest.raises(AuthenticationError) as wrong:
                await admin.list_topics()
        plain = {**scram256(), "sasl_mechanism": "PLAIN"}
        async with open_admin(bootstrap_servers=bs, **plain) as admin:
            with pytest.raises(AuthenticationError) as mechanism:
                await admin.list_topics()
    assert wrong.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "SCRAM-SHA-256" in str(wrong.value)
    assert mechanism.value.code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert "SCRAM-SHA-256, SCRAM-SHA-512" in str(mechanism.value)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_protocol_that_does_not_match_the_listener_is_named(
    plaintext: RunningBroker, certs: dict[str, str], anyio_backend: str
) -> None:
    bs = plaintext.bootstrap_servers
    with anyio.fail_after(20):
        # SASL against a plain listener: the broker answers, and says it takes no SASL.
        async with open_admin(bootstrap_servers=bs, **scram256()) as admin:
            with pytest.raises(AuthenticationError, match="SASL_PLAINTEXT"):
                await admin.list_topics()
        # TLS against a plain listener: no handshake; the call ends at its deadline.
        tls = {"security_protocol": "SSL", "ssl_cafile": certs["ca"], "reconnect_backoff_ms": 20}
        async with open_admin(bootstrap_servers=bs, **tls) as admin:
            with pytest.raises(ApiTimeoutError) as caught:
                await admin.list_topics(timeout_ms=1500)
    # A handshake the plain listener cannot answer: a connection error, retried.
    assert isinstance(caught.value.__cause__, KafkaConnectionError)


def test_command_line_over_sasl_ssl(sasl_ssl: RunningBroker, certs: dict[str, str]) -> None:
    topic = fresh("cli-sec")
    props = [
        "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanisms=SCRAM-SHA-256",
        "-X", "sasl.username=alice",
        "-X", f"sasl.password={USERS['alice']}",
        "-X", f"ssl.ca.location={certs['ca']}",
    ]  # fmt: skip
    runner = CliRunner()
    bs = ["-b", sasl_ssl.bootstrap_servers]
    made = runner.invoke(main, ["produce", topic, *bs, *props], input=b"one\ntwo\n")
    assert made.exit_code == 0, made.output
    read = runner.invoke(main, ["consume", topic, "-e", "-q", *bs, *props])
    assert read.exit_code == 0, read.output
    assert read.output.split() == ["one", "two"]
    wrong = [p.replace(USERS["alice"], "nope") for p in props]
    refused = runner.invoke(main, ["consume", topic, "-e", *bs, *wrong])
    assert refused.exit_code != 0
    assert "SASL" in refused.output and "Traceback" not in refused.output


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_callers_ssl_context_with_a_client_certificate(
    mutual_tls: tuple[RunningBroker, Any], anyio_backend: str
) -> None:
    broker, ca = mutual_tls
    context = ssl.create_default_context()
    ca.configure_trust(context)
    ca.issue_cert("client.example").configure_cert(context)
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=broker.bootstrap_servers, security_protocol="ssl", ssl_context=context
        ) as producer:
            meta = await producer.send_and_wait(fresh("mtls"), b"v")
    assert meta.offset == 0
