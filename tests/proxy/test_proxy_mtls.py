"""Mutual TLS on the proxy (issue #83 item 4): client certificates required,
requested or not asked for (Kafka's ``ssl.client.auth``), the principal taken
from the certificate's subject with Kafka's ``ssl.principal.mapping.rules``
(KIP-371), seen by filters; and the proxy's own certificate towards brokers
that require one (brokerlite's SSL listener with ``ssl_client_auth=required``, Kafka 4.4's
with ``ssl.client.auth=required``). Kafka's Java producer (its key store a PEM
file, KIP-651), confluent-kafka and trafka's SDK go through either side's
mutual TLS plain, idempotent and in transactions.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
import trustme
from client_matrix import (
    KEYS,
    by_partition,
    java_producer,
    java_sends,
    java_tls,
    pem_keystore,
    read_committed,
    sdk_and_confluent_sends,
)
from encryption_helpers import once_in_order
from proxy_helpers import Report, create, fresh, misreported, placement

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.proxy import ProxyConfig, proxy_in_thread
from trafka.proxy.filters import Filter, FilterContext
from trafka.proxy.mtls import NoMatchingRule, PrincipalMapper, distinguished_name
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(120)

# KIP-371's example rules (and Kafka's docs of ssl.principal.mapping.rules).
KIP_371_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("subject", "principal"),
    [
        # KIP-371: "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
        # maps to "serviceuser", "CN=adminUser,OU=Admin,O=Unknown,..." to "adminuser@admin".
        ("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "serviceuser"),
        ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
        ("CN=Kafka1.Example.com,O=Acme", "kafka1.example.com"),
        ("OU=JustAUnit,O=Acme", "OU=JustAUnit,O=Acme"),  # DEFAULT: the name itself
    ],
)
def test_kip_371_rules_map_subjects_to_principals(subject: str, principal: str) -> None:
    assert PrincipalMapper(KIP_371_RULES).name(subject) == principal


def test_rule_details_follow_kafka() -> None:
    """Upper-casing (U), escaped slashes, back references beyond the groups
    kept literal, spaces around commas; no DEFAULT: a name no rule matches is
    refused (Kafka fails the client's authentication)."""
    assert PrincipalMapper("RULE:^CN=([^,]*).*$/$1/U").name("CN=bob,O=x") == "BOB"
    assert PrincipalMapper(r"RULE:^CN=(.*?)\/(.*?),.*$/$1-$2/").name("CN=a/b,O=x") == "a-b"
    assert PrincipalMapper("RULE:^CN=(.*?),.*$/$1$2/").name("CN=a,O=x") == "a$2"
    rules = PrincipalMapper("  RULE:^CN=(.*?),O=Acme$/$1/ ,  DEFAULT  ")
    assert [rules.name("CN=a,O=Acme"), rules.name("CN=a,O=Other")] == ["a", "CN=a,O=Other"]
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*?),O=Acme$/$1/").name("CN=a,O=Other")


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*/$1/", "RULE:a/b/X", "NOTARULE", "RULE:(/x/"])
def test_malformed_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match="rule"):
        PrincipalMapper(rules)


def test_the_subject_is_written_as_java_writes_it() -> None:
    """RFC 2253 as X500Principal.getName() gives it: last RDN first, short
    names, special characters escaped, e-mail as OID=#hex."""
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("organizationName", "Acme, Inc."),),
            (("organizationalUnitName", "Services"),),
            (("commonName", "app"), ("emailAddress", "a@b")),
        )
    }
    assert distinguished_name(cert) == (
        "CN=app+1.2.840.113549.1.9.1=#1603614062,OU=Services,O=Acme\\, Inc.,C=DE"
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, the proxy's and the broker's certificates, two client certificates
    (KIP-371's service user and admin), one from another CA."""
    ca, other = trustme.CA(), trustme.CA()
    folder = tmp_path_factory.mktemp("mtls")
    paths = {"ca": str(folder / "ca.pem"), "ca-key": str(folder / "ca-key.pem")}
    ca.cert_pem.write_to_path(paths["ca"])
    ca.private_key_pem.write_to_path(paths["ca-key"])
    paths["ca-cert"] = paths["ca"]
    for name in ("proxy", "broker"):
        paths[name] = str(folder / f"{name}.pem")
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
            paths[name]
        )
    clients = {
        "service": (ca, "serviceuser", "ServiceUsers"),
        "admin": (ca, "adminUser", "Admin"),
        "stranger": (other, "stranger", "ServiceUsers"),
    }
    for name, (issuer, cn, ou) in clients.items():
        leaf = issuer.issue_cert(f"{name}.clients.test", common_name=cn, organization_unit_name=ou)
        paths[name] = str(folder / f"{name}.pem")
        paths[name + "-key"] = str(folder / f"{name}-key.pem")
        leaf.cert_chain_pems[0].write_to_path(paths[name])
        leaf.private_key_pem.write_to_path(paths[name + "-key"])
    return paths


class Principals(Filter):
    """Notes the principal and certificate subject of each Produce request."""

    api_keys = frozenset({0})

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str | None]] = []

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        self.seen.append((ctx.principal, ctx.tls_subject))
        return body


def _producer(
    px: Any, pki: dict[str, str], who: str | None, expect_served: bool = True
) -> confluent_kafka.Producer:
    settings = {
        "bootstrap.servers": px.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": pki["ca"],
        # A refused client's records fail after this (the others' go at once).
        "message.timeout.ms": 10_000 if expect_served else 2_000,
    }
    if who is not None:
        settings |= {"ssl.certificate.location": pki[who], "ssl.key.location": pki[who + "-key"]}
    return confluent_kafka.Producer(settings)


def _sent(producer: confluent_kafka.Producer, topic: str, n: int) -> int:
    errors: list[Any] = []
    for i in range(n):
        producer.produce(topic, b"%d" % i, on_delivery=lambda err, _: errors.append(err))
    producer.flush(30)
    return sum(1 for e in errors if e is None)


def _mtls_proxy(
    broker: Any, pki: dict[str, str], auth: str, watch: Filter, route_keys: str = "none"
) -> Any:
    return proxy_in_thread(
        upstream=(broker.bootstrap_servers,),
        port=0,
        route_keys=route_keys,
        ssl_certfile=pki["proxy"],
        ssl_cafile=pki["ca"],
        ssl_client_auth=auth,
        ssl_principal_mapping_rules=KIP_371_RULES,
        filters=(watch,),
    )


def test_required_client_certificates(pki: dict[str, str], tmp_path: Path) -> None:
    """ssl_client_auth=required: clients with a certificate of the CA are
    served, their principal mapped from the subject as KIP-371 says; a client
    without one, or with one of another CA, fails its handshake, and the proxy
    goes on serving the others."""
    watch = Principals()
    with (
        broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as broker,
        _mtls_proxy(broker, pki, "required", watch) as px,
    ):
        topic = fresh("mtls")
        create(broker.bootstrap_servers, topic, 1)
        assert _sent(_producer(px, pki, "service"), topic, 10) == 10
        assert _sent(_producer(px, pki, "admin"), topic, 10) == 10
        for who in (None, "stranger"):
            assert _sent(_producer(px, pki, who, False), topic, 1) == 0
        assert _sent(_producer(px, pki, "service"), topic, 5) == 5
        assert len(placement(broker.bootstrap_servers, topic, 1)) == 25
    subjects = {
        "User:serviceuser": "CN=serviceuser,OU=ServiceUsers",
        # No L, ST or C in trustme's subjects: KIP-371's third rule maps this one.
        "User:adminuser": "CN=adminUser,OU=Admin",
    }
    assert {p for p, _ in watch.seen} == set(subjects)
    for principal, subject in watch.seen:
        assert subject is not None and subject.startswith(subjects[principal] + ",O=trustme")


def every_client(
    servers: str, topic: str, partitions: int, keystore: str | None, pki: dict[str, str], **tls: Any
) -> tuple[list[Report], list[bytes]]:
    """Kafka's Java producer (``keystore``: its PEM key store, KIP-651; None:
    plaintext), trafka's SDK and confluent-kafka (``tls``: the SDK's TLS
    settings, as :func:`_sdk` names them), each plain, idempotent and in
    transactions, 30 records each to ``topic``: reports and values sent."""
    tag = fresh("mx")
    java = java_tls(pki["ca"], keystore) if keystore is not None else {}
    reports, sent = java_sends(java_producer(), servers, topic, 30, "java", f"{tag}-j", java)
    librdkafka = {}
    if tls:
        librdkafka = {"security.protocol": "SSL", "ssl.ca.location": tls["ssl_cafile"]}
        librdkafka |= {"ssl.certificate.location": tls["ssl_certfile"]}
        librdkafka |= {"ssl.key.location": tls["ssl_keyfile"]}
    more, values = sdk_and_confluent_sends(servers, topic, tag, 30, tls, librdkafka)
    return reports + more, sent + values


def check_read(
    servers: str,
    topic: str,
    partitions: int,
    reports: list[Report],
    sent: list[bytes],
    routed: bool,
    **tls: Any,
) -> None:
    """Through ``servers``, read_committed: every record sent once, each
    producer's keys in order, every report where its record is; ``routed``:
    each key on its murmur2 partition."""
    records = read_committed(servers, topic, partitions, sent, **tls)
    once_in_order(by_partition(records, partitions), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)
    if routed:
        assert [r for r in records if r.partition != murmur2_partition(r.key, partitions)] == []


@pytest.mark.parametrize("route_keys", ["none", "murmur2"])
def test_kafkas_java_producer_and_every_client_with_certificates(
    route_keys: str, pki: dict[str, str], broker: RunningBroker, tmp_path: Path
) -> None:
    """Client certificates required: Kafka's Java producer (4.4) with a PEM
    key store (``ssl.keystore.type=PEM``, KIP-651; the key as PKCS#8),
    confluent-kafka and trafka's SDK, each plain, idempotent and in
    transactions, routed and forwarded: every principal is the service
    user's as KIP-371's rules map it, and a read_committed consumer with the
    certificate reads every committed record once and in order."""
    watch = Principals()
    with _mtls_proxy(broker, pki, "required", watch, route_keys) as px:
        topic = fresh("mtls-java")
        create(broker.bootstrap_servers, topic, 3)
        keystore = pem_keystore(pki["service"], pki["service-key"], tmp_path / "keystore.pem")
        tls = _sdk(
            {
                "ssl.ca.location": pki["ca"],
                "ssl.certificate.location": pki["service"],
                "ssl.key.location": pki["service-key"],
            }
        )
        reports, sent = every_client(px.bootstrap_servers, topic, 3, keystore, pki, **tls)
        check_read(px.bootstrap_servers, topic, 3, reports, sent, route_keys != "none", **tls)
    assert {p for p, _ in watch.seen} == {"User:serviceuser"}


def test_requested_client_certificates(pki: dict[str, str], tmp_path: Path) -> None:
    """ssl_client_auth=requested: a client without a certificate is served as
    User:ANONYMOUS (as on Kafka's SSL listener); one with a certificate as its
    principal; the trafka SDK's producer presents one too."""
    watch = Principals()
    with (
        broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as broker,
        _mtls_proxy(broker, pki, "requested", watch) as px,
    ):
        topic = fresh("mtls-req")
        create(broker.bootstrap_servers, topic, 1)
        assert _sent(_producer(px, pki, None), topic, 3) == 3
        assert _sent(_producer(px, pki, "stranger", False), topic, 1) == 0  # sent, not verified
        anonymous = set(watch.seen)

        async def sdk() -> None:
            async with open_producer(
                bootstrap_servers=px.bootstrap_servers,
                security_protocol="SSL",
                ssl_cafile=pki["ca"],
                ssl_certfile=pki["admin"],
                ssl_keyfile=pki["admin-key"],
            ) as producer:
                await producer.send(topic, b"sdk")
                await producer.flush()

        anyio.run(sdk, backend="trio")
    assert anonymous == {("User:ANONYMOUS", None)}
    assert watch.seen[-1][0] == "User:adminuser"


def test_a_subject_no_rule_maps_is_refused(pki: dict[str, str], tmp_path: Path) -> None:
    watch = Principals()
    with (
        broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as broker,
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,),
            port=0,
            ssl_certfile=pki["proxy"],
            ssl_cafile=pki["ca"],
            ssl_client_auth="required",
            ssl_principal_mapping_rules="RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            filters=(watch,),
        ) as px,
    ):
        topic = fresh("mtls-rule")
        create(broker.bootstrap_servers, topic, 1)
        assert _sent(_producer(px, pki, "admin", False), topic, 1) == 0
        assert _sent(_producer(px, pki, "service"), topic, 2) == 2
    assert {p for p, _ in watch.seen} == {"User:serviceuser"}


def test_the_proxy_presents_its_certificate_to_brokers_that_require_one(
    pki: dict[str, str], tmp_path: Path
) -> None:
    """Mutual TLS towards the brokers: brokerlite's SSL listener requires a
    client certificate of the CA (its ssl_client_auth=required, as Kafka's);
    the proxy shows upstream_ssl_certfile, and every client's records, in every
    mode, go through it, routed and forwarded. Without it, nothing gets through."""
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path,
        security_protocol="SSL",
        ssl_certfile=pki["broker"],
        ssl_cafile=pki["ca"],
        ssl_client_auth="required",
    ) as broker:
        direct = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"]}
        direct |= {"ssl.certificate.location": pki["service"]}
        direct |= {"ssl.key.location": pki["service-key"]}
        topic = fresh("mtls-up")
        matrices = {mode: fresh(f"mtls-up-every-{mode}") for mode in ("murmur2", "none")}

        async def create_topic() -> None:
            async with open_admin(bootstrap_servers=broker.bootstrap_servers, **_sdk(direct)) as a:
                await a.create_topics([NewTopic(topic, 1)])
                await a.create_topics([NewTopic(m, 3) for m in matrices.values()])

        anyio.run(create_topic, backend="trio")
        _every_mode_through_a_certified_proxy(broker.bootstrap_servers, pki, topic, matrices, 30)
        upstream = {"upstream_ssl": True, "upstream_ssl_cafile": pki["ca"]}
        with (
            proxy_in_thread(
                upstream=(broker.bootstrap_servers,), port=0, connect_timeout=5, **upstream
            ) as px,
            socket.create_connection(px.address, timeout=10) as s,
        ):
            s.settimeout(15)
            s.sendall(struct.pack(">ihhih", 12, 18, 0, 1, 2) + b"px")  # ApiVersions v0
            assert s.recv(100) == b""  # the broker refused the proxy: the client is closed
        assert len(placement(broker.bootstrap_servers, topic, 1, **_sdk(direct))) == 10


def _every_mode_through_a_certified_proxy(
    address: str, pki: dict[str, str], topic: str, matrices: dict[str, str], flush_s: float
) -> None:
    """Through a proxy that presents the service's certificate to ``address``,
    routing and then forwarding (``matrices``: route_keys -> its topic): a plain
    producer's 5 records to ``topic``, then Kafka's Java producer, confluent-kafka
    and the SDK, every mode, each committed record read once and in order."""
    upstream = {"upstream_ssl": True, "upstream_ssl_cafile": pki["ca"]}
    for route_keys, matrix in matrices.items():
        with proxy_in_thread(
            upstream=(address,),
            port=0,
            upstream_ssl_certfile=pki["service"],
            upstream_ssl_keyfile=pki["service-key"],
            route_keys=route_keys,
            **upstream,
        ) as px:
            plain = confluent_kafka.Producer(
                {
                    "bootstrap.servers": px.bootstrap_servers,
                    "message.timeout.ms": int(500 * flush_s),
                }
            )
            for i in range(5):
                plain.produce(topic, b"%d" % i)
            assert plain.flush(flush_s) == 0
            reports, sent = every_client(px.bootstrap_servers, matrix, 3, None, pki)
            check_read(px.bootstrap_servers, matrix, 3, reports, sent, route_keys != "none")


def _sdk(settings: dict[str, str]) -> dict[str, str]:
    return {
        "security_protocol": "SSL",
        "ssl_cafile": settings["ssl.ca.location"],
        "ssl_certfile": settings["ssl.certificate.location"],
        "ssl_keyfile": settings["ssl.key.location"],
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl_client_auth": "required"}, "need ssl_certfile"),
        ({"ssl_client_auth": "always"}, "required, requested or none"),
        ({"ssl_cafile": "ca.pem"}, "need ssl_certfile"),
        ({"upstream_ssl_certfile": "c.pem"}, "needs upstream_ssl"),
        ({"ssl_principal_mapping_rules": "RULE:x"}, "rule"),
    ],
)
def test_inconsistent_mtls_settings_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProxyConfig(upstream=("h:1",), **settings)  # type: ignore[arg-type]


def test_a_client_ca_file_that_cannot_load_is_refused(pki: dict[str, str], tmp_path: Path) -> None:
    config = ProxyConfig(
        upstream=("h:1",),
        ssl_certfile=pki["proxy"],
        ssl_cafile=str(tmp_path / "none.pem"),
        ssl_client_auth="required",
    )
    with pytest.raises(ValueError, match="cannot load"):
        config.client_ssl_context()
    assert (
        ProxyConfig(
            upstream=("h:1",),
            ssl_certfile=pki["proxy"],
            ssl_cafile=pki["ca"],
            ssl_client_auth="required",
        )
        .client_ssl_context()
        .verify_mode
        == ssl.CERT_REQUIRED
    )  # type: ignore[union-attr]


def test_check_config_reads_and_checks_the_mtls_settings(
    pki: dict[str, str], tmp_path: Path
) -> None:
    """The TOML keys of docs/proxy.md's mutual TLS section; --check-config
    names every problem at once."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command

    good = tmp_path / "good.toml"
    good.write_text(
        'upstream = ["127.0.0.1:9092"]\n'
        f'ssl_certfile = "{pki["proxy"]}"\n'
        f'ssl_cafile = "{pki["ca"]}"\n'
        'ssl_client_auth = "required"\n'
        f"ssl_principal_mapping_rules = '{KIP_371_RULES}'\n"
        "upstream_ssl = true\n"
        f'upstream_ssl_cafile = "{pki["ca"]}"\n'
        f'upstream_ssl_certfile = "{pki["service"]}"\n'
        f'upstream_ssl_keyfile = "{pki["service-key"]}"\n'
    )
    result = CliRunner().invoke(command, ["--config", str(good), "--check-config"])
    assert result.exit_code == 0, result.output
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'upstream = ["127.0.0.1:9092"]\n'
        'ssl_client_auth = "required"\n'
        f'upstream_ssl_certfile = "{pki["service"]}"\n'
    )
    result = CliRunner().invoke(command, ["--config", str(bad), "--check-config"])
    assert result.exit_code == 1
    for problem in ("need ssl_cafile", "need ssl_certfile", "needs upstream_ssl"):
        assert problem in result.output, result.output
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'upstream = ["127.0.0.1:9092"]\n'
        f'ssl_certfile = "{pki["proxy"]}"\n'
        "ssl_principal_mapping_rules = 'RULE:^CN=(.*/$1/'\n"
    )
    result = CliRunner().invoke(command, ["--config", str(rules), "--check-config"])
    assert result.exit_code == 1 and "principal mapping rule" in result.output, result.output


@pytest.mark.kafka
def test_the_proxy_presents_its_certificate_to_kafka(
    pki: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Mutual TLS towards Apache Kafka 4.4: a node whose SSL listener requires
    client certificates of the CA (``ssl.client.auth=required``, PEM key and
    trust stores, KIP-651); the proxy with ``upstream_ssl_certfile`` carries a
    plaintext client's records to it (Kafka's Java producer, confluent-kafka
    and trafka's SDK, plain, idempotent and transactional, routed and
    forwarded), a proxy without one gets nothing through."""
    from cryptography.hazmat.primitives import serialization
    from kafka_peers import KAFKA_4, SKIP_ENV, KafkaCluster, missing

    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: Apache Kafka tests skipped")
    why = missing("kafka", KAFKA_4)
    if why is not None:
        pytest.fail(why, pytrace=False)
    folder = tmp_path_factory.mktemp("kafka-mtls")
    ca = trustme.CA.from_pem(Path(pki["ca-cert"]).read_bytes(), Path(pki["ca-key"]).read_bytes())
    keystore = folder / "kafka.pem"
    leaf = ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.RSA)
    # Kafka's PEM key store wants the key as PKCS#8 (trustme writes RSA keys as PKCS#1).
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    keystore.write_bytes(pkcs8 + b"".join(c.bytes() for c in leaf.cert_chain_pems))
    kafka = KafkaCluster(
        KAFKA_4,
        folder / "kafka",
        listeners={"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"},
        config={
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": pki["ca"],
        },
    )
    with kafka:
        ssl_address = f"{kafka.host}:{kafka.node(1).ports['SSL']}"
        topic = fresh("kafka-mtls")
        matrices = {mode: fresh(f"kafka-mtls-every-{mode}") for mode in ("murmur2", "none")}
        create(kafka.bootstrap_servers, topic, 1, served=True)
        for matrix in matrices.values():
            create(kafka.bootstrap_servers, matrix, 3, served=True)
        _every_mode_through_a_certified_proxy(ssl_address, pki, topic, matrices, 60)
        upstream = {"upstream_ssl": True, "upstream_ssl_cafile": pki["ca"]}
        with (
            proxy_in_thread(upstream=(ssl_address,), port=0, connect_timeout=10, **upstream) as px,
            socket.create_connection(px.address, timeout=20) as s,
        ):
            s.settimeout(30)
            s.sendall(struct.pack(">ihhih", 12, 18, 0, 1, 2) + b"px")  # ApiVersions v0
            assert s.recv(100) == b""  # Kafka refused the proxy's handshake: closed
        assert len(placement(kafka.bootstrap_servers, topic, 1)) == 10


def _docs_example() -> str:
    """The TOML example of docs/proxy.md's "Mutual TLS" section."""
    text = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = text.split("### Mutual TLS\n", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


def test_the_docs_example_runs(pki: dict[str, str], tmp_path: Path) -> None:
    """docs/proxy.md's mutual TLS example, as a file (its upstream a brokerlite
    whose SSL listener requires client certificates, its files this test's:
    the proxy's client certificate and key in one file, as the example has
    it): checked, then served; a client with the service user's certificate
    produces through it as ``User:serviceuser`` (KIP-371's first rule), one
    without a certificate is refused."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command
    from trafka.proxy.reload import load
    from trafka.proxy.settings import Sources

    shown = tmp_path / "proxy-client.pem"
    shown.write_bytes(Path(pki["service"]).read_bytes() + Path(pki["service-key"]).read_bytes())
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "data",
        security_protocol="SSL",
        ssl_certfile=pki["broker"],
        ssl_cafile=pki["ca"],
        ssl_client_auth="required",
    ) as broker:
        example = _docs_example()
        for was, now in (
            ('"kafka-1:9093"', f'"{broker.bootstrap_servers}"'),
            ('"0.0.0.0:19092"', '"127.0.0.1:0"'),
            ('"proxy.internal"', '"127.0.0.1"'),
            ('"/etc/trafka/tls/proxy.pem"', f'"{pki["proxy"]}"'),
            ('"/etc/trafka/tls/clients-ca.pem"', f'"{pki["ca"]}"'),
            ('"/etc/trafka/tls/kafka-ca.pem"', f'"{pki["ca"]}"'),
            ('"/etc/trafka/tls/proxy-client.pem"', f'"{shown}"'),
        ):
            assert was in example, was
            example = example.replace(was, now)
        toml = tmp_path / "proxy.toml"
        toml.write_text(example)
        result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
        assert result.exit_code == 0, result.output
        watch = Principals()
        config = load(Sources(path=str(toml))).config
        direct = {
            "ssl.ca.location": pki["ca"],
            "ssl.certificate.location": pki["service"],
            "ssl.key.location": pki["service-key"],
        }
        topic = fresh("mtls-docs")

        async def create_topic() -> None:
            async with open_admin(bootstrap_servers=broker.bootstrap_servers, **_sdk(direct)) as a:
                await a.create_topics([NewTopic(topic, 1)])

        anyio.run(create_topic, backend="trio")
        with proxy_in_thread(config, filters=(watch,)) as px:
            assert _sent(_producer(px, pki, "service"), topic, 5) == 5
            assert _sent(_producer(px, pki, None, False), topic, 1) == 0
        assert len(placement(broker.bootstrap_servers, topic, 1, **_sdk(direct))) == 5
    assert {p for p, _ in watch.seen} == {"User:serviceuser"}
