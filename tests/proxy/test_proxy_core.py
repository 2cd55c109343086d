"""The proxy as a core plus filters (issue #65): the core (listeners, per-client
pumps, the filter chain, the pool and what they share) knows no filter by
type, and a filter written by a user can do what key routing does through the
public filter API alone: requests of its own over the proxy's pool, one answer
merged from several upstream answers and given later, counters shown in the
proxy's statistics and metrics.

The rules checked are the proxy's own (docs/proxy.md, "Filters"); what the
client is told is checked against Kafka's Produce contract: a delivery report
names the offset its record has in the partition it names (the ProduceResponse
base offset, KIP-98's and the protocol guide's meaning), read back from the
broker.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import logging
import pkgutil
import socket
import urllib.request
from pathlib import Path
from typing import Any

import trio
from proxy_helpers import (
    call,
    create,
    free_port,
    fresh,
    kafka_python_reports,
    misreported,
    placement,
    wait_until,
)

import trafka.proxy
from trafka.brokerlite import RunningBroker
from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k03_metadata as mm
from trafka.proxy import (
    Filter,
    FilterContext,
    KeyRouting,
    ProxyConfig,
    ProxyServices,
    RespondLater,
    Sample,
    proxy_in_thread,
)
from trafka.proxy.assembly import filter_chain
from trafka.proxy.principals import SaslPrincipals
from trafka.proxy.rewrite import BrokerAddresses

PROXY = Path(trafka.proxy.__file__).parent
# The core: what serves any chain. Kept in step with the import contract of the
# same name in pyproject.toml (which also checks imports made through others).
CORE = ("server", "pool", "topics", "filters", "metrics", "config", "startup")


def _filter_classes() -> dict[str, type[Filter]]:
    """Every filter class the proxy package defines, by name."""
    found: dict[str, type[Filter]] = {}
    for info in pkgutil.walk_packages([str(PROXY)], "trafka.proxy."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Filter)
                and value is not Filter
                and value.__module__ == module.__name__
            ):
                found[value.__name__] = value
    return found


def _imported(path: Path, tree: ast.AST) -> set[str]:
    """The absolute names of every module ``path`` imports, wherever (function
    level and TYPE_CHECKING blocks included), with what they import from them."""
    package = "trafka." + ".".join(path.relative_to(PROXY.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def _knowing(path: Path, filters: dict[str, type[Filter]]) -> list[str]:
    """Where ``path`` knows a filter: imports a filter's module, names a filter
    class in ``isinstance``/``issubclass``, or builds one."""
    tree = ast.parse(path.read_text())
    modules = {c.__module__ for c in filters.values()}
    packages = {m.rpartition(".")[0] for m in modules} - {"trafka.proxy"}
    problems = [
        f"imports {name}"
        for name in sorted(_imported(path, tree))
        if name in modules or any(name == p or name.startswith(p + ".") for p in packages)
    ]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called in ("isinstance", "issubclass") and len(node.args) == 2:
            named = [
                n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)
                for n in ast.walk(node.args[1])
            ]
            problems += [f"line {node.lineno}: {called}(..., {n})" for n in named if n in filters]
        elif called in filters:
            problems.append(f"line {node.lineno}: builds {called}")
    return problems


def test_the_core_knows_no_filter_by_type() -> None:
    """No core module imports a filter's module (any import, function level
    included), tests a value against a filter class, or builds a filter; the
    chain is assembled above the core (trafka.proxy.assembly), which does, so
    the check has something to find."""
    filters = _filter_classes()
    assert {"KeyRouting", "SchemaValidation", "BrokerAddresses", "SaslPrincipals"} <= set(filters)
    for name in CORE:
        assert _knowing(PROXY / f"{name}.py", filters) == [], name
    assembly = _knowing(PROXY / "assembly.py", filters)
    assert any("isinstance(..., KeyRouting)" in p for p in assembly), assembly
    assert any("builds KeyRouting" in p for p in assembly), assembly


# What address rewriting and the SASL watch are made of (proxy/rewrite.py,
# proxy/principals.py): names the core must not use.
_REWRITING_AND_SASL = {
    "Addresses",
    "Pending",
    "reads_answer",
    "rewrite_addresses",
    "rewrite_response",
    "rewritten",
    "unsupported_api_versions",
    "SaslRouting",
    "SaslClient",
    "SaslWatch",
    "PrincipalPools",
    "load_credentials",
    "replace",  # dataclasses.replace: a body rewritten
}
# The APIs the core names, each for a rule of its own: Produce (acks=0 is never
# answered), ApiVersions (the client software name, KIP-511), Metadata (its own
# requests: the listeners opened at start, the refreshes filters ask for).
_CORE_APIS = {"PRODUCE", "API_VERSIONS", "METADATA"}


def _rewrites_or_watches(tree: ast.AST) -> list[str]:
    """Where a module does address rewriting or SASL watching itself: names
    their pieces, or an API the core has no rule of its own for."""
    found = []
    for node in ast.walk(tree):
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if isinstance(node, ast.Attribute | ast.Name) and name in _REWRITING_AND_SASL:
            found.append(f"line {node.lineno}: {name}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "ApiKey"
            and node.attr not in _CORE_APIS
        ):
            found.append(f"line {node.lineno}: ApiKey.{node.attr}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "SASL" in node.value:
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


def test_the_core_does_no_rewriting_or_sasl_watching_of_its_own() -> None:
    """Address rewriting and the SASL watch are filters (issue #65): the core
    (server.py, what serves any chain) names none of their pieces, no API but
    the three it has rules of its own for, and rewrites no body. The same
    check finds them in the filters that do this work, so it can fail."""
    server = ast.parse((PROXY / "server.py").read_text())
    assert _rewrites_or_watches(server) == []
    for name in ("rewrite", "principals"):
        assert _rewrites_or_watches(ast.parse((PROXY / f"{name}.py").read_text())), name


def test_api_keys_are_named_by_the_codecs_enum() -> None:
    """No proxy module defines an API key of its own (``PRODUCE = 0``): each
    names ``trafka.codec.ApiKey``'s member (issue #65). The check finds such a
    definition where one is written."""
    names = {k.name for k in ApiKey}

    def own(tree: ast.AST) -> list[str]:
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name) and n.id.lstrip("_") in names:
                            found.append(f"line {node.lineno}: {n.id}")
        return found

    assert own(ast.parse("PRODUCE, METADATA = 0, 3")) == ["line 1: PRODUCE", "line 1: METADATA"]
    for path in sorted(PROXY.rglob("*.py")):
        assert own(ast.parse(path.read_text())) == [], path


def test_the_chain_is_the_users_then_key_routing() -> None:
    """ProxyConfig's documented chain: the user's filters in their order, then key
    routing unless route_keys is none or the user placed it themselves, then
    the SASL watch and address rewriting, nearest the brokers."""
    mine = Filter()
    chain = filter_chain(ProxyConfig(upstream=("127.0.0.1:9092",), filters=(mine,)))
    assert chain[0] is mine and isinstance(chain[1], KeyRouting) and len(chain) == 4
    assert chain[1].hash_name == "murmur2"
    assert [type(f) for f in chain[2:]] == [SaslPrincipals, BrokerAddresses]
    none = ProxyConfig(upstream=("127.0.0.1:9092",), filters=(mine,), route_keys="none")
    assert filter_chain(none)[:-2] == (mine,)
    placed = KeyRouting("crc32")
    users = ProxyConfig(upstream=("127.0.0.1:9092",), filters=(placed, mine))
    assert filter_chain(users)[:-2] == (placed, mine)


@dataclasses.dataclass
class FanOutStats:
    requests: int = 0
    upstream_requests: int = 0


class FanOut(Filter):
    """A user's filter doing what key routing does, through the public API
    only: each Produce (acks 1 or -1) goes out as one request per partition, its
    own, over the proxy's pool to the partition's leader as the proxy learned it;
    the client gets one answer, merged from theirs, later. Per connection it
    counts its requests in ``ctx.state``; its counters reach the proxy's
    statistics and metrics through ``statistics()`` and ``samples()``."""

    api_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self) -> None:
        self.stats = FanOutStats()
        self.per_connection: list[int] = []

    def attach(self, services: ProxyServices) -> None:
        self.services = services

    def statistics(self) -> dict[str, Any]:
        return {"fan_out": self.stats}

    def samples(self) -> list[Sample]:
        return [
            Sample(
                "test_fan_out_upstream_requests", "Parts sent.", (), self.stats.upstream_requests
            )
        ]

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        services, version = self.services, ctx.api_version
        parts = [(t, p) for t in body.topic_data for p in t.partition_data]
        leaders = [services.topics.leader(t.name, p.index) for t, p in parts]
        if body.acks == 0 or len(parts) < 2 or -1 in leaders:
            return body
        ctx.state["fanned"] = ctx.state.get("fanned", 0) + 1
        self.stats.requests += 1
        waiters = []
        for (t, p), leader in zip(parts, leaders, strict=True):
            one = dataclasses.replace(body, topic_data=[dataclasses.replace(t, partition_data=[p])])
            waiters.append(
                await services.pool.send(leader, ctx.client_id, ApiKey.PRODUCE, version, one)
            )
            self.stats.upstream_requests += 1
        deadline = trio.current_time() + body.timeout_ms / 1000 + 10

        async def answer() -> Any:
            merged: dict[str, list[Any]] = {}
            first = None
            for waiter in waiters:
                frame = await services.pool.wait(waiter, deadline)
                _, got = protocol.decode_response(frame, ApiKey.PRODUCE, version)
                first = first or got
                for topic in got.responses:
                    merged.setdefault(topic.name, []).extend(topic.partition_responses)
            self.per_connection.append(ctx.state["fanned"])
            responses = [
                pm.ProduceResponse.TopicProduceResponse(name=n, partition_responses=ps)
                for n, ps in merged.items()
            ]
            out = dataclasses.replace(first, responses=responses)
            return services.from_upstream(ApiKey.PRODUCE, version, out)

        return RespondLater(answer)


def test_a_users_filter_does_what_key_routing_does(broker: RunningBroker) -> None:
    """kafka-python produces keyed records over four partitions through a proxy
    whose only filter is FanOut (key routing off): its requests are answered by
    FanOut from its own upstream requests, and every delivery report names the
    offset its record has in the partition it names (read back from the
    broker). FanOut's counters are the proxy's ``statistics.filters`` and its
    sample is in ``/metrics``."""
    topic = fresh("fanout")
    create(broker.bootstrap_servers, topic, 4)
    fan_out = FanOut()
    sends = [(b"v%d" % i, b"k%d" % (i % 17)) for i in range(400)]
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,),
        port=0,
        route_keys="none",
        filters=(fan_out,),
        metrics_listen="127.0.0.1:0",
    ) as px:
        reports = kafka_python_reports(px.bootstrap_servers, topic, sends, acks="all")
        assert px.statistics.filters["fan_out"] is fan_out.stats
        assert px.statistics.routing is None  # no key routing in this chain
        assert px.metrics_address is not None
        host, port = px.metrics_address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as page:
            text = page.read().decode()
    assert fan_out.stats.requests > 0
    assert fan_out.stats.upstream_requests >= 2 * fan_out.stats.requests
    assert fan_out.per_connection and max(fan_out.per_connection) >= 1
    line = f"test_fan_out_upstream_requests_total {float(fan_out.stats.upstream_requests)}"
    assert line in text
    records = placement(broker.bootstrap_servers, topic, 4)
    assert sorted(r.value for r in records) == sorted(v for v, _ in sends)
    assert misreported(records, reports) is None
    assert all(o is not None and o >= 0 for _, _, o in reports)


def test_known_brokers_listeners_open_before_any_client_speaks(broker: RunningBroker) -> None:
    """``node_ports`` (the ports a restarted worker served): the proxy asks an
    upstream bootstrap server itself (one Metadata, framed and matched by the
    connection core) and opens each broker's listener on its port at start, so
    a client that comes back there first is served, before any client's
    Metadata has named the broker."""
    node_id, port = broker.config.node_id, free_port()
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, node_ports=((node_id, port),)
    ) as px:
        wait_until(lambda: node_id in px.statistics.nodes)  # no client has connected yet
        assert px.statistics.nodes == {node_id: (px.address[0], port)}
        assert px.statistics.connections == 0
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            answer = call(sock, ApiKey.METADATA, 9, mm.MetadataRequest(topics=[]))
        assert [(b.node_id, b.port) for b in answer.brokers] == [(node_id, port)]


def test_a_silent_bootstrap_server_bounds_the_known_listeners_probe(caplog: Any) -> None:
    """A bootstrap server that takes the connection and never answers: the
    probe gives up after ``connect_timeout`` and says so: the listeners will
    open at a client's first Metadata instead."""
    caplog.set_level(logging.WARNING, logger="trafka.proxy")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes connections; nothing reads or answers
        upstream = f"127.0.0.1:{silent.getsockname()[1]}"
        with proxy_in_thread(
            upstream=(upstream,), port=0, node_ports=((1, free_port()),), connect_timeout=0.2
        ) as px:
            said = "the brokers' listeners open at first Metadata"
            wait_until(lambda: any(said in r.getMessage() for r in caplog.records))
            assert px.statistics.nodes == {}
