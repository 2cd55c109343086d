"""Zeroconf discovery over real multicast DNS: brokerlite and the proxy announce
themselves, and trafka, confluent-kafka and kcat clients bootstrap from what
trafka's discovery finds.

Every test uses its own cluster id (or instance name) as its filter, so that
other brokers announced on the network, by a parallel test run say, never
answer for it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
import trio

from trafka.brokerlite import BrokerConfig, broker_in_thread, serve_broker
from trafka.discovery import (
    Announcement,
    DiscoveryError,
    DiscoverySpec,
    announcing,
    discover,
    discover_blocking,
    instance_name,
    local_host_name,
)
from trafka.proxy import proxy_in_thread
from trafka.sdk import open_admin, open_producer
from trafka.sdk.errors import ApiTimeoutError, ProducerBlockedError

KCAT = shutil.which("kcat")
CLI = (sys.executable, "-m", "trafka.tools.cli")
FIND = 10_000  # ms a test waits for an announcement (mDNS probing alone takes ~1.5 s)


def fresh_cluster() -> str:
    return f"zc-{uuid.uuid4().hex[:16]}"


def broker_config(tmp_path: Path, cluster: str, **overrides: Any) -> BrokerConfig:
    return BrokerConfig(
        port=0,
        data_dir=tmp_path / "data",
        cluster_id=cluster,
        announce=True,
        group_initial_rebalance_delay_ms=0,
        **overrides,
    )


def produce(servers: str, topic: str, values: list[bytes], **settings: Any) -> list[Any]:
    async def go() -> list[Any]:
        with trio.fail_after(60):
            async with open_producer(bootstrap_servers=servers, **settings) as producer:
                return [await producer.send_and_wait(topic, v) for v in values]

    result: list[Any] = anyio.run(go, backend="trio")
    return result


def test_an_announced_broker_is_found_with_its_identity_and_withdrawn_when_it_stops(
    tmp_path: Path,
) -> None:
    cluster = fresh_cluster()
    with broker_in_thread(broker_config(tmp_path, cluster, node_id=7)) as running:
        found = discover_blocking(f"zeroconf:cluster={cluster}&timeout_ms={FIND}", first=True)
        assert len(found) == 1
        service = found[0]
        assert service.name == instance_name("broker", 7, local_host_name(), running.address[1])
        assert (service.role, service.cluster_id, service.node_id) == ("broker", cluster, 7)
        assert service.port == running.address[1]
        assert service.addresses == ("127.0.0.1",)
        assert service.security_protocol == "PLAINTEXT"
        assert service.host == local_host_name() and service.version
        assert service.bootstrap_servers == running.bootstrap_servers
    # Closing sent goodbyes: a fresh browser does not see it any more.
    assert discover_blocking(DiscoverySpec(cluster_id=cluster, timeout_ms=1_500)) == []


def test_trafka_and_confluent_kafka_bootstrap_from_zeroconf(tmp_path: Path) -> None:
    cluster = fresh_cluster()
    spec = f"zeroconf:cluster={cluster}&role=broker&timeout_ms={FIND}"
    with broker_in_thread(broker_config(tmp_path, cluster)):
        sent = produce(spec, "zc-topic", [b"a", b"b", b"c"])
        assert [m.offset for m in sent] == [0, 1, 2]
        servers = discover_blocking(spec, first=True)[0].bootstrap_servers
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": servers, "group.id": "zc", "auto.offset.reset": "earliest"}
        )
        try:
            consumer.subscribe(["zc-topic"])
            got = [m.value() for m in consumer.consume(3, timeout=30)]
        finally:
            consumer.close()
        assert got == [b"a", b"b", b"c"]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_reads_a_broker_found_by_trafka_discover(tmp_path: Path) -> None:
    cluster = fresh_cluster()
    with broker_in_thread(broker_config(tmp_path, cluster)) as running:
        produce(running.bootstrap_servers, "zc-kcat", [b"one", b"two"])
        found = subprocess.run(
            [*CLI, "discover", "--cluster", cluster, "--first", "--bootstrap", "--timeout", "10"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert found.returncode == 0, found.stderr
        assert found.stdout.strip() == running.bootstrap_servers
        out = subprocess.run(
            [str(KCAT), "-b", found.stdout.strip(), "-C", "-t", "zc-kcat", "-e", "-q"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.stdout.split() == ["one", "two"]


def test_a_client_finds_its_broker_again_after_the_broker_moves(tmp_path: Path) -> None:
    """The broker restarts on another port: every known address fails, so the
    client looks again and carries on without being told."""
    cluster = fresh_cluster()
    config = broker_config(tmp_path, cluster)
    ports = []

    stopped = trio.Event()

    async def serve(stop: trio.Event, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with serve_broker(config) as running:
            ports.append(running.address[1])
            task_status.started()
            await stop.wait()
        stopped.set()  # closed: its data directory is free for the next

    async def go() -> list[int]:
        offsets = []
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                first = trio.Event()
                await nursery.start(serve, first)
                async with open_producer(
                    bootstrap_servers=f"zeroconf:cluster={cluster}&timeout_ms={FIND}",
                    reconnect_backoff_max_ms=200,
                ) as producer:
                    offsets.append((await producer.send_and_wait("moving", b"1")).offset)
                    first.set()  # the broker stops ...
                    await stopped.wait()
                    await nursery.start(serve, trio.Event())  # ... and comes back elsewhere
                    offsets.append((await producer.send_and_wait("moving", b"2")).offset)
                nursery.cancel_scope.cancel()
        return offsets

    assert anyio.run(go, backend="trio") == [0, 1]
    assert len(set(ports)) == 2


def test_a_spec_that_finds_nothing_fails_with_the_reason(tmp_path: Path) -> None:
    cluster = fresh_cluster()

    async def go() -> None:
        async with open_admin(
            bootstrap_servers=f"zeroconf:cluster={cluster}&timeout_ms=300",
            default_api_timeout_ms=2_000,
        ) as admin:
            await admin.list_topics()

    # The admin call retries (the cluster may yet appear) until its deadline, and
    # says why it failed.
    with pytest.raises(ApiTimeoutError, match=rf"found no PLAINTEXT .*cluster {cluster}"):
        anyio.run(go, backend="trio")


def test_clients_pick_only_listeners_that_speak_their_security_protocol(tmp_path: Path) -> None:
    cluster = fresh_cluster()
    config = broker_config(
        tmp_path, cluster, security_protocol="SASL_PLAINTEXT", sasl_users=("zc:secret",)
    )
    with broker_in_thread(config) as running:
        found = discover_blocking(f"zeroconf:cluster={cluster}&timeout_ms={FIND}", first=True)
        assert found[0].security_protocol == "SASL_PLAINTEXT"
        assert set(found[0].sasl_mechanisms) == set(running.config.sasl_enabled_mechanisms)
        # A send waits max.block.ms for metadata, then names the reason.
        with pytest.raises(ProducerBlockedError, match=r"max.block.ms .*found no PLAINTEXT"):
            produce(
                f"zeroconf:cluster={cluster}&timeout_ms=500", "zc-sasl", [b"x"], max_block_ms=2_000
            )
        sent = produce(
            f"zeroconf:cluster={cluster}&timeout_ms={FIND}",
            "zc-sasl",
            [b"x"],
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_username="zc",
            sasl_password="secret",
        )
        assert sent[0].offset == 0


def test_the_proxy_finds_its_cluster_and_announces_itself(tmp_path: Path) -> None:
    cluster = fresh_cluster()
    with (
        broker_in_thread(broker_config(tmp_path, cluster)) as broker,
        proxy_in_thread(
            upstream=(f"zeroconf:cluster={cluster}&timeout_ms={FIND}",),
            port=0,
            announce=True,
        ) as proxy,
    ):
        name = instance_name("proxy", None, local_host_name(), proxy.address[1])
        found = discover_blocking(f"zeroconf:role=proxy&name={name}&timeout_ms={FIND}", first=True)
        assert [(s.role, s.port, s.addresses) for s in found] == [
            ("proxy", proxy.address[1], ("127.0.0.1",))
        ]
        # A proxy cannot know whether the brokers behind it want SASL: it does not say.
        assert "security_protocol" not in found[0].properties
        sent = produce(f"zeroconf:name={name}&timeout_ms={FIND}", "zc-proxied", [b"p"])
        assert sent[0].offset == 0
        assert proxy.statistics.connections > 0
        # The client was sent to the proxy's own listener for broker 1.
        assert set(proxy.statistics.nodes) == {1}
        assert proxy.statistics.nodes[1] != broker.address


def test_the_proxy_refuses_to_start_when_zeroconf_finds_no_upstream() -> None:
    with (
        pytest.raises(ValueError, match="zeroconf found no broker"),
        proxy_in_thread(upstream=(f"zeroconf:cluster={fresh_cluster()}&timeout_ms=300",), port=0),
    ):
        pass


def test_a_service_announced_by_another_program_is_usable(tmp_path: Path) -> None:
    """A Kafka listener announced without trafka's TXT entries (as by a plain
    mDNS responder) is listed with what is known."""
    from zeroconf import ServiceInfo, Zeroconf

    with broker_in_thread(port=0, data_dir=tmp_path / "data") as running:
        name = f"kafka-{uuid.uuid4().hex[:12]}"
        zc = Zeroconf()
        try:
            zc.register_service(
                ServiceInfo(
                    "_kafka._tcp.local.",
                    f"{name}._kafka._tcp.local.",
                    port=running.address[1],
                    addresses=[socket.inet_aton("192.0.2.99"), socket.inet_aton("127.0.0.1")],
                    server="elsewhere.local.",
                )
            )
            found = discover_blocking(f"zeroconf:name={name}&timeout_ms={FIND}", first=True)
            assert len(found) == 1 and found[0].role is None and found[0].cluster_id is None
            # Loopback from an announcer that does not name its host is not trusted.
            assert found[0].addresses == ("192.0.2.99",)
        finally:
            zc.close()


def test_a_broker_that_cannot_announce_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trafka.discovery import _mdns

    def no_multicast() -> Any:
        raise DiscoveryError("multicast DNS is unavailable: no interface")

    monkeypatch.setattr(_mdns, "_open_zeroconf", no_multicast)
    with (
        caplog.at_level(logging.WARNING, logger="trafka.discovery"),
        broker_in_thread(broker_config(tmp_path, fresh_cluster())) as running,
    ):
        assert produce(running.bootstrap_servers, "zc-quiet", [b"q"])[0].offset == 0
    assert "not announcing" in caplog.text and "no interface" in caplog.text
    with pytest.raises(DiscoveryError, match="no interface"):
        discover_blocking(DiscoverySpec(timeout_ms=100))


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_announcing_from_async_code_and_cancelling_a_browse(backend: str) -> None:
    name = f"zc-async-{uuid.uuid4().hex[:12]}"

    async def go() -> tuple[list[Any], list[Any]]:
        announcement = Announcement(name, 4242, ("192.0.2.42",), {"role": "broker"})
        with anyio.fail_after(30):
            async with announcing(announcement) as announcer:
                found = await discover(DiscoverySpec(name=name, timeout_ms=FIND), first=True)
                assert await anyio.to_thread.run_sync(announcer.wait_announced, 10.0)
                assert announcer.names == [name]
            # A browse cancelled from outside stops at once instead of running its timeout.
            with anyio.move_on_after(0.3) as scope:
                await discover(DiscoverySpec(name="never", timeout_ms=60_000))
            assert scope.cancelled_caught
        return found, announcer.errors

    found, errors = anyio.run(go, backend=backend)
    assert [(s.name, s.port, s.addresses) for s in found] == [(name, 4242, ("192.0.2.42",))]
    assert errors == []


@pytest.mark.slow
def test_the_broker_command_announces_unless_told_not_to(tmp_path: Path) -> None:
    def discover_cli(cluster: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, "discover", "--cluster", cluster, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    for announce in (True, False):
        cluster = fresh_cluster()
        props = tmp_path / f"server-{announce}.properties"
        props.write_text(f"cluster.id={cluster}\n")
        args = ["broker", "--listen", "127.0.0.1:0", "--config", str(props)]
        args += ["--data-dir", str(tmp_path / f"data-{announce}")]
        if announce:
            args.append("--announce")
        proc = subprocess.Popen(
            [sys.executable, "-m", "trafka.tools.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "ready on" in line:
                    port = line.split("ready on 127.0.0.1:")[1].split()[0]
                    break
            # The cluster id is fresh, so the broker is the one service to find:
            # --first returns as soon as it answers (8 s is a hang guard), where
            # a plain search would wait out the whole timeout.
            args = ["--first", "--timeout", "8"] if announce else ["--timeout", "1.5"]
            result = discover_cli(cluster, *args)
            if announce:
                assert result.returncode == 0, result.stderr
                header, row = result.stdout.splitlines()
                assert header.split()[:3] == ["NAME", "ROLE", "CLUSTER"]
                assert f"127.0.0.1:{port}" in row and cluster in row and "broker" in row
            else:
                assert result.returncode == 1
                assert f"no Kafka service found (cluster {cluster})" in result.stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_the_command_line_clients_take_a_zeroconf_bootstrap(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from trafka.tools.cli import main

    cluster = fresh_cluster()
    spec = f"zeroconf:cluster={cluster}&timeout_ms={FIND}"
    with broker_in_thread(broker_config(tmp_path, cluster)):
        runner = CliRunner()
        res = runner.invoke(main, ["produce", "zc-cli", "-b", spec], input=b"first\nsecond\n")
        assert res.exit_code == 0, res.output
        res = runner.invoke(main, ["consume", "zc-cli", "-e", "-q", "-b", spec])
        assert res.exit_code == 0, res.output
        assert res.output.split() == ["first", "second"]
    res = CliRunner().invoke(main, ["topics", "list", "-b", f"zeroconf:cluster={cluster}"])
    assert res.exit_code != 0
    assert f"found no PLAINTEXT Kafka service (cluster {cluster})" in res.output
