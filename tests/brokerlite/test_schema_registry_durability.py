"""brokerlite's Schema Registry keeps its schemas in the ``_schemas`` topic: it
survives a restart and a kill -9 of the broker, and every node of a cluster
serves the same registry.

Through confluent-kafka's ``SchemaRegistryClient``. What is checked is the
registry's contract (Confluent's API reference,
https://docs.confluent.io/platform/current/schema-registry/develop/api.html):
a registered schema keeps its id and version, ids are unique across the
registry and are never reused, and every instance answers alike. Every wait is
bounded; nothing is timed.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

pytest.importorskip("fastavro")
pytest.importorskip("jsonschema")

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from trafka.brokerlite.dev.local_cluster import serve_cluster
from trafka.brokerlite.server import broker_in_thread
from trafka.sdk.admin import open_admin

WAIT_S = 90.0
_T = TypeVar("_T")


def avro(name: str, *fields: str) -> Schema:
    return Schema(
        json.dumps({"type": "record", "name": name,
                    "fields": [{"name": f, "type": "string", "default": ""} for f in fields]}),
        "AVRO",
    )  # fmt: skip


def state_of(sr: SchemaRegistryClient) -> dict[str, list[tuple[int, int, str]]]:
    """Every subject's versions as (version, id, schema), read afresh."""
    out = {}
    for name in sr.get_subjects():
        rows = []
        for number in sr.get_versions(name):
            found = sr.get_version(name, number)
            rows.append((found.version, found.schema_id, found.schema.schema_str))
        out[name] = rows
    return out


def wait_for(what: str, probe: Callable[[], _T | None], timeout: float = WAIT_S) -> _T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = probe()
        except Exception:
            found = None
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.compat("Schema Registry", "kept in _schemas: restart, kill -9, a two-node cluster")
def test_schemas_survive_a_restart(tmp_path: Path) -> None:
    """Registered, soft-deleted and configured state is read back from the topic
    by a restarted broker; the next id follows the highest ever given."""
    settings = {"port": 0, "host": "127.0.0.1", "data_dir": tmp_path,
                "schema_registry_listen": "127.0.0.1:0"}  # fmt: skip
    with broker_in_thread(**settings) as running:
        host, port = running.schema_registry_address or ("", 0)
        with SchemaRegistryClient({"url": f"http://{host}:{port}"}) as sr:
            first = sr.register_schema("a-value", avro("A", "x"))
            sr.register_schema("a-value", avro("A", "x", "y"))
            sr.register_schema("b-value", avro("B", "z"))
            sr.delete_version("a-value", 1)
            sr.set_compatibility("b-value", "FULL")
            dropped = sr.register_schema("c-value", avro("C", "w"))
            sr.delete_subject("c-value")
            sr.delete_subject("c-value", permanent=True)
            before = state_of(sr)
    with broker_in_thread(**settings) as running:
        host, port = running.schema_registry_address or ("", 0)
        with SchemaRegistryClient({"url": f"http://{host}:{port}"}) as sr:
            assert state_of(sr) == before
            assert sr.get_versions("a-value") == [2]
            assert (
                sr.get_schema(first).schema_str is not None
            )  # still used by version 1 (soft-deleted)
            assert sr.get_compatibility("b-value") == "FULL"
            assert sr.register_schema("d-value", avro("D", "v")) > dropped


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(data: Path, port: int, registry_port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "trafka.tools.cli", "broker", "--no-announce",
         "--listen", f"127.0.0.1:{port}", "--data-dir", str(data),
         "--schema-registry-listen", f"127.0.0.1:{registry_port}"],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.compat("Schema Registry", "kept in _schemas: restart, kill -9, a two-node cluster")
def test_schemas_survive_kill_9_of_the_broker(tmp_path: Path) -> None:
    """A broker process killed with SIGKILL after its registry answered keeps
    every schema it acknowledged; ids go on from the highest."""
    port, registry_port = _free_port(), _free_port()
    url = f"http://127.0.0.1:{registry_port}"
    log = tmp_path / "broker.log"
    child = _start(tmp_path / "data", port, registry_port, log)
    try:
        with SchemaRegistryClient({"url": url}) as sr:
            wait_for("the registry", lambda: sr.get_subjects() is not None or None)
            ids = [sr.register_schema(f"k{i}-value", avro(f"K{i}", "a")) for i in range(5)]
            sr.set_compatibility("k0-value", "NONE")
            before = state_of(sr)
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        assert child.returncode == -signal.SIGKILL
        child = _start(tmp_path / "data", port, registry_port, log)
        with SchemaRegistryClient({"url": url}) as sr:
            after = wait_for("the restarted registry", lambda: state_of(sr) or None)
            assert after == before, log.read_text()[-3000:]
            assert sr.get_compatibility("k0-value") == "NONE"
            assert sr.register_schema("later-value", avro("Later", "b")) > max(ids)
    finally:
        child.kill()
        child.wait(60)


@pytest.mark.compat("Schema Registry", "kept in _schemas: restart, kill -9, a two-node cluster")
def test_every_node_of_a_cluster_serves_the_same_registry(zk: str) -> None:
    """Two ZooKeeper-coordinated nodes: a schema registered on node 1 is read on
    node 2 (which catches up to the topic's end before answering); both nodes
    registering at the same time give distinct ids and versions that both
    nodes then report alike; with the node leading ``_schemas`` stopped, the
    other still serves them (the topic was created with both as replicas)."""

    async def test() -> None:
        async with serve_cluster(
            2, zookeeper_connect=zk, schema_registry_listen="127.0.0.1:0"
        ) as cluster:
            await cluster.wait_formed()
            urls = {}
            for node in (1, 2):
                host, port = cluster.node(node).schema_registry_address or ("", 0)
                urls[node] = f"http://{host}:{port}"
            seen = await trio.to_thread.run_sync(_check_two_nodes, urls)
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                info = (await admin.describe_topics(["_schemas"]))["_schemas"]
            assert len(info.partitions[0].replicas) == 2
            leader = info.partitions[0].leader
            await cluster.stop_node(leader)
            survivor = 3 - leader
            assert await trio.to_thread.run_sync(_survivor_state, urls[survivor]) == seen

    trio.run(test)


def _check_two_nodes(urls: dict[int, str]) -> dict[str, Any]:
    one = SchemaRegistryClient({"url": urls[1]})
    two = SchemaRegistryClient({"url": urls[2]})
    first = one.register_schema("orders-value", avro("Order", "id"))
    latest = two.get_latest_version("orders-value")
    assert (latest.schema_id, latest.version) == (first, 1)
    assert two.get_schema(first).schema_str == one.get_schema(first).schema_str
    # Both nodes write at once, one subject, compatibility NONE.
    two.set_compatibility("race-value", "NONE")
    got: dict[int, list[int]] = {1: [], 2: []}
    clients = {1: one, 2: two}

    def register(node: int) -> None:
        for i in range(6):
            got[node].append(clients[node].register_schema("race-value", avro(f"N{node}R{i}", "a")))

    threads = [threading.Thread(target=register, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    every = got[1] + got[2]
    assert len(every) == 12 and len(set(every)) == 12 and first not in every
    with SchemaRegistryClient({"url": urls[1]}) as a, SchemaRegistryClient({"url": urls[2]}) as b:
        seen = state_of(a)
        assert seen == state_of(b)
    assert seen["race-value"] and [row[0] for row in seen["race-value"]] == list(range(1, 13))
    assert sorted(row[1] for row in seen["race-value"]) == sorted(every)
    one.close()
    two.close()
    return seen


def _survivor_state(url: str) -> dict[str, Any]:
    with SchemaRegistryClient({"url": url}) as sr:
        return wait_for("node 2's registry alone", lambda: state_of(sr) or None)
