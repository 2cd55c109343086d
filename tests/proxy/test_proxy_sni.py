"""One port for the whole cluster (issue #83 item 3): over TLS, the SNI name a
client asks for (``broker-N.<domain>``, ``bootstrap.<domain>``) picks the
broker, every broker behind the proxy's one listening port, and Metadata names
the brokers by those names at that port.

The clients must reach ``*.kafka.test`` at 127.0.0.1 without DNS: the trafka
SDK resolves through ``anyio.getaddrinfo``, which the tests wrap to answer
those names with 127.0.0.1 (the connection, the TLS handshake and its SNI are
the client's own: only the name lookup is answered). librdkafka resolves in C
and Kafka's Java client in the JDK (17 here: no ``jdk.net.hosts.file``), with
no hook to answer them: they run as processes of their own whose /etc/hosts is
the test's file, bind-mounted in a mount namespace of their own
(tests/proxy/client_matrix.py's ``in_own_hosts``; root and util-linux's
``unshare`` needed, the test skipped saying so without them), in front of
brokerlite and Apache Kafka 4.4. A raw TLS client (Python's ``ssl``, SNI as
given) checks the names on the wire.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
import trustme
from client_matrix import (
    KEYS,
    by_partition,
    hosts_unavailable,
    in_own_hosts,
    java_producer,
    java_sends,
    java_tls,
    read_committed,
    sdk_and_confluent_sends,
)
from encryption_helpers import once_in_order
from kafka_fixtures import Peer
from proxy_helpers import call, create, fresh, misreported

from trafka.brokerlite.dev.local_cluster import serve_cluster
from trafka.codec import ApiKey
from trafka.codec.messages import k03_metadata as mm
from trafka.proxy import ProxyConfig, proxy_in_thread, serve_proxy
from trafka.proxy.sni import SniNames, UnknownName, certificate_gaps
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(180)

DOMAIN = "kafka.test"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One certificate for every name: a wildcard for the domain."""
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("sni")
    paths = {"ca": str(folder / "ca.pem"), "proxy": str(folder / "proxy.pem")}
    ca.cert_pem.write_to_path(paths["ca"])
    ca.issue_cert(f"*.{DOMAIN}").private_key_and_cert_chain_pem.write_to_path(paths["proxy"])
    return paths


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's name lookups of ``*.kafka.test`` answered 127.0.0.1."""
    real = anyio.getaddrinfo

    async def lookup(host: Any, port: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.lower().endswith("." + DOMAIN):
            host = "127.0.0.1"
        return await real(host, port, **kwargs)

    monkeypatch.setattr(anyio, "getaddrinfo", lookup)


def test_names_pick_brokers() -> None:
    names = SniNames("Kafka.Test")
    known = {0, 1, 2}
    assert names.node_of("bootstrap.kafka.test", known) is None
    assert names.node_of(None, known) is None  # no SNI: the bootstrap servers
    assert names.node_of("BROKER-2.kafka.test", known) == 2
    assert names.host_of(1) == "broker-1.kafka.test"
    for name in ("broker-7.kafka.test", "broker-1.other.test", "broker-x.kafka.test", "kafka.test"):
        with pytest.raises(UnknownName):
            names.node_of(name, known)
    with pytest.raises(ValueError, match="DNS name"):
        SniNames("not a domain")


@pytest.mark.parametrize(
    ("names", "gaps"),
    [
        ([f"*.{DOMAIN}"], []),
        ([f"BOOTSTRAP.{DOMAIN}", f"broker-1.{DOMAIN}", f"broker-2.{DOMAIN}"], []),
        ([f"bootstrap.{DOMAIN}"], [f"names no broker-N.{DOMAIN} (nor *.{DOMAIN})"]),
        ([f"broker-1.{DOMAIN}"], [f"does not name bootstrap.{DOMAIN}"]),
        # RFC 6125: a wildcard stands for one label (the leftmost), the domain for itself.
        (
            [f"*.east.{DOMAIN}", DOMAIN],
            [f"does not name bootstrap.{DOMAIN}", f"names no broker-N.{DOMAIN}"],
        ),
        (["*.other.test"], [f"does not name bootstrap.{DOMAIN}", f"names no broker-N.{DOMAIN}"]),
    ],
)
def test_certificate_gaps_name_what_a_host_name_check_refuses(
    tmp_path: Any, names: list[str], gaps: list[str]
) -> None:
    """What certificate_gaps reports is what a client checking host names (Python's
    ssl, OpenSSL's check) refuses: bootstrap.<domain> and broker-1.<domain>."""
    cert = tmp_path / "cert.pem"
    trustme.CA().issue_cert(*names).cert_chain_pems[0].write_to_path(str(cert))
    found = certificate_gaps(str(cert), DOMAIN)
    assert len(found) == len(gaps) and all(g in f for g, f in zip(gaps, found, strict=True)), found
    decoded = ssl._ssl._test_decode_cert(str(cert))  # type: ignore[attr-defined]
    for host, gap in ((f"bootstrap.{DOMAIN}", "bootstrap"), (f"broker-1.{DOMAIN}", "broker-N")):
        reported = any(gap in f for f in found)
        assert reported == (not _openssl_accepts(decoded, host, tmp_path)), (host, found)
    with pytest.raises(ValueError, match="cannot read the certificate"):
        certificate_gaps(str(tmp_path / "absent.pem"), DOMAIN)


def _openssl_accepts(decoded: dict[str, Any], host: str, tmp_path: Any) -> bool:
    """Whether a TLS client checking ``host`` accepts a server presenting a
    certificate with the names of ``decoded`` (a real handshake over a socket pair)."""
    ca = trustme.CA()
    names = [v for k, v in decoded["subjectAltName"] if k == "DNS"]
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    a, b = socket.socketpair()
    with a, b:
        server = server_ctx.wrap_socket(a, server_side=True, do_handshake_on_connect=False)
        client = client_ctx.wrap_socket(b, server_hostname=host, do_handshake_on_connect=False)
        server.setblocking(False)
        client.setblocking(False)
        outcome: bool | None = None
        for _ in range(100):
            for side in (client, server):
                try:
                    side.do_handshake()
                    if side is client:
                        outcome = True
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
                except ssl.SSLCertVerificationError:
                    return False
                except ssl.SSLError:
                    if side is server:
                        continue
                    raise
            if outcome:
                return True
        raise AssertionError("no handshake outcome")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"sni_domain": DOMAIN}, "needs ssl_certfile"),
        ({"sni_port": 9093}, "sni_port needs sni_domain"),
    ],
)
def test_inconsistent_sni_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProxyConfig(upstream=("h:1",), **settings)


def _tls_call(
    port: int, ca: str, name: str, key: int, version: int, body: Any, check: bool = True
) -> Any:
    """One request over TLS to the proxy's port, asking for ``name`` by SNI
    (``check``: the certificate must name it)."""
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = check
    with (
        socket.create_connection(("127.0.0.1", port), timeout=20) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        return call(tls, key, version, body)


def test_every_broker_behind_one_port(zk: str, pki: dict[str, str], resolved: None) -> None:
    """A 3-node brokerlite cluster behind the proxy's one TLS port: Metadata
    asked of bootstrap.kafka.test names broker-N.kafka.test at that port; the
    SDK's producer and consumer, resolving the names to 127.0.0.1, write to and
    read from every partition's leader through it (a connection that reached
    the wrong broker would be refused NOT_LEADER_OR_FOLLOWER); a name the
    proxy does not serve fails the handshake and the proxy serves on."""

    async def main() -> None:
        with trio.fail_after(150):
            async with serve_cluster(3, zookeeper_connect=zk) as cluster:
                servers = cluster.bootstrap_servers
                topic = fresh("sni")
                async with open_admin(bootstrap_servers=servers) as admin:
                    await admin.create_topics([NewTopic(topic, 6, 1)])
                async with serve_proxy(
                    upstream=tuple(servers.split(",")),
                    port=0,
                    ssl_certfile=pki["proxy"],
                    sni_domain=DOMAIN,
                ) as px:
                    port = px.address[1]
                    await _through_one_port(port, pki, topic, cluster.node_ids)

    trio.run(main)


async def _through_one_port(port: int, pki: dict[str, str], topic: str, nodes: Any) -> None:
    answer = await trio.to_thread.run_sync(
        _tls_call,
        port,
        pki["ca"],
        f"bootstrap.{DOMAIN}",
        ApiKey.METADATA,
        9,
        mm.MetadataRequest(topics=[mm.MetadataRequest.MetadataRequestTopic(name=topic)]),
    )
    named = {(b.node_id, b.host, b.port) for b in answer.brokers}
    assert named == {(n, f"broker-{n}.{DOMAIN}", port) for n in nodes}
    leaders = {p.leader_id for t in answer.topics for p in t.partitions}
    assert len(leaders) > 1, "the test wants partitions led by different brokers"

    tls = {"security_protocol": "SSL", "ssl_cafile": pki["ca"]}
    bootstrap = f"bootstrap.{DOMAIN}:{port}"
    async with open_producer(bootstrap_servers=bootstrap, **tls) as producer:
        for i in range(60):
            await producer.send(topic, b"%d" % i, partition=i % 6)
        await producer.flush()
    got: list[bytes] = []
    async with open_consumer(bootstrap_servers=bootstrap, **tls) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(6)])
        for p in range(6):
            consumer.seek(TopicPartition(topic, p), 0)
        while len(got) < 60:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got.extend(r.value for r in records)
    assert sorted(int(v) for v in got) == list(range(60))

    # A name for a broker the proxy does not serve, or of another domain (the
    # client not checking the certificate's names): the connection is closed
    # after the handshake, unanswered (the helper's assertion says so).
    nothing = mm.MetadataRequest(topics=[])
    for name in (f"broker-99.{DOMAIN}", "broker-0.elsewhere.test"):
        with pytest.raises(AssertionError, match="closed the connection"):
            await trio.to_thread.run_sync(
                _tls_call, port, pki["ca"], name, ApiKey.METADATA, 9, nothing, False
            )
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that checks: refused by it
        await trio.to_thread.run_sync(
            _tls_call, port, pki["ca"], "broker-0.elsewhere.test", ApiKey.METADATA, 9, nothing
        )
    again = await trio.to_thread.run_sync(
        _tls_call,
        port,
        pki["ca"],
        f"broker-{min(nodes)}.{DOMAIN}",
        ApiKey.METADATA,
        9,
        mm.MetadataRequest(topics=[]),
    )
    assert {b.port for b in again.brokers} == {port}


def test_check_config_reads_the_sni_settings(pki: dict[str, str], tmp_path: Any) -> None:
    """docs/proxy.md's example file passes --check-config; SNI without TLS, or a
    domain that is not a DNS name, is named."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command

    good = tmp_path / "good.toml"
    good.write_text(
        'upstream = ["127.0.0.1:9092"]\nlisten = "0.0.0.0:9093"\n'
        f'advertised_host = "bootstrap.{DOMAIN}"\nssl_certfile = "{pki["proxy"]}"\n'
        f'sni_domain = "{DOMAIN}"\nsni_port = 443\n'
    )
    result = CliRunner().invoke(command, ["--config", str(good), "--check-config"])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output  # the wildcard names every name
    # A certificate for another domain: valid (a client that does not check
    # host names is served), with a warning.
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text(good.read_text().replace(DOMAIN, "elsewhere.test"))
    result = CliRunner().invoke(command, ["--config", str(elsewhere), "--check-config"])
    assert result.exit_code == 0, result.output
    assert f"warning: {pki['proxy']} does not name bootstrap.elsewhere.test" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('upstream = ["127.0.0.1:9092"]\nsni_domain = "kafka test"\n')
    result = CliRunner().invoke(command, ["--config", str(bad), "--check-config"])
    assert result.exit_code == 1 and "SNI needs ssl_certfile" in result.output, result.output


@pytest.mark.parametrize("route_keys", ["none", "murmur2"])
@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_confluent_kafka_and_kafkas_java_producer_through_one_port(
    peer: Peer,
    route_keys: str,
    pki: dict[str, str],
    tmp_path: Path,
    resolved: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """confluent-kafka (a script: plain, idempotent and transactional, then
    its read_committed consumer), Kafka's Java producer (4.4, the same
    modes, a PEM trust store) and trafka's SDK (the same modes) name
    ``bootstrap.kafka.test`` and the brokers
    ``broker-N.kafka.test`` (their /etc/hosts the test's), through the proxy's
    one TLS port in front of brokerlite and of Kafka 4.4, forwarding (each
    client's batches go on the connection to the broker its name picked) and
    routing: every record committed is read once and in order, by the
    script and by the SDK, every report true; routed, every key on its
    murmur2 partition. Each
    client asked for the names in its handshakes (the proxy's debug log says
    which name each connection asked for: with one broker, a client that sent
    no SNI would be served the bootstrap's broker all the same)."""
    why = hosts_unavailable()
    if why is not None:
        pytest.skip(why)
    topic, tag, partitions = fresh("sni-clients"), fresh("sc"), 3
    create(peer.bootstrap_servers, topic, partitions, 1, served=True)
    hosts = tmp_path / "hosts"
    names = " ".join([f"bootstrap.{DOMAIN}", *(f"broker-{n}.{DOMAIN}" for n in range(10))])
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {names}\n")
    wrap = in_own_hosts(hosts)
    caplog.set_level(logging.DEBUG, logger="trafka.proxy")
    with proxy_in_thread(
        upstream=(peer.bootstrap_servers,),
        port=0,
        ssl_certfile=pki["proxy"],
        sni_domain=DOMAIN,
        route_keys=route_keys,
    ) as px:
        bootstrap = f"bootstrap.{DOMAIN}:{px.address[1]}"
        reports, sent = java_sends(
            java_producer(),
            bootstrap,
            topic,
            30,
            "java",
            f"{tag}-j",
            java_tls(pki["ca"]),
            wrap=wrap,
        )
        node = f"broker-{_node_id(peer)}.{DOMAIN}"
        assert _names_asked(caplog) == {f"bootstrap.{DOMAIN}", node}
        caplog.clear()
        script = Path(__file__).with_name("sni_confluent_client.py")
        done = subprocess.run(
            [*wrap, sys.executable, str(script), bootstrap, topic, pki["ca"], tag, "30"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert _names_asked(caplog) == {f"bootstrap.{DOMAIN}", node}
        ck = json.loads(done.stdout)
        ck_sent = [v.encode() for v in ck["sent"]]
        read = {int(p): [v.encode() for v in vs] for p, vs in ck["read"].items()}
        once_in_order(read, ck_sent, keys=KEYS)
        reports += [(v.encode(), p, o) for v, p, o in ck["reports"]]
        sent += ck_sent
        tls = {"security_protocol": "SSL", "ssl_cafile": pki["ca"]}
        # trafka's SDK, the same modes (its lookups answered by ``resolved``).
        more, values = sdk_and_confluent_sends(bootstrap, topic, tag, 30, tls, None)
        reports, sent = reports + more, sent + values
        records = read_committed(bootstrap, topic, partitions, sent, **tls)
    once_in_order(by_partition(records, partitions), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)
    if route_keys != "none":
        assert [r for r in records if r.partition != murmur2_partition(r.key, partitions)] == []


def _node_id(peer: Peer) -> int:
    async def ask() -> int:
        async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
            brokers = (await admin.describe_cluster()).brokers
            assert len(brokers) == 1
            return int(brokers[0].node_id)

    result: int = anyio.run(ask, backend="trio")
    return result


def _names_asked(caplog: pytest.LogCaptureFixture) -> set[str]:
    """The SNI names the proxy's connections asked for, by its debug log."""
    said = (r.getMessage() for r in caplog.records if r.name == "trafka.proxy")
    return {m.group(1) for line in said if (m := re.search(r" asked for (\S+): broker ", line))}


def _docs_example() -> str:
    """The TOML example of docs/proxy.md's "One port for the cluster: SNI"."""
    text = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = text.split("### One port for the cluster: SNI\n", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


def test_the_docs_example_runs(
    brokerlite_peer: str, pki: dict[str, str], tmp_path: Path, resolved: None
) -> None:
    """docs/proxy.md's SNI example, as a file (its upstream, listener,
    certificate and domain this test's; no Service in front, so no
    ``sni_port``): checked, then served: trafka's SDK through
    ``bootstrap.kafka.test`` creates, produces and reads back, and Metadata
    names ``broker-N.kafka.test`` at the one port."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command
    from trafka.proxy.reload import load
    from trafka.proxy.settings import Sources

    example = _docs_example()
    for was, now in (
        ('["kafka-1:9092", "kafka-2:9092"]', f'["{brokerlite_peer}"]'),
        ('"0.0.0.0:9093"', '"127.0.0.1:0"'),
        ('"/etc/trafka/tls/wildcard.pem"', f'"{pki["proxy"]}"'),
        ("kafka.example.com", DOMAIN),
    ):
        assert was in example, was
        example = example.replace(was, now)
    assert "sni_port = 443" in example
    example = "\n".join(line for line in example.split("\n") if not line.startswith("sni_port"))
    toml = tmp_path / "sni.toml"
    toml.write_text(example)
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 0, result.output
    topic = fresh("sni-docs")

    async def main(port: int) -> set[str]:
        settings: dict[str, Any] = {
            "bootstrap_servers": f"bootstrap.{DOMAIN}:{port}",
            "security_protocol": "SSL",
            "ssl_cafile": pki["ca"],
        }
        with anyio.fail_after(60):
            async with open_admin(**settings) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])
                hosts = {f"{b.host}:{b.port}" for b in (await admin.describe_cluster()).brokers}
            async with open_producer(**settings) as producer:
                await producer.send_and_wait(topic, b"through one port")
            async with open_consumer(
                topic, group_id=topic, auto_offset_reset="earliest", **settings
            ) as consumer:
                got: list[bytes] = []
                while not got:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in records]
                assert got == [b"through one port"]
        return hosts

    with proxy_in_thread(load(Sources(path=str(toml))).config) as px:
        hosts = anyio.run(main, px.address[1], backend="trio")
        assert hosts and all(
            re.fullmatch(rf"broker-\d+\.{re.escape(DOMAIN)}:{px.address[1]}", h) for h in hosts
        ), hosts
