"""A console whose cluster does not answer: it says so at start and on every
page without waiting out the admin client's timeout, keeps answering, and
shows the cluster again when it comes back.

The consoles here give their admin client a 10-minute timeout
(``default.api.timeout.ms``), so a page that waited for it could not answer
within the test's deadline: a page that says the cluster does not answer,
and names the check's 1.5 s, was answered by the console's own checks
(:mod:`trafka.console.health`, whose bound of 2 s is tested on a clock the
test moves in test_health.py). No test here measures a time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from console_helpers import Client, Site, console_in_thread, token_of

from trafka.brokerlite.server import broker_in_thread
from trafka.console import ConsoleSettings

pytestmark = pytest.mark.timeout(120)

#: Far longer than any test may take: only the console's checks can answer.
SLOW_ADMIN = {"default.api.timeout.ms": 600_000}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_every_page_says_the_cluster_does_not_answer(caplog: pytest.LogCaptureFixture) -> None:
    dead = free_port()
    settings = ConsoleSettings(
        {"bootstrap.servers": f"127.0.0.1:{dead}", **SLOW_ADMIN}, "127.0.0.1:0"
    )
    with console_in_thread(settings) as there:
        client = Client()
        for path in ("/", "/topics", "/topics/t", "/topics/t/messages", "/groups", "/acls"):
            page = client.get(there, path)
            assert page.status == 503, path
            assert "<h1>The cluster does not answer</h1>" in page.text
            assert f"No answer from the cluster at 127.0.0.1:{dead}" in page.text
            assert "DescribeCluster within 1.5 s" in page.text
            assert "Connection refused" in page.text  # what the client saw
            assert '<meta http-equiv="refresh" content="2">' in page.text  # it reloads
        # A change is not sent, and the page says so.
        token = token_of(client.get(there, "/topics/new"))
        sent = client.post(there, "/topics/new", {"token": token, "name": "never"})
        assert sent.status == 503 and 'id="not-sent"' in sent.text
        assert client.get(there, "/healthz").text == "ok\n"  # the console itself is up
    said = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    assert len(said) == 1  # once when found, not at every check
    assert said[0].startswith(f"the cluster at 127.0.0.1:{dead} does not answer")


def test_the_console_recovers_when_the_cluster_comes_back(tmp_path: Path) -> None:
    port = free_port()
    settings = ConsoleSettings(
        {"bootstrap.servers": f"127.0.0.1:{port}", **SLOW_ADMIN}, "127.0.0.1:0"
    )
    with console_in_thread(settings) as there:
        client = Client()
        assert client.get(there, "/topics").status == 503
        with broker_in_thread(data_dir=tmp_path / "late", port=port):
            while (page := client.get(there, "/topics")).status == 503:
                pass  # each answer is bounded; the test's timeout bounds the loop
            assert page.status == 200 and '<table id="topics">' in page.text
        # And down again once it has gone.
        while (page := client.get(there, "/")).status == 200:
            pass
        assert page.status == 503 and "does not answer" in page.text


def test_the_command_says_so_at_start() -> None:
    dead, http = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trafka.tools.cli",
            "console",
            "-b",
            f"127.0.0.1:{dead}",
            "--listen",
            f"127.0.0.1:{http}",
            "-X",
            "default.api.timeout.ms=600000",
        ],
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    try:
        assert proc.stderr is not None
        for raw in proc.stderr:
            lines.append(raw.decode())
            if "does not answer" in lines[-1]:
                break
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    said = "".join(lines)
    assert f"trafka console on http://127.0.0.1:{http}/" in said
    assert f"the cluster at 127.0.0.1:{dead} does not answer" in lines[-1]
    assert "Connection refused" in lines[-1]
    assert proc.returncode == 0


def test_a_live_cluster_is_not_called_down(site: Site) -> None:
    """The checks leave a live cluster's pages alone (and log nothing)."""
    settings = ConsoleSettings({"bootstrap.servers": site.bootstrap}, "127.0.0.1:0")
    with console_in_thread(settings) as there:
        pages = [Client().get(there, p) for p in ("/", "/topics", "/groups")]
    assert [p.status for p in pages] == [200, 200, 200]


def test_a_broker_that_accepts_and_never_answers() -> None:
    """A hung broker (its port open, nothing answered) is found by the check's
    own time limit, not the admin client's 10 minutes."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        address = f"127.0.0.1:{hung.getsockname()[1]}"
        settings = ConsoleSettings({"bootstrap.servers": address, **SLOW_ADMIN}, "127.0.0.1:0")
        with console_in_thread(settings) as there:
            page = Client().get(there, "/topics")
    assert page.status == 503 and f"No answer from the cluster at {address}" in page.text
    assert "DescribeCluster within 1.5 s" in page.text  # the check's bound, not the admin's
