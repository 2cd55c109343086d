"""Tenants picked by their SNI label (issue #83 item 2, "picked by listener,
SNI name or principal"; docs/proxy.md, "Virtual clusters (tenants)").

With ``sni_virtual_hosts``, a client may ask, in its TLS handshake, for
``bootstrap.<label>.<domain>`` or ``broker-N.<label>.<domain>``: the proxy
serves it as it serves ``broker-N.<domain>`` (one port, tests/proxy/
test_proxy_sni.py), records the label as the connection's virtual host and
names every broker in its answers within that label, so the client stays in
it. The tenants filter picks a tenant by the label (``hosts``): two tenants
share one proxy port in front of brokerlite and Apache Kafka 4.4, each
through its own label, with trafka's SDK (its name lookups answered
127.0.0.1, the handshake and SNI its own) and confluent-kafka (librdkafka:
a process whose /etc/hosts is the test's, tests/proxy/client_matrix.py's
``in_own_hosts``). A wildcard certificate matches one label only (RFC 6125,
6.4.3): the proxy's names ``*.<label>.<domain>`` for each label.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
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

from trafka.codec import ApiKey
from trafka.codec.messages import k03_metadata as mm
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.proxy import ProxyConfig, RunningProxy, proxy_in_thread
from trafka.proxy.filters import CloseConnection, FilterContext, Session
from trafka.proxy.sni import SniNames, UnknownName
from trafka.proxy.tenants import Tenants
from trafka.sdk import ConfigError, NewTopic, open_admin, open_consumer, open_producer
from trafka.sdk.partitioners import murmur2_partition

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.compat("proxy", "virtual clusters (tenants) picked by SNI label"),
]

DOMAIN = "kafka.test"
RULES = "RULE:^CN=([^,]*),.*$/$1/,DEFAULT"
TENANTS = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "hosts": ["acme"], "principals": ["User:alice"]},
        # Labels are DNS labels: compared lowercased.
        {"name": "globex", "prefix": "globex.", "hosts": ["Globex"], "principals": ["User:bob"]},
    ]
}
LABELS = ("acme", "globex")
PREFIXES = ("acme.", "globex.", "__")  # no tenant sees a prefix, nor an internal topic


# -- the names and the settings ---------------------------------------------------------------


def test_labelled_names_pick_the_same_broker_and_a_virtual_host() -> None:
    names = SniNames("kafka.test", virtual_hosts=True)
    known = {0, 1}
    assert names.pick("bootstrap.acme.kafka.test", known) == (None, "acme")
    assert names.pick("BROKER-1.Acme.kafka.test", known) == (1, "acme")
    assert names.pick("broker-0.kafka.test", known) == (0, None)
    assert names.pick(None, known) == (None, None)
    assert names.host_of(1, "acme") == "broker-1.acme.kafka.test"
    for name in (
        "broker-1.a.b.kafka.test",  # two labels
        "broker-1.-x.kafka.test",  # not a DNS label
        "broker-7.acme.kafka.test",  # a broker the proxy has not met
        "broker-1.acme.other.test",
    ):
        with pytest.raises(UnknownName):
            names.pick(name, known)
    # Without the setting, a labelled name is an unknown name (today's rule).
    with pytest.raises(UnknownName):
        SniNames("kafka.test").pick("broker-1.acme.kafka.test", known)


@pytest.mark.parametrize(
    ("key", "version", "module"),
    [
        (ApiKey.PRODUCE, 11, "k00_produce"),
        (ApiKey.FETCH, 17, "k01_fetch"),
        (ApiKey.SHARE_FETCH, 1, "k78_share_fetch"),
    ],
)
def test_leader_hints_are_named_within_the_label(key: int, version: int, module: str) -> None:
    """KIP-951's leader hints (``node_endpoints``, Produce v10+, Fetch v16+,
    ShareFetch) in an answer address rewriting made (``broker-N.<domain>``):
    within the connection's label, at the same port; a connection without a
    label gets the frame as it came. The renaming follows the user's filters
    and precedes key routing, whose answers (made from the pool's, with
    such hints) it renames too."""
    from trafka.codec import protocol
    from trafka.proxy.assembly import filter_chain
    from trafka.proxy.rewrite import VirtualHostNames

    answer_type = protocol.api(key).response_type
    assert answer_type.__module__.endswith(module)
    endpoint = answer_type.NodeEndpoint
    body = answer_type(
        node_endpoints=[endpoint(node_id=n, host=f"broker-{n}.{DOMAIN}", port=9093) for n in (1, 2)]
    )
    frame = protocol.encode_response(5, key, version, body)[4:]
    names = SniNames(DOMAIN, virtual_hosts=True)
    renaming = VirtualHostNames(names)
    assert renaming.answer_frames(key, version)

    def ctx(label: str | None) -> FilterContext:
        session = Session(virtual_host=label)
        return FilterContext(key, version, 5, "c", None, 1, session=session)

    assert renaming.on_response_frame(ctx(None), frame) is frame
    _, renamed = protocol.decode_response(
        renaming.on_response_frame(ctx("acme"), frame), key, version
    )
    assert [(e.node_id, e.host, e.port) for e in renamed.node_endpoints] == [
        (n, f"broker-{n}.acme.{DOMAIN}", 9093) for n in (1, 2)
    ]
    tenants = Tenants()
    chain = filter_chain(
        ProxyConfig(
            upstream=("h:1",),
            ssl_certfile=__file__,
            sni_domain=DOMAIN,
            sni_virtual_hosts=True,
            filters=(tenants,),
        )
    )
    assert [type(f).__name__ for f in chain] == [
        "Tenants",
        "VirtualHostNames",
        "KeyRouting",
        "SaslPrincipals",
        "BrokerAddresses",
    ]


def _problems(settings: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        Tenants().configure(settings)
    return list(refused.value.problems)


def test_every_problem_of_the_hosts_is_named() -> None:
    problems = _problems(
        {
            "tenants": [
                {"name": "a", "prefix": "a.", "hosts": ["acme", "a.b"]},
                {"name": "b", "prefix": "b.", "hosts": ["ACME", "-x", 7]},
                {"name": "c", "prefix": "c."},
                {"name": "d", "prefix": "d.", "hosts": "d"},
            ]
        }
    )
    assert any("tenants[0]: host 'a.b' is not one DNS label" in p for p in problems)
    assert any("tenants[1]: host 'acme' is already in tenant 'a'" in p for p in problems)
    assert any("tenants[1]: host '-x' is not one DNS label" in p for p in problems)
    assert any("tenants[1]: host 7 is not one DNS label" in p for p in problems)
    assert any("tenants[2]: a tenant needs principals, hosts" in p for p in problems)
    assert any("tenants[3]: principals, hosts and listeners must be lists" in p for p in problems)
    assert len(problems) == 6, problems


def test_hosts_need_sni_virtual_hosts(tmp_path: Path, pki: dict[str, str]) -> None:
    """``--check-config`` names a tenant's hosts without the proxy's
    ``sni_domain``/``sni_virtual_hosts`` with the other problems, and so does
    a start from code; ``sni_virtual_hosts`` needs ``sni_domain``."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command

    tenants = (
        "[[filter]]\n"
        'use = "trafka.proxy.tenants:Tenants"\n'
        "[[filter.settings.tenants]]\n"
        'name = "a"\nprefix = "a."\nhosts = ["acme"]\n'
    )
    tls = f'ssl_certfile = "{pki["proxy"]}"\n'
    cases = {
        "": "tenants name hosts (acme): they need the proxy's sni_domain and sni_virtual_hosts",
        f'{tls}sni_domain = "{DOMAIN}"\n': "they need the proxy's sni_domain and sni_virtual_hosts",
        "sni_virtual_hosts = true\n": "sni_virtual_hosts needs sni_domain",
    }
    for extra, message in cases.items():
        toml = tmp_path / "proxy.toml"
        toml.write_text(f'upstream = "127.0.0.1:9092"\nlisten = "127.0.0.1:0"\n{extra}{tenants}')
        result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
        assert result.exit_code == 1 and message in result.output, result.output
    toml.write_text(
        f'upstream = "127.0.0.1:9092"\n{tls}sni_domain = "{DOMAIN}"\n'
        f"sni_virtual_hosts = true\n{tenants}"
    )
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 0, result.output

    tenant = Tenants()
    tenant.configure(TENANTS)
    with (
        pytest.raises(ConfigError, match="need the proxy's sni_domain"),
        proxy_in_thread(upstream=("127.0.0.1:1",), port=0, filters=(tenant,)),
    ):
        pass
    with pytest.raises(ValueError, match="sni_virtual_hosts needs sni_domain"):
        ProxyConfig(upstream=("h:1",), sni_virtual_hosts=True)


def test_the_label_picks_the_tenant_and_a_principal_must_agree() -> None:
    """A label is its tenant's from the first request, no principal needed
    (``User:ANONYMOUS``, a TLS client without a certificate, of no tenant,
    leaves it to the label); another tenant's principal closes the
    connection, naming both; a label of no tenant closes it; without a label
    the principal picks, as before. A reload follows the new tenants."""
    from trafka.codec.messages import k03_metadata as md

    tenants = Tenants()
    tenants.configure(TENANTS)
    request = md.MetadataRequest(topics=None)

    def ctx(label: str | None, principal: str | None) -> FilterContext:
        session = Session(principal=principal, virtual_host=label)
        return FilterContext(ApiKey.METADATA, 12, 1, "c", ("127.0.0.1", 1), -1, session=session)

    for label, principal in (
        ("acme", None),
        ("acme", "User:ANONYMOUS"),
        ("acme", "User:alice"),
        ("globex", "User:bob"),
        (None, "User:bob"),
    ):
        assert tenants.on_request(ctx(label, principal), request) is request
    with pytest.raises(CloseConnection, match="host 'initech' belongs to no tenant"):
        tenants.on_request(ctx("initech", "User:alice"), request)
    with pytest.raises(
        CloseConnection,
        match="host 'acme' is tenant 'acme''s but principal User:bob is tenant 'globex''s",
    ):
        tenants.on_request(ctx("acme", "User:bob"), request)
    tenants.configure({"tenants": [{"name": "i", "prefix": "i.", "hosts": ["initech"]}]})
    assert tenants.on_request(ctx("initech", "User:bob"), request) is request
    with pytest.raises(CloseConnection, match="host 'acme' belongs to no tenant"):
        tenants.on_request(ctx("acme", None), request)
    assert [(s.labels, s.value) for s in tenants.samples()] == [
        ((("tenant", "acme"), ("outcome", "served")), 3),
        ((("tenant", "globex"), ("outcome", "served")), 2),
        ((("tenant", "i"), ("outcome", "served")), 1),
    ]


# -- through the proxy ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The proxy's certificate names ``*.<label>.kafka.test`` for each label
    (and one no tenant has), since a wildcard matches one label only; alice's
    and bob's client certificates name them by their CN."""
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("sni-tenants")
    paths = {"ca": str(folder / "ca.pem"), "proxy": str(folder / "proxy.pem")}
    ca.cert_pem.write_to_path(paths["ca"])
    names = [f"*.{label}.{DOMAIN}" for label in (*LABELS, "initech")]
    ca.issue_cert(f"*.{DOMAIN}", *names).private_key_and_cert_chain_pem.write_to_path(
        paths["proxy"]
    )
    for user in ("alice", "bob"):
        leaf = ca.issue_cert(f"{user}.clients.test", common_name=user)
        paths[user] = str(folder / f"{user}.pem")
        leaf.private_key_and_cert_chain_pem.write_to_path(paths[user])
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


@pytest.fixture
def tenants_proxy(peer: Peer, pki: dict[str, str]) -> Iterator[RunningProxy]:
    """Two tenants on one TLS port: routing (murmur2) in front of Kafka,
    forwarding in front of brokerlite."""
    tenants = Tenants()
    tenants.configure(TENANTS)
    with proxy_in_thread(
        upstream=(peer.bootstrap_servers,),
        port=0,
        ssl_certfile=pki["proxy"],
        ssl_cafile=pki["ca"],
        ssl_client_auth="requested",
        ssl_principal_mapping_rules=RULES,
        sni_domain=DOMAIN,
        sni_virtual_hosts=True,
        filters=(tenants,),
        route_keys="none" if peer.name == "brokerlite" else "murmur2",
    ) as px:
        yield px


def _tls_call(
    port: int, pki: dict[str, str], name: str, key: int, version: int, body: Any, user: str = ""
) -> Any:
    """One request over TLS to the proxy's port asking for ``name`` by SNI
    (with ``user``'s client certificate)."""
    context = ssl.create_default_context(cafile=pki["ca"])
    if user:
        context.load_cert_chain(pki[user])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        return call(tls, key, version, body)


def _sdk(px: RunningProxy, pki: dict[str, str], label: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": f"bootstrap.{label}.{DOMAIN}:{px.address[1]}",
        "security_protocol": "SSL",
        "ssl_cafile": pki["ca"],
    }


async def _as_tenant(
    px: RunningProxy, pki: dict[str, str], label: str, names: dict[str, str]
) -> None:
    """Through ``bootstrap.<label>``: create, produce, consume and commit
    under ``names``; see only the tenant's own topic and group; every broker
    the SDK learns of is named within the label."""
    topic, group = names["topic"], names["group"]
    settings = _sdk(px, pki, label)
    async with open_admin(**settings) as admin:
        # The same name for both tenants, and one of the tenant's own.
        await admin.create_topics([NewTopic(topic, 2, 1), NewTopic(f"{topic}-{label}", 1, 1)])
    async with open_producer(**settings) as producer:
        for i in range(10):
            await producer.send(topic, f"{label}-{i}".encode(), key=b"%d" % i)
        await producer.flush()
    async with open_consumer(
        topic, group_id=group, auto_offset_reset="earliest", **settings
    ) as consumer:
        got: list[bytes] = []
        while len(got) < 10:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got += [r.value for r in records]
        assert sorted(got) == sorted(f"{label}-{i}".encode() for i in range(10))
        await consumer.commit()
    async with open_admin(**settings) as admin:
        listed = await admin.list_topics()
        assert {topic, f"{topic}-{label}"} <= set(listed)
        groups = {g.group_id for g in await admin.list_groups()}
        assert group in groups
        # No broker-side name of this test's (a prefix shown), no internal topic.
        # Other names may start with a prefix: a test sharing the broker may
        # have made acme's "globex.x" (broker "acme.globex.x"), acme's own.
        ours = {topic, group, *(f"{topic}-{other}" for other in LABELS)}
        brokers = {p + n for p in PREFIXES for n in ours}
        shown = [n for n in (*listed, *groups) if n.startswith(PREFIXES)]
        assert not [n for n in shown if n.startswith("__") or n in brokers], shown
        described = await admin.describe_cluster()  # DescribeCluster, renamed
        assert {b.host for b in described.brokers} == {
            f"broker-{b.node_id}.{label}.{DOMAIN}" for b in described.brokers
        }
        assert {b.port for b in described.brokers} == {px.address[1]}


@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_two_tenants_each_through_its_own_label(
    peer: Peer,
    tenants_proxy: RunningProxy,
    pki: dict[str, str],
    resolved: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """trafka's SDK as each tenant through its label, sharing names; on the
    wire, Metadata and FindCoordinator name ``broker-N.<label>.kafka.test``;
    a label no tenant has, and bob's certificate (tenant globex) through
    acme's label, are closed, logged naming them; alice's (acme's) through
    acme's label is served."""
    px, port = tenants_proxy, tenants_proxy.address[1]
    caplog.set_level(logging.INFO, logger="trafka.proxy")
    names = {"topic": fresh("orders"), "group": fresh("g")}

    async def main() -> None:
        with anyio.fail_after(150):
            for label in LABELS:
                await _as_tenant(px, pki, label, names)
            for label, other in (LABELS, LABELS[::-1]):  # the other's own topic unseen
                async with open_admin(**_sdk(px, pki, label)) as admin:
                    assert f"{names['topic']}-{other}" not in await admin.list_topics()
        async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
            listed = set(await admin.list_topics())
            assert {f"acme.{names['topic']}", f"globex.{names['topic']}"} <= listed
            assert names["topic"] not in listed

    anyio.run(main, backend="trio")

    for label in LABELS:
        meta = _tls_call(
            port,
            pki,
            f"bootstrap.{label}.{DOMAIN}",
            ApiKey.METADATA,
            9,
            mm.MetadataRequest(topics=None),
        )
        assert {b.host for b in meta.brokers} == {
            f"broker-{b.node_id}.{label}.{DOMAIN}" for b in meta.brokers
        }
        assert {t.name for t in meta.topics} >= {names["topic"]}
        assert not [t.name for t in meta.topics if t.name.startswith(("acme.", "globex."))]
        node = min(b.node_id for b in meta.brokers)
        coordinator = _tls_call(
            port,
            pki,
            f"broker-{node}.{label}.{DOMAIN}",
            ApiKey.FIND_COORDINATOR,
            3,
            fc.FindCoordinatorRequest(key=names["group"], key_type=0),
        )
        assert coordinator.error_code == 0
        assert coordinator.host == f"broker-{coordinator.node_id}.{label}.{DOMAIN}"
    # Without a label: the principal picks (alice: acme), names without a label.
    meta = _tls_call(
        port, pki, f"bootstrap.{DOMAIN}", ApiKey.METADATA, 9, mm.MetadataRequest(topics=[]), "alice"
    )
    assert {b.host for b in meta.brokers} == {f"broker-{b.node_id}.{DOMAIN}" for b in meta.brokers}
    nothing = mm.MetadataRequest(topics=[])
    assert _tls_call(
        port, pki, f"bootstrap.acme.{DOMAIN}", ApiKey.METADATA, 9, nothing, "alice"
    ).brokers
    refused = [
        (f"bootstrap.initech.{DOMAIN}", "", "host 'initech' belongs to no tenant"),
        (
            f"bootstrap.acme.{DOMAIN}",
            "bob",
            "host 'acme' is tenant 'acme''s but principal User:bob is tenant 'globex''s",
        ),
    ]
    if peer.name != "brokerlite":
        # The proxy logs the closes of one filter once a minute: the first is
        # logged, so each peer's run has the other first.
        refused.reverse()
    for name, user, _ in refused:
        with pytest.raises(AssertionError, match="closed the connection"):
            _tls_call(port, pki, name, ApiKey.METADATA, 9, nothing, user)
    said = [r.getMessage() for r in caplog.records if r.name == "trafka.proxy"]
    assert f"closing a client connection: tenants: {refused[0][2]}" in said
    counted = px.statistics.filters["tenants"]
    assert counted[("acme", "served")] > 0 and counted[("globex", "served")] > 0


def _every_client_by_label(
    px: RunningProxy, pki: dict[str, str], peer: Peer, wrap: list[str]
) -> None:
    """The client matrix (issue #83, "Done when"; tests/proxy/client_matrix.py)
    by SNI label, one topic name for both tenants: Kafka's Java producer (one
    JVM, its /etc/hosts the test's) as acme; confluent-kafka (a script in the
    same hosts, then its read_committed consumer) and trafka's SDK as globex;
    each plain, idempotent and transactional. A read_committed consumer
    through each label reads its tenant's committed records once, each
    producer's keys in order, none of the other's, every report where its
    record is; routed (Kafka), each key on its murmur2 partition. The Java
    producer's transactional id is confluent-kafka's: the broker holds each
    tenant's, prefixed."""
    topic, tag, port = fresh("mx-orders"), fresh("mx"), px.address[1]
    for label in LABELS:
        create(peer.bootstrap_servers, f"{label}.{topic}", 3, 1, served=True)
    bootstrap = {label: f"bootstrap.{label}.{DOMAIN}:{port}" for label in LABELS}
    java = java_tls(pki["ca"])
    sent = {
        "acme": java_sends(
            java_producer(), bootstrap["acme"], topic, 20, "java", f"{tag}-ck", java, wrap=wrap
        )
    }
    script = Path(__file__).with_name("sni_confluent_client.py")
    done = subprocess.run(
        [*wrap, sys.executable, str(script), bootstrap["globex"], topic, pki["ca"], tag, "20"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ck = json.loads(done.stdout)
    ck_sent = [v.encode() for v in ck["sent"]]
    once_in_order(
        {int(p): [v.encode() for v in vs] for p, vs in ck["read"].items()}, ck_sent, keys=KEYS
    )
    tls = {"security_protocol": "SSL", "ssl_cafile": pki["ca"]}
    reports, values = sdk_and_confluent_sends(bootstrap["globex"], topic, tag, 20, tls, None)
    reports += [(v.encode(), p, o) for v, p, o in ck["reports"]]
    sent["globex"] = (reports, values + ck_sent)
    for label, (reports, values) in sent.items():
        records = read_committed(bootstrap[label], topic, 3, values, **tls)
        once_in_order(by_partition(records, 3), values, keys=KEYS)  # none of the other's
        assert misreported(records, reports) is None, misreported(records, reports)
        if peer.name != "brokerlite":
            assert [r for r in records if r.partition != murmur2_partition(r.key, 3)] == []

    async def transactional_ids() -> set[str]:
        async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
            return {t.transactional_id for t in await admin.list_transactions()}

    ids = anyio.run(transactional_ids, backend="trio")
    assert {f"acme.{tag}-ck", f"globex.{tag}-ck", f"globex.{tag}-sdk"} <= ids
    assert not {f"{tag}-ck", f"{tag}-sdk"} & ids


@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_every_client_as_each_tenant_through_their_labels(
    peer: Peer, tenants_proxy: RunningProxy, pki: dict[str, str], tmp_path: Path, resolved: None
) -> None:
    """confluent-kafka (librdkafka) as each tenant through its label, the
    same topic and group names: each produces, consumes and commits its own
    records, lists only its own topic and group, and its metadata names every
    broker within its label. Then every client in every mode by label
    (:func:`_every_client_by_label`)."""
    why = hosts_unavailable()
    if why is not None:
        pytest.skip(why)
    hosts = tmp_path / "hosts"
    names = " ".join(
        f"{first}.{label}.{DOMAIN}"
        for label in LABELS
        for first in ("bootstrap", *(f"broker-{n}" for n in range(4)))
    )
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {names}\n")
    topic, group = fresh("ck-orders"), fresh("ck-g")
    script = Path(__file__).with_name("sni_tenants_client.py")
    for label in LABELS:
        bootstrap = f"bootstrap.{label}.{DOMAIN}:{tenants_proxy.address[1]}"
        done = subprocess.run(
            [
                *in_own_hosts(hosts),
                sys.executable,
                str(script),
                bootstrap,
                topic,
                group,
                pki["ca"],
                f"{label}-ck",
                "20",
            ],
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout)
        assert sorted(out["read"]) == sorted(f"{label}-ck-{i}" for i in range(20))
        assert topic in out["topics"] and group in out["groups"]
        assert not [n for n in out["topics"] + out["groups"] if n.startswith(PREFIXES)]
        assert out["brokers"] and all(
            h.startswith("broker-") and h.endswith(f".{label}.{DOMAIN}") for h in out["brokers"]
        )
    _every_client_by_label(tenants_proxy, pki, peer, in_own_hosts(hosts))


@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_a_tenant_cannot_name_the_others_resources_through_its_label(
    peer: Peer, tenants_proxy: RunningProxy, pki: dict[str, str], resolved: None
) -> None:
    """Issue #83, "Done when": globex owns a topic, a group with committed
    offsets and a committed transaction, through its label; acme, through its
    own, sends every API the tenants filter serves naming them as globex
    knows them, as the broker holds them and the topic by id
    (tests/proxy/tenant_probes.py): only errors Kafka gives for what does not
    exist, or empty answers, naming nothing of globex's."""
    from tenant_probes import probe_every_api

    names = {"topic": fresh("secret"), "group": fresh("sg"), "txn": fresh("stx")}
    globex = _sdk(tenants_proxy, pki, "globex")

    async def globex_owns() -> Any:
        with anyio.fail_after(90):
            async with open_admin(**globex) as admin:
                await admin.create_topics([NewTopic(names["topic"], 1, 1)])
            async with open_producer(**globex, transactional_id=names["txn"]) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send(names["topic"], b"globex's", key=b"k")
                await producer.commit_transaction()
            async with open_consumer(
                names["topic"],
                group_id=names["group"],
                auto_offset_reset="earliest",
                isolation_level="read_committed",
                **globex,
            ) as consumer:
                got: list[bytes] = []
                while not got:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in records]
                await consumer.commit()
            async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
                held = f"globex.{names['topic']}"
                return (await admin.describe_topics([held]))[held].topic_id

    topic_id = anyio.run(globex_owns, backend="trio")
    context = ssl.create_default_context(cafile=pki["ca"])
    with (
        socket.create_connection(("127.0.0.1", tenants_proxy.address[1]), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=f"bootstrap.acme.{DOMAIN}") as tls,
    ):
        seen = probe_every_api(
            lambda key, version, body: call(tls, key, version, body),
            names=names,
            prefixed={k: f"globex.{v}" for k, v in names.items()},
            topic_id=topic_id,
            streams=peer.name != "brokerlite",
            host_suffix=f".acme.{DOMAIN}",  # acme's own label in broker names
        )
    assert len(seen) >= 25, sorted(seen)


def _docs_example() -> str:
    """The TOML example of docs/proxy.md's "Picking tenants by SNI label"."""
    text = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = text.split("**Picking tenants by SNI label.**", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


def test_the_docs_example_runs(
    brokerlite_peer: str, pki: dict[str, str], tmp_path: Path, resolved: None
) -> None:
    """docs/proxy.md's example, as a file (its domain, upstream, listener and
    certificate this test's): checked, then served to a tenant's client
    through its label; the broker holds the topic under the tenant's prefix."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command
    from trafka.proxy.reload import load
    from trafka.proxy.settings import Sources

    toml = tmp_path / "proxy.toml"
    toml.write_text(
        _docs_example()
        .replace("kafka-1.internal:9092", brokerlite_peer)
        .replace("0.0.0.0:9093", "127.0.0.1:0")
        .replace("/etc/trafka/tls/tenants.pem", pki["proxy"])
        .replace("kafka.example.com", DOMAIN)
    )
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 0, result.output
    loaded = load(Sources(path=str(toml)))
    topic = fresh("docs")

    async def main(px: RunningProxy) -> None:
        with anyio.fail_after(60):
            settings = _sdk(px, pki, "acme")
            async with open_admin(**settings) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            async with open_producer(**settings) as producer:
                await producer.send_and_wait(topic, b"v")
            async with open_admin(bootstrap_servers=brokerlite_peer) as admin:
                assert f"acme.{topic}" in await admin.list_topics()

    with proxy_in_thread(loaded.config) as px:
        anyio.run(main, px, backend="trio")


def test_sighup_reloads_the_labels(tmp_path: Path, pki: dict[str, str]) -> None:
    """A reload (SIGHUP's, in process) gives the running filter the labels of
    the file as it is now; a file naming one label in two tenants is refused
    whole, the old labels kept."""
    from trafka.proxy.reload import Reloader, load
    from trafka.proxy.settings import Sources

    def write(acme: str, globex: str) -> None:
        toml.write_text(
            f'upstream = "127.0.0.1:9092"\nssl_certfile = "{pki["proxy"]}"\n'
            f'sni_domain = "{DOMAIN}"\nsni_virtual_hosts = true\n'
            '[[filter]]\nuse = "trafka.proxy.tenants:Tenants"\n'
            f'[[filter.settings.tenants]]\nname = "acme"\nprefix = "acme."\nhosts = [{acme}]\n'
            f'[[filter.settings.tenants]]\nname = "globex"\nprefix = "globex."\nhosts = [{globex}]\n'
        )

    toml = tmp_path / "proxy.toml"
    write('"acme"', '"globex"')
    sources = Sources(path=str(toml))
    loaded = load(sources)
    (tenants,) = loaded.config.filters
    assert isinstance(tenants, Tenants)
    reloader = Reloader(sources, loaded.values, loaded.config.filters, None)
    write('"acme", "acme-eu"', '"globex"')
    root = logging.getLogger()
    level = root.level
    try:
        assert reloader.reload()
    finally:
        root.setLevel(level)  # the reload sets the process's log level
    assert {label: t.name for label, t in tenants.by_host.items()} == {
        "acme": "acme",
        "acme-eu": "acme",
        "globex": "globex",
    }
    write('"acme"', '"globex", "acme"')
    assert not reloader.reload()
    assert set(tenants.by_host) == {"acme", "acme-eu", "globex"}
