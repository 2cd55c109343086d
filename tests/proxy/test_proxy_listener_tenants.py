"""Tenants picked by listener (issue #83 item 2, "picked by listener, SNI
name or principal"; docs/proxy.md, "Picking tenants by listener").

A platform team gives each tenant a bootstrap port of its own, as
Kroxylicious's virtual clusters each have their own bootstrap address and
broker ports: the proxy's named listeners (``[[listeners]]``), each with
broker ports of its own. A connection on one carries the listener's name
(``Session.listener``); every answer on it that names brokers (Metadata,
FindCoordinator, DescribeCluster, KIP-951's leader hints) names that
listener's broker ports, so its clients stay on them; the tenants filter
picks a tenant by it (``listeners``), with no TLS nor principal needed. Two
tenants on one proxy in front of brokerlite (forwarding) and Apache Kafka
4.4 (routing), with trafka's SDK and confluent-kafka each through its own
port, and the answers checked on the wire; Kafka's Java producer, trafka's
SDK and confluent-kafka plain, idempotent and transactional (issue #83, "Done
when"; tests/proxy/client_matrix.py), each tenant's records read back
through its own listener; one tenant naming the other's resources in every
API through its listener gets only errors or empty answers.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
import trustme
from client_matrix import (
    KEYS,
    by_partition,
    java_producer,
    java_sends,
    read_committed,
    sdk_and_confluent_sends,
)
from encryption_helpers import once_in_order
from kafka_fixtures import Peer
from proxy_helpers import Report, call, create, free_port, fresh, misreported

from trafka.codec import ApiKey, ErrorCode, protocol
from trafka.codec.messages import k03_metadata as mm
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k60_describe_cluster as dc
from trafka.proxy import ProxyConfig, RunningProxy, proxy_in_thread
from trafka.proxy.authz import Authorization
from trafka.proxy.filters import CloseConnection, FilterContext, ProxyServices, Session
from trafka.proxy.listeners import NamedListener
from trafka.proxy.tenants import Tenants
from trafka.sdk import NewTopic, open_admin, open_consumer, open_producer
from trafka.sdk.partitioners import murmur2_partition

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.compat("proxy", "virtual clusters (tenants) picked by listener"),
]

TENANTS = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "listeners": ["acme"], "principals": ["User:alice"]},
        {
            "name": "globex",
            "prefix": "globex.",
            "listeners": ["globex"],
            "principals": ["User:bob"],
        },
    ]
}
NAMES = ("acme", "globex")
LISTENERS = tuple(NamedListener(name, "127.0.0.1", 0) for name in NAMES)
PREFIXES = ("acme.", "globex.", "__")  # no tenant sees a prefix, nor an internal topic


def _check(tmp_path: Path, toml: str, *args: str, env: dict[str, str] | None = None) -> Any:
    from click.testing import CliRunner

    from trafka.proxy.cli import command

    path = tmp_path / "proxy.toml"
    path.write_text(toml)
    return CliRunner().invoke(command, ["--config", str(path), "--check-config", *args], env=env)


# -- the settings ---------------------------------------------------------------------------


def test_listeners_come_from_the_file_a_flag_or_the_environment(tmp_path: Path) -> None:
    """``[[listeners]]`` tables in the file (node ports from the listen port
    + 1 by default, as ``listen``'s; -1: free ports), ``NAME=HOST:PORT`` as a
    flag (repeated) or a variable (comma-separated); ``--check-config`` shows
    them; a change is refused by SIGHUP (restart only)."""
    from trafka.proxy.reload import Reloader, load
    from trafka.proxy.settings import Sources

    toml = (
        'upstream = "127.0.0.1:9092"\nlisten = "127.0.0.1:19092"\n'
        '[[listeners]]\nname = "acme"\nlisten = "0.0.0.0:19192"\n'
        'advertised_host = "acme.proxy.internal"\n'
        '[[listeners]]\nname = "globex"\nlisten = "127.0.0.1:19292"\nnode_port_base = -1\n'
    )
    result = _check(tmp_path, toml)
    assert result.exit_code == 0, result.output
    assert "listeners = acme on 0.0.0.0:19192, globex on 127.0.0.1:19292" in result.output
    loaded = load(Sources(path=str(tmp_path / "proxy.toml")))
    acme, globex = loaded.config.listeners
    assert acme == NamedListener("acme", "0.0.0.0", 19192, 19193, "acme.proxy.internal")
    assert (acme.node_port(2), globex.node_port(2)) == (19195, 0)

    flagged = _check(tmp_path, 'upstream = "h:1"\n', "--listeners", "a=127.0.0.1:7000")
    assert flagged.exit_code == 0 and "a on 127.0.0.1:7000" in flagged.output, flagged.output
    env = {"TRAFKA_PROXY_LISTENERS": "a=127.0.0.1:7000, b=127.0.0.1:0"}
    from_env = _check(tmp_path, 'upstream = "h:1"\n', env=env)
    assert "a on 127.0.0.1:7000, b on 127.0.0.1:0" in from_env.output, from_env.output
    bad = _check(tmp_path, 'upstream = "h:1"\n', "--listeners", "acme:7000")
    assert bad.exit_code == 1 and "'acme:7000' is not NAME=HOST:PORT" in bad.output

    (tmp_path / "proxy.toml").write_text(toml)
    sources = Sources(path=str(tmp_path / "proxy.toml"))
    reloader = Reloader(sources, loaded.values, (), None)
    (tmp_path / "proxy.toml").write_text(toml.replace("19292", "19392"))
    root, level = logging.getLogger(), logging.getLogger().level
    try:
        assert not reloader.reload()
    finally:
        root.setLevel(level)


def test_every_problem_of_the_listeners_is_named(tmp_path: Path) -> None:
    """``--check-config`` names every problem at once: a name twice, a port
    already the proxy's, a wildcard with no advertised host, an unknown key,
    an address that is not host:port, with SNI; the tenants filter naming a
    listener the proxy does not define; a listener in two tenants; with
    workers, a listener whose workers' broker ports overlap the proxy's. A
    start from code refuses the same."""
    toml = (
        'upstream = "127.0.0.1:9092"\nlisten = "127.0.0.1:19092"\nworkers = 2\n'
        '[[listeners]]\nname = "acme"\nlisten = "127.0.0.1:19092"\n'
        '[[listeners]]\nname = "acme"\nlisten = "0.0.0.0:19192"\nport = 3\n'
        '[[listeners]]\nname = "b"\nlisten = "nowhere"\n'
        '[[filter]]\nuse = "trafka.proxy.tenants:Tenants"\n'
        '[[filter.settings.tenants]]\nname = "a"\nprefix = "a."\nlisteners = ["acme", "initech"]\n'
        '[[filter.settings.tenants]]\nname = "b"\nprefix = "b."\nlisteners = ["acme"]\n'
    )
    result = _check(tmp_path, toml)
    out = result.output
    assert result.exit_code == 1, out
    for said in (
        "listeners[1]: unknown key 'port' (name, listen, node_port_base, advertised_host)",
        "listeners[2]: listen 'nowhere' is not host:port",
        "listener 'acme': port 19092 is already the proxy's or a listener's",
        "listener 'acme': the name is already a listener's",
        "listener 'acme': listening on a wildcard address needs advertised_host",
        "tenants[1]: listener 'acme' is already in tenant 'a'",
    ):
        assert said in out, (said, out)
    # Two workers of 100 broker ports each: the proxy's 19093-19292, acme's from 19151.
    overlap = (
        'upstream = "127.0.0.1:9092"\nlisten = "127.0.0.1:19092"\nworkers = 2\n'
        '[[listeners]]\nname = "acme"\nlisten = "127.0.0.1:19150"\n'
    )
    out = _check(tmp_path, overlap).output
    assert (
        "the proxy and listener 'acme': the workers' node ports 19093-19292 and "
        "19151-19350 overlap" in out
    ), out
    unknown = (
        'upstream = "127.0.0.1:9092"\n[[listeners]]\nname = "acme"\nlisten = "127.0.0.1:0"\n'
        '[[filter]]\nuse = "trafka.proxy.tenants:Tenants"\n'
        '[[filter.settings.tenants]]\nname = "a"\nprefix = "a."\nlisteners = ["acme", "initech"]\n'
    )
    out = _check(tmp_path, unknown).output
    assert "tenants name listeners (initech) the proxy does not define (its listeners: acme)" in out
    assert (
        "SNI serves one port"
        in _check(
            tmp_path,
            'upstream = "h:1"\nssl_certfile = "' + __file__ + '"\nsni_domain = "k.test"\n'
            '[[listeners]]\nname = "a"\nlisten = "127.0.0.1:0"\n',
        ).output
    )

    tenants = Tenants()
    tenants.configure({"tenants": [{"name": "a", "prefix": "a.", "listeners": ["acme"]}]})
    from trafka.sdk import ConfigError

    with (
        pytest.raises(ConfigError, match=r"tenants name listeners \(acme\) the proxy does not"),
        proxy_in_thread(upstream=("127.0.0.1:1",), port=0, filters=(tenants,)),
    ):
        pass
    with pytest.raises(ValueError, match="'a': the name is already a listener's"):
        ProxyConfig(upstream=("h:1",), listeners=(NamedListener("a", "h", 1),) * 2)


def test_the_listener_picks_the_tenant_and_a_principal_must_agree() -> None:
    """A tenant's listener is its from the first request, no principal
    needed; a principal of another tenant closes the connection, naming both;
    a listener no tenant names leaves the choice to the principal (the
    operator made it, the client did not choose it), as the proxy's own port."""
    from trafka.codec.messages import k03_metadata as md

    tenants = Tenants()
    tenants.configure(TENANTS)
    request = md.MetadataRequest(topics=None)

    def ctx(listener: str | None, principal: str | None) -> FilterContext:
        session = Session(principal=principal, listener=listener)
        return FilterContext(ApiKey.METADATA, 12, 1, "c", ("127.0.0.1", 1), -1, session=session)

    for listener, principal in (
        ("acme", None),
        ("acme", "User:ANONYMOUS"),
        ("acme", "User:alice"),
        ("globex", "User:bob"),
        ("ops", "User:bob"),  # no tenant's listener: bob's principal picks
    ):
        assert tenants.on_request(ctx(listener, principal), request) is request
    with pytest.raises(
        CloseConnection,
        match="listener 'acme' is tenant 'acme''s but principal User:bob is tenant 'globex''s",
    ):
        tenants.on_request(ctx("acme", "User:bob"), request)
    with pytest.raises(CloseConnection, match="from a client with no principal: no tenant"):
        tenants.on_request(ctx("ops", None), request)
    assert [(s.labels, s.value) for s in tenants.samples()] == [
        ((("tenant", "acme"), ("outcome", "served")), 3),
        ((("tenant", "globex"), ("outcome", "served")), 2),
    ]


@pytest.mark.parametrize(
    ("key", "version"),
    [(ApiKey.PRODUCE, 11), (ApiKey.FETCH, 17), (ApiKey.SHARE_FETCH, 1)],
)
def test_leader_hints_name_the_listeners_ports(key: int, version: int) -> None:
    """KIP-951's leader hints (``node_endpoints``) in an answer address
    rewriting made name, on a listener's connection, that listener's port for
    each broker (its host too); a connection of the proxy's own port gets the
    frame as it came. The renaming follows the user's filters and precedes key
    routing, whose merged answers it renames too."""
    from trafka.proxy.assembly import filter_chain
    from trafka.proxy.rewrite import ListenerAddresses

    answer_type = protocol.api(key).response_type
    endpoint = answer_type.NodeEndpoint
    body = answer_type(
        node_endpoints=[endpoint(node_id=n, host="proxy", port=9093 + n) for n in (1, 2)]
    )
    frame = protocol.encode_response(5, key, version, body)[4:]
    asked: list[tuple[str, int]] = []

    def listen_on(name: str, node_id: int) -> tuple[str, int]:
        asked.append((name, node_id))
        return f"{name}.proxy", 19193 + node_id

    nothing = cast(Any, None)
    services = ProxyServices(*[nothing] * 10, listen_on)  # type: ignore[arg-type]
    renaming = ListenerAddresses()
    renaming.attach(services)
    assert renaming.answer_frames(key, version)

    def ctx(listener: str | None) -> FilterContext:
        return FilterContext(key, version, 5, "c", None, 1, session=Session(listener=listener))

    assert renaming.on_response_frame(ctx(None), frame) is frame
    _, renamed = protocol.decode_response(
        renaming.on_response_frame(ctx("acme"), frame), key, version
    )
    assert [(e.node_id, e.host, e.port) for e in renamed.node_endpoints] == [
        (1, "acme.proxy", 19194),
        (2, "acme.proxy", 19195),
    ]
    assert asked == [("acme", 1), ("acme", 2)]
    chain = filter_chain(ProxyConfig(upstream=("h:1",), listeners=LISTENERS, filters=(Tenants(),)))
    assert [type(f).__name__ for f in chain] == [
        "Tenants",
        "ListenerAddresses",
        "KeyRouting",
        "SaslPrincipals",
        "BrokerAddresses",
    ]


# -- through the proxy ------------------------------------------------------------------------


@pytest.fixture
def listeners_proxy(peer: Peer, tmp_path: Path) -> Iterator[tuple[RunningProxy, Path]]:
    """Two tenants, each on a listener of its own, plaintext; authorization
    (everything allowed) writing its audit log: routing (murmur2) in front of
    Kafka, forwarding in front of brokerlite."""
    tenants = Tenants()
    tenants.configure(TENANTS)
    audit = tmp_path / "audit.jsonl"
    authz = Authorization()
    authz.configure({"default": "allow", "audit": {"path": str(audit)}})
    with proxy_in_thread(
        upstream=(peer.bootstrap_servers,),
        port=0,
        listeners=LISTENERS,
        filters=(tenants, authz),
        route_keys="none" if peer.name == "brokerlite" else "murmur2",
    ) as px:
        yield px, audit


def _bootstrap(px: RunningProxy, name: str) -> str:
    host, port = px.listeners[name]
    return f"{host}:{port}"


def _plain_call(port: int, key: int, version: int, body: Any) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        return call(sock, key, version, body)


async def _as_tenant(px: RunningProxy, name: str, names: dict[str, str]) -> None:
    """Through ``name``'s listener: create, produce, consume and commit under
    ``names``; see only the tenant's own topics and group."""
    topic, group = names["topic"], names["group"]
    servers = _bootstrap(px, name)
    async with open_admin(bootstrap_servers=servers) as admin:
        # The same name for both tenants, and one of the tenant's own.
        await admin.create_topics([NewTopic(topic, 2, 1), NewTopic(f"{topic}-{name}", 1, 1)])
    async with open_producer(bootstrap_servers=servers) as producer:
        for i in range(10):
            await producer.send(topic, f"{name}-{i}".encode(), key=b"%d" % i)
        await producer.flush()
    async with open_consumer(
        topic, group_id=group, auto_offset_reset="earliest", bootstrap_servers=servers
    ) as consumer:
        got: list[bytes] = []
        while len(got) < 10:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got += [r.value for r in records]
        assert sorted(got) == sorted(f"{name}-{i}".encode() for i in range(10))
        await consumer.commit()
    async with open_admin(bootstrap_servers=servers) as admin:
        listed = await admin.list_topics()
        assert {topic, f"{topic}-{name}"} <= set(listed)
        groups = {g.group_id for g in await admin.list_groups()}
        assert group in groups
        ours = {topic, group, *(f"{topic}-{other}" for other in NAMES)}
        brokers = {p + n for p in PREFIXES for n in ours}
        shown = [n for n in (*listed, *groups) if n.startswith(PREFIXES)]
        assert not [n for n in shown if n.startswith("__") or n in brokers], shown


def _ports_named(px: RunningProxy, name: str, group: str) -> set[int]:
    """The broker ports Metadata, FindCoordinator and DescribeCluster name on
    the wire through ``name``'s bootstrap port, and then through one of its
    broker ports: the same, each broker once."""
    port = px.listeners[name][1]
    named: set[int] = set()
    for _ in range(2):
        meta = _plain_call(port, ApiKey.METADATA, 9, mm.MetadataRequest(topics=None))
        assert {b.host for b in meta.brokers} == {"127.0.0.1"}
        assert not [t.name for t in meta.topics if t.name.startswith(PREFIXES)]
        by_node = {b.node_id: b.port for b in meta.brokers}
        request = fc.FindCoordinatorRequest(key=group, key_type=0)
        coordinator = _plain_call(port, ApiKey.FIND_COORDINATOR, 3, request)
        # Kafka makes __consumer_offsets at the first FindCoordinator that needs
        # it (COORDINATOR_NOT_AVAILABLE, retriable, meanwhile): asked again, as
        # clients do (a test run alone on a fresh Kafka is the first).
        for _ in range(100):
            if coordinator.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                break
            time.sleep(0.2)
            coordinator = _plain_call(port, ApiKey.FIND_COORDINATOR, 3, request)
        assert coordinator.error_code == 0
        assert coordinator.port == by_node[coordinator.node_id]
        cluster = _plain_call(port, ApiKey.DESCRIBE_CLUSTER, 0, dc.DescribeClusterRequest())
        assert {b.broker_id: b.port for b in cluster.brokers} == by_node
        assert not named or set(by_node.values()) == named
        named = set(by_node.values())
        port = by_node[coordinator.node_id]  # again, through the broker's port of the listener
    return named


@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_two_tenants_each_through_its_own_listener(
    peer: Peer, listeners_proxy: tuple[RunningProxy, Path]
) -> None:
    """trafka's SDK as each tenant through its own port, sharing names, no
    login; on the wire, every answer naming brokers names the listener's own
    broker ports (none of the other listener's, nor of the proxy's own); a
    tenant does not see the other's topic, and names it in vain; the audit
    log names the listener of each connection."""
    px, audit = listeners_proxy
    names = {"topic": fresh("orders"), "group": fresh("g")}

    async def main() -> None:
        with anyio.fail_after(150):
            for name in NAMES:
                await _as_tenant(px, name, names)
            for name, other in (NAMES, NAMES[::-1]):
                async with open_admin(bootstrap_servers=_bootstrap(px, name)) as admin:
                    assert f"{names['topic']}-{other}" not in await admin.list_topics()
        async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
            listed = set(await admin.list_topics())
            assert {f"acme.{names['topic']}", f"globex.{names['topic']}"} <= listed
            assert names["topic"] not in listed

    anyio.run(main, backend="trio")
    for name, other in (NAMES, NAMES[::-1]):
        # The other's own topic, named through this listener: a topic that does not exist.
        theirs = mm.MetadataRequest.MetadataRequestTopic(name=f"{names['topic']}-{other}")
        request = mm.MetadataRequest(topics=[theirs], allow_auto_topic_creation=False)
        meta = _plain_call(px.listeners[name][1], ApiKey.METADATA, 9, request)
        assert [(t.name, t.error_code) for t in meta.topics] == [(theirs.name, 3)]
    acme, globex = (_ports_named(px, name, names["group"]) for name in NAMES)
    own = {port for _, port in px.statistics.nodes.values()}
    assert acme and globex and not acme & globex and not (acme | globex) & own
    assert not {px.listeners["acme"][1], px.listeners["globex"][1]} & (acme | globex)
    counted = px.statistics.filters["tenants"]
    assert counted[("acme", "served")] > 0 and counted[("globex", "served")] > 0
    opened = [json.loads(line) for line in audit.read_text().splitlines()]
    opened = [e for e in opened if e["event"] == "connection_open"]
    assert {e.get("listener") for e in opened} == {"acme", "globex"}, opened[:3]


def _every_client(
    px: RunningProxy, topic: str, tag: str
) -> dict[str, tuple[list[Report], list[bytes]]]:
    """Kafka's Java producer (4.4, one JVM) as acme, trafka's SDK and
    confluent-kafka as globex, each through its tenant's listener, plain,
    idempotent and in transactions (the Java producer's second aborted), 20
    records each to librdkafka's CRC32 partition of ``topic`` (both tenants'
    name): each tenant's delivery reports and values sent. The Java producer's
    transactional id is the one globex's SDK producer uses: each tenant's own."""
    for name in NAMES:
        create(_bootstrap(px, name), topic, 3, served=True)
    java = java_sends(java_producer(), _bootstrap(px, "acme"), topic, 20, "java", f"{tag}-sdk", {})
    ours = sdk_and_confluent_sends(_bootstrap(px, "globex"), topic, tag, 20, {}, {})
    return {"acme": java, "globex": ours}


@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_every_client_in_every_mode_through_the_listeners(
    peer: Peer, listeners_proxy: tuple[RunningProxy, Path]
) -> None:
    """confluent-kafka (librdkafka, idempotent) as each tenant through its
    own port, the same topic and group names: each produces, consumes and
    commits its own records, lists only its own topic and group, and its
    metadata names the brokers at its listener's ports. Then the client
    matrix (issue #83, "Done when"; tests/proxy/client_matrix.py): Kafka's
    Java producer as acme, trafka's SDK and confluent-kafka as globex, plain,
    idempotent and transactional, one topic name: a read_committed consumer
    through each listener reads its tenant's committed records once, each
    producer's keys in order, none of the other's, every delivery report where
    its record is; routed (Kafka), each key on its murmur2 partition; the
    broker holds them, and the transactional ids, under the tenant's prefix."""
    px, _ = listeners_proxy
    topic, group = fresh("ck-orders"), fresh("ck-g")
    script = Path(__file__).with_name("sni_tenants_client.py")
    ports = {name: _ports_named(px, name, group) for name in NAMES}  # on the wire
    for name in NAMES:
        args = [_bootstrap(px, name), topic, group, "-", f"{name}-ck", "20"]
        done = subprocess.run(
            [sys.executable, str(script), *args],
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout)
        assert sorted(out["read"]) == sorted(f"{name}-ck-{i}" for i in range(20))
        assert topic in out["topics"] and group in out["groups"]
        assert not [n for n in out["topics"] + out["groups"] if n.startswith(PREFIXES)]
        assert set(out["brokers"]) == {"127.0.0.1"}
        assert out["ports"] and set(out["ports"]) <= ports[name], (out["ports"], ports)

    matrix, tag = fresh("mx-orders"), fresh("mx")
    for name, (reports, sent) in _every_client(px, matrix, tag).items():
        records = read_committed(_bootstrap(px, name), matrix, 3, sent)
        once_in_order(by_partition(records, 3), sent, keys=KEYS)  # none of the other's
        assert misreported(records, reports) is None, misreported(records, reports)
        if peer.name != "brokerlite":
            assert [r for r in records if r.partition != murmur2_partition(r.key, 3)] == []
        straight = read_committed(peer.bootstrap_servers, f"{name}.{matrix}", 3, sent)
        assert sorted(r.value for r in straight) == sorted(sent)

    async def transactional_ids() -> set[str]:
        async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
            return {t.transactional_id for t in await admin.list_transactions()}

    ids = anyio.run(transactional_ids, backend="trio")
    mine = {f"{tag}-sdk", f"{tag}-ck"}
    assert {f"acme.{tag}-sdk", *(f"globex.{t}" for t in mine)} <= ids and not mine & ids


@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_a_tenant_cannot_name_the_others_resources_through_its_listener(
    peer: Peer, listeners_proxy: tuple[RunningProxy, Path]
) -> None:
    """Issue #83, "Done when": globex owns a topic, a group with committed
    offsets and a committed transaction, through its listener; acme, through
    its own, sends every API the tenants filter serves naming them as globex
    knows them, as the broker holds them (``globex.`` spelled out) and the
    topic by id (tests/proxy/tenant_probes.py): only errors Kafka gives for
    what does not exist, or empty answers, naming nothing of globex's; globex
    still reads its record and its offsets."""
    from tenant_probes import probe_every_api

    px, _ = listeners_proxy
    names = {"topic": fresh("secret"), "group": fresh("sg"), "txn": fresh("stx")}
    globex = _bootstrap(px, "globex")

    async def globex_owns() -> tuple[Any, dict[Any, Any]]:
        with anyio.fail_after(90):
            async with open_admin(bootstrap_servers=globex) as admin:
                await admin.create_topics([NewTopic(names["topic"], 1, 1)])
            async with open_producer(
                bootstrap_servers=globex, transactional_id=names["txn"]
            ) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send(names["topic"], b"globex's", key=b"k")
                await producer.commit_transaction()
            async with open_consumer(
                names["topic"],
                group_id=names["group"],
                auto_offset_reset="earliest",
                isolation_level="read_committed",
                bootstrap_servers=globex,
            ) as consumer:
                got: list[bytes] = []
                while not got:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in records]
                assert got == [b"globex's"]
                await consumer.commit()
            async with open_admin(bootstrap_servers=globex) as admin:
                offsets = await admin.list_consumer_group_offsets(names["group"])
            async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
                held = f"globex.{names['topic']}"
                return (await admin.describe_topics([held]))[held].topic_id, offsets

    topic_id, offsets = anyio.run(globex_owns, backend="trio")
    assert offsets
    with socket.create_connection(px.listeners["acme"], timeout=30) as sock:
        seen = probe_every_api(
            lambda key, version, body: call(sock, key, version, body),
            names=names,
            prefixed={k: f"globex.{v}" for k, v in names.items()},
            topic_id=topic_id,
            streams=peer.name != "brokerlite",
        )
    assert len(seen) >= 25, sorted(seen)

    async def globex_still_owns() -> None:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=globex) as admin:
                assert names["topic"] in await admin.list_topics()
                assert await admin.list_consumer_group_offsets(names["group"]) == offsets

    anyio.run(globex_still_owns, backend="trio")


def test_a_tenant_by_listener_has_its_quota(brokerlite_peer: str) -> None:
    """Quotas are the tenant's however it is picked: acme (by its listener,
    ``producer_byte_rate`` 100 B/s) producing a few hundred bytes is told to
    wait (KIP-219's ``throttle_time_ms``, the SDK's ``throttle_cb``) and
    loses nothing; its bytes are counted under its name."""
    tenants = Tenants()
    tenants.configure(
        {
            "tenants": [
                {
                    "name": "acme",
                    "prefix": "acme.",
                    "listeners": ["acme"],
                    "producer_byte_rate": 100,
                },
                {"name": "globex", "prefix": "globex.", "listeners": ["globex"]},
            ],
            "quota_window_num": 2,
            "quota_window_size_seconds": 1,
        }
    )
    topic, events = fresh("quota"), []

    async def main(px: RunningProxy) -> None:
        servers = _bootstrap(px, "acme")
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=servers) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            async with open_producer(bootstrap_servers=servers, throttle_cb=events.append) as p:
                await p.send_and_wait(topic, b"x" * 400)
            async with open_consumer(
                topic, group_id=topic, auto_offset_reset="earliest", bootstrap_servers=servers
            ) as consumer:
                got: list[bytes] = []
                while not got:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in records]
                assert got == [b"x" * 400]

    with proxy_in_thread(
        upstream=(brokerlite_peer,),
        port=0,
        listeners=LISTENERS,
        filters=(tenants,),
        route_keys="none",
    ) as px:
        anyio.run(main, px, backend="trio")
        counted = px.statistics.filters["tenant_quotas"]["bytes"]
    assert [e for e in events if e.throttle_time > 0], events
    assert counted[("acme", "produce")] > 400 and ("globex", "produce") not in counted


def test_a_listeners_broker_ports_follow_its_node_port_base(brokerlite_peer: str) -> None:
    """Broker n of a listener with ``node_port_base`` is served on that base +
    n (ports a firewall or a Kubernetes Service can list before the proxy
    starts), and Metadata on the listener names it there."""

    async def node_id() -> int:
        async with open_admin(bootstrap_servers=brokerlite_peer) as admin:
            return min(b.node_id for b in (await admin.describe_cluster()).brokers)

    node = anyio.run(node_id, backend="trio")
    wanted = free_port()
    acme = NamedListener("acme", "127.0.0.1", 0, wanted - node)
    with proxy_in_thread(upstream=(brokerlite_peer,), port=0, listeners=(acme,)) as px:
        request = mm.MetadataRequest(topics=[])
        meta = _plain_call(px.listeners["acme"][1], ApiKey.METADATA, 9, request)
        assert {b.node_id: b.port for b in meta.brokers} == {node: wanted}
        again = _plain_call(wanted, ApiKey.METADATA, 9, request)  # through that port
        assert {b.node_id: b.port for b in again.brokers} == {node: wanted}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The proxy's certificate for 127.0.0.1; bob's client certificate (CN bob)."""
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("listener-tenants")
    paths = {"ca": str(folder / "ca.pem"), "proxy": str(folder / "proxy.pem")}
    ca.cert_pem.write_to_path(paths["ca"])
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(paths["proxy"])
    leaf = ca.issue_cert("bob.clients.test", common_name="bob")
    paths["bob"] = str(folder / "bob.pem")
    leaf.private_key_and_cert_chain_pem.write_to_path(paths["bob"])
    return paths


def test_a_principal_of_another_tenant_on_a_listener_is_closed(
    brokerlite_peer: str, pki: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Over TLS (the listeners share the proxy's TLS settings), bob's
    certificate (tenant globex) is served on globex's listener and closed on
    acme's, logged naming both."""
    caplog.set_level(logging.INFO, logger="trafka.proxy")
    tenants = Tenants()
    tenants.configure(TENANTS)
    with proxy_in_thread(
        upstream=(brokerlite_peer,),
        port=0,
        listeners=LISTENERS,
        filters=(tenants,),
        ssl_certfile=pki["proxy"],
        ssl_cafile=pki["ca"],
        ssl_client_auth="requested",
        ssl_principal_mapping_rules="RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        route_keys="none",
    ) as px:
        context = ssl.create_default_context(cafile=pki["ca"])
        context.load_cert_chain(pki["bob"])

        def metadata(name: str) -> Any:
            with (
                socket.create_connection(px.listeners[name], timeout=30) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                return call(tls, ApiKey.METADATA, 9, mm.MetadataRequest(topics=[]))

        assert metadata("globex").brokers
        with pytest.raises(AssertionError, match="closed the connection"):
            metadata("acme")
    said = [r.getMessage() for r in caplog.records if r.name == "trafka.proxy"]
    assert (
        "closing a client connection: tenants: listener 'acme' is tenant 'acme''s but "
        "principal User:bob is tenant 'globex''s"
    ) in said, said


def _docs_example() -> str:
    """The TOML example of docs/proxy.md's "Picking tenants by listener"."""
    text = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = text.split("**Picking tenants by listener.**", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


def test_the_docs_example_runs(brokerlite_peer: str, tmp_path: Path) -> None:
    """docs/proxy.md's example, as a file (its upstream and addresses this
    test's, free ports): checked, then served to each tenant's client through
    its port; the broker holds the topics under the tenants' prefixes."""
    from trafka.proxy.reload import load
    from trafka.proxy.settings import Sources

    example = _docs_example()
    for port in ("19092", "19192", "19292"):
        assert f'"0.0.0.0:{port}"' in example
        example = example.replace(f'"0.0.0.0:{port}"', '"127.0.0.1:0"')
    assert 'advertised_host = "proxy.internal"\n' in example
    example = example.replace('advertised_host = "proxy.internal"\n', "")
    example = example.replace("kafka-1.internal:9092", brokerlite_peer)
    example = example.replace("node_port_base = 19193", "node_port_base = -1")
    example = example.replace("node_port_base = 19293", "node_port_base = -1")
    result = _check(tmp_path, example)
    assert result.exit_code == 0, result.output
    loaded = load(Sources(path=str(tmp_path / "proxy.toml")))
    topic = fresh("docs")

    async def main(px: RunningProxy) -> None:
        with anyio.fail_after(60):
            for name in NAMES:
                servers = _bootstrap(px, name)
                async with open_admin(bootstrap_servers=servers) as admin:
                    await admin.create_topics([NewTopic(topic, 1, 1)])
                async with open_producer(bootstrap_servers=servers) as producer:
                    await producer.send_and_wait(topic, name.encode())
            async with open_admin(bootstrap_servers=brokerlite_peer) as admin:
                assert {f"acme.{topic}", f"globex.{topic}"} <= set(await admin.list_topics())

    with proxy_in_thread(loaded.config) as px:
        anyio.run(main, px, backend="trio")
