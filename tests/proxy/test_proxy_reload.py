"""SIGHUP reloads what can change while ``trafka proxy`` serves, on a real
process with a real signal (docs/proxy.md, "Reloading"): the TLS certificate
(new connections are served the new one, a connection already open keeps
working), a filter's settings, the log level; a change to anything else is
refused whole with a line naming the setting, as is a configuration with a
problem, and the proxy goes on serving with its old settings."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka.admin
import pytest
import trustme

from trafka.brokerlite import RunningBroker

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).parent
FILTER = "settings_filter:ClusterIdFilter"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _until(
    what: str, condition: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert proc.poll() is None, f"the proxy ended: {log.read_text()}"
        assert time.monotonic() < deadline, f"no {what}: {log.read_text()}"
        time.sleep(0.05)


def _served_certificate(port: int, ca: str) -> bytes:
    """The certificate a new TLS connection to the proxy is served (DER)."""
    context = ssl.create_default_context(cafile=ca)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _cluster_id(port: int, ca: str) -> str:
    admin = confluent_kafka.admin.AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SSL",
            "ssl.ca.location": ca,
        }
    )
    cluster_id: str = admin.list_topics(timeout=30).cluster_id
    return cluster_id


def _config(path: Path, upstream: str, cert: Path, cluster_id: str, **more: str) -> None:
    lines = [
        f'upstream = "{upstream}"',
        f'ssl_certfile = "{cert}"',
        *(f"{k} = {v}" for k, v in more.items()),
        "[[filter]]",
        f'use = "{FILTER}"',
        f'settings = {{cluster_id = "{cluster_id}"}}',
    ]
    path.write_text("\n".join(lines) + "\n")


def test_sighup_reloads_the_certificate_filters_and_log_level_and_refuses_the_rest(
    broker: RunningBroker, tmp_path: Path
) -> None:
    ca = trustme.CA()
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    first, second = (ca.issue_cert("127.0.0.1", "localhost") for _ in range(2))
    cert = tmp_path / "proxy.pem"  # replaced in place, as certificate renewers do
    first.private_key_and_cert_chain_pem.write_to_path(str(cert))
    der = [ssl.PEM_cert_to_DER_cert(c.cert_chain_pems[0].bytes().decode()) for c in (first, second)]
    toml = tmp_path / "proxy.toml"
    upstream = broker.bootstrap_servers
    _config(toml, upstream, cert, "one", log_level='"INFO"')
    with _proxy_process(toml, tmp_path) as (port, proc, log):
        assert _served_certificate(port, str(ca_path)) == der[0]
        assert _cluster_id(port, str(ca_path)) == "one"
        assert b"settings_filter:" not in log.read_bytes()  # DEBUG is not logged at INFO
        # A connection open across the reload.
        context = ssl.create_default_context(cafile=str(ca_path))
        kept = context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1"
        )

        def reload(times: int) -> None:
            _reload(proc, log, times)

        # 1. The certificate, the filter's settings and the log level change.
        second.private_key_and_cert_chain_pem.write_to_path(str(cert))
        _config(toml, upstream, cert, "two", log_level='"DEBUG"')
        reload(1)
        assert b"SIGHUP: configuration reloaded (filter, log_level)" in log.read_bytes()
        assert _served_certificate(port, str(ca_path)) == der[1]
        assert kept.getpeercert(binary_form=True) == der[0]
        kept.sendall(_api_versions_request())
        assert len(kept.recv(4)) == 4  # the connection kept serves on
        assert _cluster_id(port, str(ca_path)) == "two"
        assert b"settings_filter: a Metadata answer" in log.read_bytes()

        # 2. A setting that needs a restart, beside a filter change: refused whole.
        _config(toml, upstream, cert, "three", log_level='"DEBUG"', route_keys='"crc32"')
        reload(2)
        text = log.read_text()
        assert "route_keys cannot change without a restart ('crc32', was 'murmur2')" in text
        assert _cluster_id(port, str(ca_path)) == "two"

        # 3. A configuration with a problem: refused, each problem named.
        toml.write_text(toml.read_text().replace("route_keys", "rout_keys"))
        reload(3)
        assert f"{toml}: rout_keys: unknown setting (did you mean route_keys?)" in log.read_text()
        assert _cluster_id(port, str(ca_path)) == "two"
        assert _served_certificate(port, str(ca_path)) == der[1]
        kept.close()


@contextlib.contextmanager
def _proxy_process(
    toml: Path, tmp_path: Path, ready: bytes = b"proxy on"
) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    """``trafka proxy --config toml`` serving (its port, process and log) once
    its log says ``ready``, then stopped by SIGTERM, which it must end by cleanly."""
    port = _free_port()
    log = tmp_path / "proxy.log"
    proc = _start(toml, port, log)
    try:
        _until("start", lambda: ready in log.read_bytes(), proc, log)
        yield port, proc, log
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start(toml: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``trafka proxy --config toml`` on ``port`` (brokers on no ports of their own),
    its output in ``log``; tests/proxy on its path (the test filter)."""
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    }
    command = [
        sys.executable, "-m", "trafka.tools.cli", "proxy", "--config", str(toml),
        "--listen", f"127.0.0.1:{port}", "--node-port-base", "-1",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def _reload(proc: subprocess.Popen[bytes], log: Path, times: int) -> None:
    """SIGHUP, then wait for its ``times``-th outcome in the log."""
    proc.send_signal(signal.SIGHUP)
    ends = (b"SIGHUP: configuration reloaded", b"goes on with its old settings")
    _until("reload", lambda: sum(log.read_bytes().count(end) for end in ends) == times, proc, log)


def _answered(port: int, trust: Path, cert: Path, key: Path) -> bool:
    """Whether a TLS client with this certificate gets an answer from the proxy
    (its ApiVersions): False when the proxy refused the certificate (TLS 1.3
    tells the client after its handshake, at its first read)."""
    context = ssl.create_default_context(cafile=str(trust))
    context.load_cert_chain(str(cert), str(key))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(_api_versions_request())
            return len(tls.recv(4)) == 4
    except (ssl.SSLError, ConnectionError):
        return False


def test_sighup_takes_new_client_cas_and_principal_mapping_rules(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """Mutual TLS settings change on SIGHUP (docs/proxy.md, "Reloading"): the
    client-CA bundle rewritten in place (one CA out, another in) and new
    principal mapping rules (KIP-371) hold for new connections."""
    old, new = trustme.CA(), trustme.CA()
    trust, clients, cert = tmp_path / "trust.pem", tmp_path / "clients.pem", tmp_path / "px.pem"
    old.cert_pem.write_to_path(str(trust))  # what clients trust the proxy by
    old.cert_pem.write_to_path(str(clients))
    old.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    leaves = {}
    for name, issuer in (("alice", old), ("bob", new)):
        leaf = issuer.issue_cert(f"{name}.clients.test", common_name=name)
        leaves[name] = (tmp_path / f"{name}.pem", tmp_path / f"{name}-key.pem")
        leaf.cert_chain_pems[0].write_to_path(str(leaves[name][0]))
        leaf.private_key_pem.write_to_path(str(leaves[name][1]))
    toml, log, port = tmp_path / "proxy.toml", tmp_path / "proxy.log", _free_port()

    def configure(rules: str) -> None:
        more = {"ssl_cafile": f'"{clients}"', "ssl_client_auth": '"required"'}
        _config(toml, broker.bootstrap_servers, cert, "one", verbose="true", **more,
                ssl_principal_mapping_rules=f'"{rules}"')  # fmt: skip

    configure("RULE:^CN=([^,]*),.*$/$1/")
    proc = _start(toml, port, log)
    try:
        _until("start", lambda: b"proxy on" in log.read_bytes(), proc, log)
        assert _answered(port, trust, *leaves["alice"])
        assert not _answered(port, trust, *leaves["bob"])
        assert b"TLS principal User:alice " in log.read_bytes()
        new.cert_pem.write_to_path(str(clients))  # the bundle replaced in place
        configure("RULE:^CN=([^,]*),.*$/$1/U")
        _reload(proc, log, 1)
        text = log.read_text()
        assert "SIGHUP: configuration reloaded (ssl_principal_mapping_rules)" in text, text
        assert not _answered(port, trust, *leaves["alice"])
        assert _answered(port, trust, *leaves["bob"])
        assert b"TLS principal User:BOB " in log.read_bytes()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _api_versions_request() -> bytes:
    """ApiVersions v0, correlation id 1, client id "t", framed."""
    body = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + (1).to_bytes(4, "big")
    body += (1).to_bytes(2, "big") + b"t"
    return len(body).to_bytes(4, "big") + body


def test_with_workers_sighup_is_checked_by_the_supervisor_then_reloaded_by_each_worker(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """``--workers 2``: a reload that works reaches every worker (a client's
    Metadata, whichever worker it reaches, names the new cluster id); one the
    supervisor refuses reaches none, and the workers serve on."""
    toml = tmp_path / "proxy.toml"
    body = f'upstream = "{broker.bootstrap_servers}"\nworkers = 2\n'
    filters = '[[filter]]\nuse = "{}"\nsettings = {{cluster_id = "{}"}}\n'
    toml.write_text(body + filters.format(FILTER, "one"))
    port = _free_port()
    log = tmp_path / "proxy.log"
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    }
    command = [
        sys.executable, "-m", "trafka.tools.cli", "proxy", "--config", str(toml),
        "--listen", f"127.0.0.1:{port}", "--node-port-base", "-1",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _until("start", lambda: b"(2 workers)" in log.read_bytes(), proc, log)

        def cluster_ids() -> set[str]:
            """What fresh clients are told (several: the kernel spreads them)."""
            ids = set()
            for _ in range(6):
                admin = confluent_kafka.admin.AdminClient(
                    {"bootstrap.servers": f"127.0.0.1:{port}"}
                )
                ids.add(admin.list_topics(timeout=30).cluster_id)
            return ids

        assert cluster_ids() == {"one"}
        toml.write_text(body + filters.format(FILTER, "two"))
        proc.send_signal(signal.SIGHUP)
        done = [f"[worker {k}] SIGHUP: configuration reloaded (filter)".encode() for k in (0, 1)]
        _until("the workers' reload", lambda: all(d in log.read_bytes() for d in done), proc, log)
        assert cluster_ids() == {"two"}
        # Refused by the supervisor: no worker hears of it.
        toml.write_text(body.replace("workers = 2", "workers = 3") + filters.format(FILTER, "3"))
        proc.send_signal(signal.SIGHUP)
        _until("refusal", lambda: b"goes on with its old settings" in log.read_bytes(), proc, log)
        assert "workers cannot change without a restart (3, was 2)" in log.read_text()
        assert log.read_text().count("[worker 0] received SIGHUP") == 1
        assert cluster_ids() == {"two"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _sni_metadata(
    port: int, ca: Path, name: str, tls: ssl.SSLSocket | None = None, check: bool = True
) -> Any:
    """A Metadata answer (v9) over TLS asking for ``name`` by SNI (over ``tls``
    if given, a connection already open); None when the proxy closed the
    connection (a name it does not serve: it reads the name after the
    handshake, so the client learns at its first read), or when ``check`` and
    the certificate does not name it."""
    from proxy_helpers import call

    from trafka.codec import ApiKey
    from trafka.codec.messages import k03_metadata as mm

    request = mm.MetadataRequest(topics=[])
    if tls is not None:
        return call(tls, ApiKey.METADATA, 9, request)
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = check
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=name) as fresh,
        ):
            return call(fresh, ApiKey.METADATA, 9, request)
    except (ssl.SSLError, ConnectionError, AssertionError):  # call() asserts on a close
        return None


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_moves_sni_domain_for_new_connections_and_open_ones_keep_their_broker(
    broker: RunningBroker, tmp_path: Path, workers: int
) -> None:
    """``sni_domain`` changes on SIGHUP (docs/proxy.md, "One port for the
    cluster: SNI" and "Reloading"): a real proxy process, real TLS clients
    naming hosts by SNI. After the reload a new connection asking for
    ``bootstrap.<new>`` or ``broker-N.<new>`` is served and Metadata names
    ``broker-N.<new>``; one asking for the former domain's name is closed, as
    after a restart; a connection opened before goes on with its broker. A
    move to a domain the certificate does not name is made, and logged as a
    warning by each process that serves (a client checking host names is
    refused, as warned). Switching SNI off is refused (a restart: the listeners per broker would
    open), and the proxy serves on with the new domain. With ``--workers 2``
    the supervisor checks the move and each worker makes it (the checks'
    fresh connections reach either)."""
    ca = trustme.CA()
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    cert = tmp_path / "proxy.pem"  # one certificate for both domains
    ca.issue_cert("*.kafka.test", "*.moved.test").private_key_and_cert_chain_pem.write_to_path(
        str(cert)
    )
    toml = tmp_path / "proxy.toml"
    upstream = broker.bootstrap_servers
    more = {"workers": str(workers)}
    _config(toml, upstream, cert, "one", sni_domain='"kafka.test"', **more)
    ready = b"proxy on" if workers == 1 else b"(%d workers)" % workers
    with _proxy_process(toml, tmp_path, ready) as (port, proc, log):
        first = _sni_metadata(port, ca_path, "bootstrap.kafka.test")
        (node,) = [b.node_id for b in first.brokers]
        assert {(b.host, b.port) for b in first.brokers} == {(f"broker-{node}.kafka.test", port)}
        context = ssl.create_default_context(cafile=str(ca_path))
        kept = context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=10),
            server_hostname=f"broker-{node}.kafka.test",
        )
        assert _sni_metadata(port, ca_path, "", kept).brokers[0].node_id == node

        _config(toml, upstream, cert, "one", sni_domain='"moved.test"', **more)
        _reload(proc, log, 1 if workers == 1 else 1 + workers)
        assert b"SIGHUP: configuration reloaded (sni_domain)" in log.read_bytes()
        for k in range(workers if workers > 1 else 0):  # each worker moved itself
            assert f"[worker {k}] SIGHUP: configuration reloaded (sni_domain)" in log.read_text()
        for name in ("bootstrap.moved.test", f"broker-{node}.moved.test"):
            answer = _sni_metadata(port, ca_path, name)
            assert answer is not None, (name, log.read_text())
            assert {(b.host, b.port) for b in answer.brokers} == {
                (f"broker-{node}.moved.test", port)
            }
        assert _sni_metadata(port, ca_path, f"broker-{node}.kafka.test") is None
        assert f"'broker-{node}.kafka.test' is neither bootstrap.moved.test" in log.read_text()
        assert _sni_metadata(port, ca_path, "bootstrap.kafka.test") is None
        # The connection opened before: its broker, the answers' names the new ones.
        again = _sni_metadata(port, ca_path, "", kept)
        assert [(b.node_id, b.host) for b in again.brokers] == [(node, f"broker-{node}.moved.test")]
        assert "check host names" not in log.read_text()  # the certificate names both

        # A domain the certificate does not name: moved to, with a warning.
        _config(toml, upstream, cert, "one", sni_domain='"third.test"', **more)
        _reload(proc, log, 2 if workers == 1 else 2 + 2 * workers)
        warning = f"SIGHUP: {cert} does not name bootstrap.third.test: clients that check host"
        assert log.read_text().count(warning) == workers, log.read_text()  # each that serves
        assert f"{cert} names no broker-N.third.test (nor *.third.test)" in log.read_text()
        assert _sni_metadata(port, ca_path, "bootstrap.moved.test") is None  # moved
        assert _sni_metadata(port, ca_path, "bootstrap.third.test") is None  # as warned
        assert _sni_metadata(port, ca_path, "bootstrap.third.test", check=False) is not None

        _config(toml, upstream, cert, "one", **more)  # SNI off: a restart (the supervisor refuses)
        _reload(proc, log, 3 if workers == 1 else 3 + 2 * workers)
        assert "sni_domain cannot change without a restart (None, was 'third.test')" in (
            log.read_text()
        )
        assert _sni_metadata(port, ca_path, "bootstrap.third.test", check=False) is not None
        kept.close()
