"""What the proxy logs of its clients' connections, and what it keeps quiet.

With ``-v`` (DEBUG), as the setting promises ("each broker listener and
connection"): a connection accepted (from where, on which listener), its
upstream connection (to which broker) and its end (after how long, its
requests and bytes each way). Below DEBUG, none of that, and no line of httpx
per registry request (a schema registry's normal 404 for an id it does not
know), which the proxy's schema validation makes; with ``-v`` those show too.
"""

from __future__ import annotations

import logging
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.proxy import proxy_in_thread

pytestmark = pytest.mark.timeout(120)

WAIT_S = 60


def _api_versions_v0(correlation_id: int) -> bytes:
    """An ApiVersions v0 request, size prefix included (its body is empty)."""
    client_id = b"logging-test"
    header = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(header)) + header


def _read_frame(sock: socket.socket) -> bytes:
    """One answer, size prefix included."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        assert chunk, "the proxy closed the connection"
        data += chunk
    return data


def _said(caplog: pytest.LogCaptureFixture, pattern: str) -> list[re.Match[str]]:
    return [
        m
        for r in caplog.records
        if r.name == "trafka.proxy" and (m := re.fullmatch(pattern, r.getMessage()))
    ]


def _wait_said(caplog: pytest.LogCaptureFixture, pattern: str) -> re.Match[str]:
    """The first line matching ``pattern``, once the proxy's thread logged it."""
    deadline = time.monotonic() + WAIT_S
    while not (found := _said(caplog, pattern)):
        assert time.monotonic() < deadline, f"never logged: {pattern}"
        time.sleep(0.02)
    return found[0]


def test_each_connection_is_logged_at_debug_with_its_traffic(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    upstream_port = broker.address[1]
    with (
        caplog.at_level(logging.DEBUG, logger="trafka.proxy"),
        proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0) as px,
    ):
        port = px.address[1]
        with socket.create_connection(("127.0.0.1", port)) as sock:
            me = sock.getsockname()[1]
            request = _api_versions_v0(7)
            sock.sendall(request)
            answer = _read_frame(sock)
        peer = rf"127\.0\.0\.1:{me}"
        closed = _wait_said(caplog, rf"connection from {peer} closed after \d+\.\d s: (.*)")
        with socket.create_connection(("127.0.0.1", port)) as silent:
            quiet = silent.getsockname()[1]
        _wait_said(
            caplog,
            rf"connection from 127\.0\.0\.1:{quiet} closed after \d+\.\d s, "
            "before any request",
        )
    assert _said(
        caplog, rf"connection from {peer} accepted on the bootstrap listener \(port {port}\)"
    )
    assert _said(
        caplog,
        rf"connection from {peer}: its upstream connection to 127\.0\.0\.1:{upstream_port} "
        r"\(a bootstrap server\)",
    )
    # Exactly what crossed: the one request, the one answer.
    assert closed.group(1) == f"1 request ({len(request)} bytes) in, {len(answer)} bytes out"


def test_below_debug_no_line_per_connection(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="trafka.proxy"),
        proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0) as px,
        socket.create_connection(("127.0.0.1", px.address[1])) as sock,
    ):
        sock.sendall(_api_versions_v0(1))
        _read_frame(sock)
    assert caplog.records, "the proxy logged nothing at INFO"
    assert not [r for r in caplog.records if "connection from" in r.getMessage()]


@pytest.fixture(scope="module")
def with_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("proxy-logging"),
        schema_registry_listen="127.0.0.1:0",
    ) as running:
        yield running


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _proxy_log(tmp_path: Path, broker: RunningBroker, *flags: str) -> str:
    """``trafka proxy`` with schema validation, given ``flags``; a record whose
    schema id the registry does not know produced through it (refused); its
    log once it stopped."""
    tmp_path.mkdir()
    assert broker.schema_registry_address is not None
    host, registry_port = broker.schema_registry_address
    config = tmp_path / "proxy.toml"
    config.write_text(
        "[[filter]]\n"
        'use = "trafka.proxy:SchemaValidation"\n'
        f'settings = {{"schema.registry.url" = "http://{host}:{registry_port}"}}\n'
    )
    port = _free_port()
    log = tmp_path / "proxy.log"
    command = [
        sys.executable, "-m", "trafka.tools.cli", "proxy", "--upstream",
        broker.bootstrap_servers, "--listen", f"127.0.0.1:{port}", "--no-announce",
        "--config", str(config), *flags,
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while b"proxy on" not in log.read_bytes():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.05)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": f"127.0.0.1:{port}", "retries": 0, "log_level": 0}
        )
        errors: list[confluent_kafka.KafkaError | None] = []
        unknown_id = b"\x00" + (424242).to_bytes(4, "big") + b"payload"
        producer.produce("logged", unknown_id, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(30) == 0
        assert errors and errors[0] is not None, errors
        assert errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD, errors
        del producer  # its connections closed before the proxy stops
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return log.read_text()


def test_the_cli_quiets_httpx_unless_verbose_which_logs_each_connection(
    tmp_path: Path, with_registry: RunningBroker
) -> None:
    quiet = _proxy_log(tmp_path / "quiet", with_registry)
    assert "HTTP Request" not in quiet and "httpx" not in quiet, quiet
    assert "connection from" not in quiet, quiet
    assert re.search(r"INFO trafka\.proxy: broker 1 \(.*\) is served on port \d+", quiet), quiet

    verbose = _proxy_log(tmp_path / "verbose", with_registry, "--log-level", "DEBUG", "-v")
    # Asked for everything: the registry's 404 for the unknown id shows.
    assert re.search(r"httpx: HTTP Request: GET \S+/schemas/ids/424242\S* \S+ 404", verbose), (
        verbose
    )
    assert re.search(r"accepted on the bootstrap listener \(port \d+\)", verbose), verbose
    assert re.search(r"accepted on broker 1's listener \(port \d+\)", verbose), verbose
    assert re.search(r"its upstream connection to \S+ \(broker 1\)", verbose), verbose
    assert re.search(r"closed after \d+\.\d s: \d+ requests? \(\d+ bytes\) in", verbose), verbose
