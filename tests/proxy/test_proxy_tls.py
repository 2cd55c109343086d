"""The proxy over TLS: towards clients, towards the brokers, and SASL through both."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
import trustme
from proxy_helpers import call, create, free_port, fresh, placement, wait_until

from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ApiKey
from trafka.codec.messages import k03_metadata as mm
from trafka.proxy import proxy_in_thread
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("proxy-certs")
    paths = {"ca": str(folder / "ca.pem")}
    ca.cert_pem.write_to_path(paths["ca"])
    for name in ("proxy", "broker"):
        cert = ca.issue_cert("127.0.0.1", "localhost")
        paths[name] = str(folder / f"{name}.pem")
        cert.private_key_and_cert_chain_pem.write_to_path(paths[name])
    return paths


def test_clients_speak_tls_to_the_proxy(certs: dict[str, str], tmp_path: Path) -> None:
    with (
        broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as broker,
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,), port=0, ssl_certfile=certs["proxy"]
        ) as px,
    ):
        topic = fresh("tls")
        create(broker.bootstrap_servers, topic, 4)
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": px.bootstrap_servers,
                "security.protocol": "SSL",
                "ssl.ca.location": certs["ca"],
            }
        )
        for i in range(100):
            producer.produce(topic, b"%d" % i, key=b"k%d" % (i % 10))
        assert producer.flush(30) == 0
        records = placement(broker.bootstrap_servers, topic, 4)
        assert len(records) == 100
        assert all(r.partition == murmur2_partition(r.key, 4) for r in records)

        # A plaintext client is dropped (after a TLS alert, perhaps); the proxy
        # goes on serving the others.
        with socket.create_connection(px.address, timeout=10) as s:
            s.sendall(b"\x00\x00\x00\x0c" + b"\x00" * 12)
            s.settimeout(10)
            received = b""
            while chunk := s.recv(100):
                received += chunk
            assert len(received) < 100  # at most an alert, never a Kafka answer
        producer.produce(topic, b"after", key=b"k1")
        assert producer.flush(30) == 0
        assert len(placement(broker.bootstrap_servers, topic, 4)) == 101


def test_sasl_ssl_from_end_to_end(certs: dict[str, str], tmp_path: Path) -> None:
    users = {"svc": "pw"}
    with (
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=tmp_path,
            security_protocol="SASL_SSL",
            sasl_users=users,
            ssl_certfile=certs["broker"],
        ) as broker,
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,),
            port=0,
            ssl_certfile=certs["proxy"],
            upstream_ssl=True,
            upstream_ssl_cafile=certs["ca"],
        ) as px,
    ):
        settings: dict[str, Any] = {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "svc",
            "sasl_password": "pw",
            "ssl_cafile": certs["ca"],
        }
        topic = fresh("sasl-ssl")

        async def go() -> None:
            async with open_admin(bootstrap_servers=px.bootstrap_servers, **settings) as admin:
                await admin.create_topics([NewTopic(topic, 3)])
            async with open_producer(
                bootstrap_servers=px.bootstrap_servers, enable_idempotence=False, **settings
            ) as producer:
                for i in range(30):
                    await producer.send(topic, b"%d" % i, key=b"k%d" % i, partition=0)

        anyio.run(go, backend="trio")
        records = placement(broker.bootstrap_servers, topic, 3, **settings)
        assert sorted(int(r.value) for r in records) == list(range(30))
        assert all(r.partition == murmur2_partition(r.key, 3) for r in records)


def test_an_upstream_that_fails_tls_closes_the_client_connection(
    certs: dict[str, str], tmp_path: Path
) -> None:
    # The proxy expects TLS from a plaintext broker: each client connection is
    # closed at its first request (when the proxy opens its upstream side).
    with (
        broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as broker,
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,),
            port=0,
            upstream_ssl=True,
            upstream_ssl_cafile=certs["ca"],
            connect_timeout=5,
        ) as px,
        socket.create_connection(px.address, timeout=10) as s,
    ):
        s.settimeout(15)
        s.sendall(struct.pack(">ihhih", 12, 18, 0, 1, 2) + b"px")  # ApiVersions v0
        assert s.recv(100) == b""


def test_known_brokers_listeners_open_over_tls_to_the_brokers(
    certs: dict[str, str], tmp_path: Path
) -> None:
    """``node_ports`` with TLS towards the brokers: the proxy's own Metadata at
    start goes over TLS as its other upstream connections do, and the broker's
    listener is open on its port before any client has spoken."""
    port = free_port()
    with (
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=tmp_path,
            security_protocol="SSL",
            ssl_certfile=certs["broker"],
        ) as broker,
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,),
            port=0,
            upstream_ssl=True,
            upstream_ssl_cafile=certs["ca"],
            node_ports=((broker.config.node_id, port),),
        ) as px,
    ):
        wait_until(lambda: broker.config.node_id in px.statistics.nodes)
        assert px.statistics.connections == 0
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            answer = call(sock, ApiKey.METADATA, 9, mm.MetadataRequest(topics=[]))
        assert [b.port for b in answer.brokers] == [port]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl_keyfile": "k.pem"}, "needs ssl_certfile"),
        ({"upstream_ssl_cafile": "ca.pem"}, "needs upstream_ssl"),
    ],
)
def test_inconsistent_tls_settings_are_refused(settings: dict[str, str], message: str) -> None:
    from trafka.proxy import ProxyConfig

    with pytest.raises(ValueError, match=message):
        ProxyConfig(upstream=("h:1",), **settings)  # type: ignore[arg-type]


def test_unreadable_certificates_are_refused(tmp_path: Path) -> None:
    from trafka.proxy import ProxyConfig

    missing = str(tmp_path / "none.pem")
    with pytest.raises(ValueError, match="cannot load the certificate"):
        ProxyConfig(upstream=("h:1",), ssl_certfile=missing).client_ssl_context()
    with pytest.raises(ValueError, match="cannot load"):
        ProxyConfig(
            upstream=("h:1",), upstream_ssl=True, upstream_ssl_cafile=missing
        ).upstream_ssl_context()
