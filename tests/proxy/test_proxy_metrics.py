"""The proxy's Prometheus endpoint, scraped with prometheus_client's own parser
while records flow through it; /healthz and /readyz."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from proxy_helpers import confluent_produce, create, fresh

from trafka.brokerlite.server import broker_in_thread
from trafka.proxy import proxy_in_thread


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_proxy_metrics_move_as_records_flow(tmp_path: Path) -> None:
    with (
        broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as broker,
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,), port=0, metrics_listen="127.0.0.1:0"
        ) as px,
    ):
        assert px.metrics_address is not None
        host, port = px.metrics_address
        base = f"http://{host}:{port}"
        assert status(base + "/healthz") == 200
        topic = fresh()
        create(px.bootstrap_servers, topic, 4)
        before = samples(base + "/metrics")
        confluent_produce(px.bootstrap_servers, topic, 400)  # CRC32 keys: most move
        after = samples(base + "/metrics")

        def grew(name: str, **labels: str) -> float:
            key = (name, tuple(sorted(labels.items())))
            return after.get(key, 0) - before.get(key, 0)

        moved = grew("trafka_proxy_records_routed_total", topic=topic, outcome="moved")
        kept = grew("trafka_proxy_records_routed_total", topic=topic, outcome="kept")
        assert moved > 0 and moved + kept == 400
        assert grew("trafka_proxy_requests_total", request="Produce") > 0
        assert grew("trafka_proxy_request_bytes_total", request="Produce") > 400 * 4
        assert grew("trafka_proxy_response_bytes_total", request="Metadata") > 0
        assert grew("trafka_proxy_upstream_request_seconds_count", broker="1") > 0
        assert after[("trafka_proxy_connections_open", ())] >= 0
        assert after[("trafka_proxy_connections_total", ())] > 0
        assert after[("trafka_proxy_upstream_connections_open", ())] >= 0
        assert after[("trafka_proxy_memory_pool_waiting", ())] >= 0
        # The default budget, 100 MiB: what is held and what is left make it up.
        pool = [after[(f"trafka_proxy_memory_pool_{m}_bytes", ())] for m in ("used", "available")]
        assert sum(pool) == 104_857_600
        assert ("trafka_proxy_errors_total", (("kind", "too_large"),)) in after
        # The upstream answers connections: ready (the first probe runs at start).
        assert status(base + "/readyz") == 200
        assert status(base + "/nothing") == 404


def test_readyz_says_when_no_upstream_is_reachable(tmp_path: Path) -> None:
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]  # closed again: nothing listens there
    with proxy_in_thread(
        upstream=(f"127.0.0.1:{dead}",), port=0, metrics_listen="127.0.0.1:0"
    ) as px:
        assert px.metrics_address is not None
        host, port = px.metrics_address
        base = f"http://{host}:{port}"
        assert status(base + "/healthz") == 200
        assert status(base + "/readyz") == 503
