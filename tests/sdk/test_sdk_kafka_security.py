"""The SDK through Kafka 4.x's own security: SASL/PLAIN and SASL/SCRAM-SHA-256
on a SASL_PLAINTEXT listener, and a TLS (SSL) listener whose certificate the
client verifies, on one private cluster.

What Kafka defines and this test checks (Kafka's security docs, KIP-12,
KIP-84, KIP-554, KIP-651): PLAIN users come from the listener's JAAS
``user_<name>`` options; SCRAM users are made with AlterUserScramCredentials
(under KRaft, through the controller); a wrong password is refused with
SASL_AUTHENTICATION_FAILED, which the SDK raises as ``AuthenticationError``;
a PEM key store (``ssl.keystore.type=PEM``) serves TLS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from kafka_peers import KAFKA_4, KafkaCluster
from sdk_brokers import fresh

from trafka.sdk import (
    NewTopic,
    TopicPartition,
    UserScramCredentialUpsertion,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.errors import AuthenticationError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _round_trip(bs: str, topic: str, value: bytes, **security: Any) -> list[bytes]:
    """Send one record through the listener, read the partition back from the start."""
    tp = TopicPartition(topic, 0)
    async with open_producer(bootstrap_servers=bs, **security) as producer:
        await producer.send_and_wait(topic, value, partition=0)
    got: list[bytes] = []
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", **security
    ) as consumer:
        consumer.assign([tp])
        while value not in got:
            got += [r.value for recs in (await consumer.getmany(timeout_ms=500)).values()
                    for r in recs]  # fmt: skip
    return got


@pytest.mark.slow
@pytest.mark.compat("SDK", "security: SASL PLAIN, SCRAM-SHA-256 and TLS on Kafka", peer="Kafka 4.x")
async def test_plain_scram_and_tls_listeners(make_kafka: Any, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    keystore, cafile = tmp_path / "broker.pem", tmp_path / "ca.pem"
    # Kafka's PEM key store reads PKCS#8 keys only.
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    keystore.write_bytes(pkcs8 + cert.cert_chain_pems[0].bytes())
    ca.cert_pem.write_to_path(str(cafile))
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    cluster: KafkaCluster = make_kafka(
        KAFKA_4,
        listeners={"PLAINTEXT": "PLAINTEXT", "SASL": "SASL_PLAINTEXT", "TLS": "SSL"},
        config={
            "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl.plain.sasl.jaas.config": (
                f'{plain} required user_alice="alice-secret";'
            ),
            "listener.name.sasl.scram-sha-256.sasl.jaas.config": f"{scram} required;",
            "listener.name.tls.ssl.keystore.type": "PEM",
            "listener.name.tls.ssl.keystore.location": str(keystore),
        },
    )
    node = cluster.nodes[0]
    plaintext = node.address
    sasl = f"{cluster.host}:{node.ports['SASL']}"
    tls = f"{cluster.host}:{node.ports['TLS']}"
    topic = fresh("secure")
    with anyio.fail_after(90):
        async with open_admin(bootstrap_servers=plaintext) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            await admin.list_offsets({TopicPartition(topic, 0): "latest"})
            await admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion("bob", "bob-secret", "SCRAM-SHA-256")]
            )
        as_alice = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "alice",
            "sasl_password": "alice-secret",
        }
        as_bob = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "bob",
            "sasl_password": "bob-secret",
        }
        assert b"plain" in await _round_trip(sasl, topic, b"plain", **as_alice)
        # The SCRAM credential reaches the broker's metadata image shortly after
        # the controller committed it: until then bob is refused.
        while True:
            try:
                got = await _round_trip(sasl, topic, b"scram", **as_bob)
                break
            except AuthenticationError:
                await anyio.sleep(0.2)
        assert got == [b"plain", b"scram"]
        got = await _round_trip(tls, topic, b"tls", security_protocol="SSL", ssl_cafile=str(cafile))
        assert got == [b"plain", b"scram", b"tls"]
        for wrong in (dict(as_alice, sasl_password="nope"), dict(as_bob, sasl_password="nope")):
            with pytest.raises(AuthenticationError):
                async with open_admin(bootstrap_servers=sasl, **wrong) as admin:
                    await admin.list_topics()
