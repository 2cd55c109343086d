"""``trafka proxy`` stops cleanly on SIGTERM and SIGINT, as ``trafka broker``
does: service managers (systemd, Kubernetes) stop a process with SIGTERM, and a
proxy that died where it stood would cut its clients' requests without closing
its listeners and journal in order. A real process, a real signal, a real client
through the proxy before it."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest
from terminal_sigint import sigint_as_at_a_terminal

from trafka.brokerlite.server import broker_in_thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_proxy_stops_cleanly_on_a_signal(tmp_path: Path, signum: signal.Signals) -> None:
    with broker_in_thread(port=0) as broker:
        port = _free_port()
        log = tmp_path / "proxy.log"
        command = [
            sys.executable, "-m", "trafka.tools.cli", "proxy", "--upstream",
            broker.bootstrap_servers, "--listen", f"127.0.0.1:{port}", "--no-announce",
            "--journal", str(tmp_path / "journal"),
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=sigint_as_at_a_terminal,
            )
        try:
            deadline = time.monotonic() + 60
            while b"proxy on" not in log.read_bytes():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.05)
            # It serves: a record goes through it.
            producer = confluent_kafka.Producer(
                {"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True}
            )
            reports: list[confluent_kafka.Message] = []
            producer.produce("signals", b"v", b"k", on_delivery=lambda e, m: reports.append(m))
            assert producer.flush(30) == 0
            assert reports and reports[0].error() is None, reports
            proc.send_signal(signum)
            assert proc.wait(30) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = log.read_text()
        assert f"received {signum.name}, shutting down" in text, text
        assert "proxy stopped" in text, text
        # Every line says when, as brokerlite's do (issue #62): time to the ms,
        # level, logger.
        stamped = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ trafka\.[\w.]+: ")
        assert [line for line in text.splitlines() if not stamped.match(line)] == []
        assert re.search(r"^\S+ \S+ INFO trafka\.proxy: proxy on ", text, re.MULTILINE), text
        # The listener is closed: its port can be bound again.
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
