"""The deployment examples are valid and agree with the proxy (docs/proxy.md,
"Operations"): deploy/proxy.toml and the Kubernetes ConfigMap's file pass the
proxy's own check; the Deployment's probes ask paths the proxy's HTTP server
answers (a real proxy with those settings, asked them), on the port its
metrics_listen names; the container's and the Service's broker ports follow
the default broker-port scheme (listen port + 1 + broker id); the systemd unit
passes ``systemd-analyze verify`` with nothing to say, and reloads with SIGHUP."""

from __future__ import annotations

import configparser
import http.client
import shutil
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from trafka.brokerlite import RunningBroker
from trafka.proxy import proxy_in_thread
from trafka.proxy.service import check
from trafka.proxy.settings import Sources

pytestmark = pytest.mark.timeout(120)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES = DEPLOY / "kubernetes" / "trafka-proxy.yaml"
UNIT = DEPLOY / "systemd" / "trafka-proxy.service"


def manifests() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(KUBERNETES.read_text())}


def _get(address: tuple[str, int], path: str) -> int:
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_example_configuration_passes_the_proxys_check() -> None:
    loaded = check(Sources(path=str(DEPLOY / "proxy.toml")))
    assert loaded.config.port == 19092 and loaded.config.node_port_base == 19093


def test_the_kubernetes_probes_and_ports_are_the_proxys(
    broker: RunningBroker, tmp_path: Path
) -> None:
    docs = manifests()
    assert set(docs) == {"ConfigMap", "Deployment", "Service"}
    toml = tmp_path / "proxy.toml"
    toml.write_text(docs["ConfigMap"]["data"]["proxy.toml"])
    settings = tomllib.loads(toml.read_text())
    loaded = check(Sources(path=str(toml)))
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The file the container reads is the ConfigMap's.
    (mount,) = container["volumeMounts"]
    (volume,) = (v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    config_path = container["command"][container["command"].index("--config") + 1]
    assert config_path == f"{mount['mountPath']}/proxy.toml"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # The probes' port is metrics_listen's; the broker ports follow the listen port.
    metrics_port = int(settings["metrics_listen"].rpartition(":")[2])
    probes = {kind: container[kind]["httpGet"] for kind in ("readinessProbe", "livenessProbe")}
    assert {ports[p["port"]] for p in probes.values()} == {metrics_port}
    assert ports["bootstrap"] == loaded.config.port
    brokers = sorted((int(n.split("-")[1]), p) for n, p in ports.items() if n.startswith("broker-"))
    assert brokers and all(p == loaded.config.node_port_base + n for n, p in brokers)
    # The Service exposes each of the container's ports, under the same number.
    service = {p["name"]: (p["port"], p["targetPort"]) for p in docs["Service"]["spec"]["ports"]}
    assert service == {name: (port, name) for name, port in ports.items()}
    assert (
        docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    )
    # A real proxy with these settings (on loopback, before a real broker)
    # answers the probes' paths; a path it does not serve is a 404.
    local = loaded.config
    with proxy_in_thread(
        local,
        upstream=(broker.bootstrap_servers,),
        host="127.0.0.1",
        port=0,
        node_port_base=None,
        metrics_listen="127.0.0.1:0",
        journal_topic=None,
    ) as px:
        assert px.metrics_address is not None
        assert _get(px.metrics_address, "/no-such-page") == 404
        assert _get(px.metrics_address, probes["livenessProbe"]["path"]) == 200
        deadline = time.monotonic() + 60
        while _get(px.metrics_address, probes["readinessProbe"]["path"]) != 200:
            assert time.monotonic() < deadline, "the proxy never became ready"
            time.sleep(0.1)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_systemd_unit_verifies_and_reloads_with_sighup(tmp_path: Path) -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text())
    service = unit["Service"]
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    trafka, *args = service["ExecStart"].split()
    assert args[:2] == ["proxy", "--config"]
    assert service["ExecStartPre"] == f"{service['ExecStart']} --check-config"
    # systemd's own check, with the trafka this test runs (the unit's path is an example).
    installed = shutil.which("trafka") or str(
        Path(__file__).resolve().parents[2] / ".venv/bin/trafka"
    )
    local = tmp_path / UNIT.name
    local.write_text(UNIT.read_text().replace(trafka, installed))
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60
    )
    assert (verified.returncode, verified.stdout, verified.stderr) == (0, "", "")
