"""The client commands at the edges the fault matrix (``test_cli_faults.py``)
leaves out: a group whose coordinator cannot be found, a broker that accepts
connections and never answers, a misspelt setting, ``-e`` on an empty topic.

Each runs the real entry point as a process with a hang guard (``HANG_S``, far
above what any needs: not a timing assertion) and checks that it ends with a
clear message on stderr, the documented exit status and no traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from terminal_sigint import sigint_as_at_a_terminal
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.tools.cli_faults import GroupWatch

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "trafka.tools.cli"]
HANG_S = 60.0


def fresh(prefix: str) -> str:
    return f"edges-{prefix}-{next(_names)}"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRAFKA_BOOTSTRAP_SERVERS"}
    done = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=HANG_S, env=env, check=False
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


# -- a group without a coordinator -----------------------------------------------------------


def test_group_watch_says_once_and_gives_up_after_the_grace() -> None:
    said: list[str] = []
    watch = GroupWatch("g", 3.0, said.append, "giving it up after 3 s (-m)")
    watch.update("", 0.0)
    watch.update("COORDINATOR_NOT_AVAILABLE", 0.5)
    watch.update("COORDINATOR_NOT_AVAILABLE", 1.0)
    assert said == [] and watch.given_up(1.0) == ""  # a blink is not news
    watch.update("COORDINATOR_NOT_AVAILABLE", 1.5)
    watch.update("no answer", 2.0)
    assert said == [
        "warning: group g has no coordinator: COORDINATOR_NOT_AVAILABLE; "
        "giving it up after 3 s (-m)"
    ]
    assert watch.given_up(3.0) == ""
    assert watch.given_up(3.5) == "no answer"  # the latest reason
    watch.update("", 4.0)
    assert said[1:] == ["group g has a coordinator again"]
    assert watch.given_up(10.0) == ""


def _no_coordinator(header: Any, body: Any) -> Any:
    """FindCoordinator answered COORDINATOR_NOT_AVAILABLE (retriable), for ever."""
    R = fc.FindCoordinatorResponse
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if header.request_api_version >= 4:
        return R(
            coordinators=[
                R.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code)
                for key in body.coordinator_keys
            ]
        )
    return R(error_code=code, node_id=-1, host="", port=-1)


@pytest.fixture(scope="module")
def coordinator_less() -> Iterator[str]:
    """A one-node cluster (the SDK tests' scripted fake) holding topic ``t``
    whose groups have no coordinator; its bootstrap address."""
    sdk_tests = str(Path(__file__).resolve().parents[1] / "sdk")
    if sdk_tests not in sys.path:
        sys.path.append(sdk_tests)
    from sdk_fakebroker import FakeBroker, serving

    broker = FakeBroker({"t": 1})
    broker.handlers[10] = _no_coordinator
    with (
        anyio.from_thread.start_blocking_portal("trio") as portal,
        portal.wrap_async_context_manager(serving(broker)),
    ):
        yield broker.bootstrap


def test_consume_group_e_gives_the_group_up_when_it_has_no_coordinator(
    coordinator_less: str,
) -> None:
    """``consume -G -e`` holds no partition while its group's coordinator cannot
    be found (the SDK retries FindCoordinator for ever, as Java's consumer): it
    says so, and gives up after ``-m`` seconds rather than wait for ever."""
    done = run("consume", "t", "-G", "g", "-e", "-m", "2", "-b", coordinator_less)
    assert done.returncode == 1, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    why = "[COORDINATOR_NOT_AVAILABLE (15)] FindCoordinator for group 'g'"
    assert f"warning: group g has no coordinator: {why}; giving it up after 2 s (-m)" in lines
    assert f"Error: group g was given up after 2 s (-m) without a coordinator: {why}" in lines


def test_share_consume_idle_timeout_gives_the_group_up_when_it_has_no_coordinator(
    coordinator_less: str,
) -> None:
    """``--idle-timeout`` counts from joining: without a coordinator the member
    never joins, so the command gives the group up after ``-m`` seconds."""
    done = run("share-consume", "t", "-G", "sg", "-i", "1", "-m", "2", "-b", coordinator_less)
    assert done.returncode == 1, done
    why = "[COORDINATOR_NOT_AVAILABLE (15)] FindCoordinator for group 'sg'"
    assert f"Error: group sg was given up after 2 s (-m) without a coordinator: {why}" in (
        done.stderr.splitlines()
    )


@pytest.mark.parametrize("command", ["consume", "share-consume"])
def test_a_group_command_that_waits_says_why_and_stops_on_sigint(
    coordinator_less: str, command: str
) -> None:
    """Without -e (-i), the command waits for the coordinator as long as it runs
    (as Java's consumer), saying so once; Ctrl-C still ends it (130)."""
    env = {k: v for k, v in os.environ.items() if k != "TRAFKA_BOOTSTRAP_SERVERS"}
    args = [*CLI, command, "t", "-G", "g", "-m", "2", "-b", coordinator_less]
    with subprocess.Popen(
        args,
        preexec_fn=sigint_as_at_a_terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        assert proc.stderr is not None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0)  # still running
        guard = threading.Timer(HANG_S, proc.kill)  # the hang guard of readline
        guard.start()
        try:
            line = proc.stderr.readline()
        finally:
            guard.cancel()
        assert line.startswith("warning: group g has no coordinator: [COORDINATOR_NOT_AVAILABLE")
        assert line.rstrip().endswith("; waiting for it")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "warning: group g" not in err  # said once


def test_groups_describe_without_a_coordinator_ends_on_its_timeout(coordinator_less: str) -> None:
    done = run("groups", "describe", "g", "-m", "2", "-b", coordinator_less)
    assert done.returncode == 1, done
    assert "COORDINATOR_NOT_AVAILABLE" in done.stderr and "no result within 2000 ms" in done.stderr


# -- a broker that accepts and never answers -------------------------------------------------


@pytest.fixture
def silent() -> Iterator[str]:
    """A listening socket whose connections are accepted (by the kernel's
    backlog) and never answered; its address."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as hole:
        yield f"127.0.0.1:{hole.getsockname()[1]}"


@pytest.mark.parametrize(
    "args", [["consume", "t", "-e"], ["produce", "t"], ["topics", "list"], ["groups", "list"]]
)
def test_a_broker_that_never_answers_ends_the_command_on_the_setup_timeout(
    silent: str, args: list[str]
) -> None:
    """A connection is ready only once ApiVersions is answered (KIP-511's first
    request), within ``socket.connection.setup.timeout.ms``."""
    setup = ["-X", "socket.connection.setup.timeout.ms=1000"]
    done = run(*args, "-b", silent, *setup)
    assert done.returncode == 1, done
    assert done.stderr.startswith(f"Error: no broker available (bootstrap {silent})"), done
    assert "no answer to ApiVersions within socket.connection.setup.timeout.ms" in done.stderr


@contextlib.contextmanager
def answering(answer: bytes) -> Iterator[str]:
    """A listener that answers every connection's first bytes with ``answer``
    and closes it; its address."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.2)
        done = threading.Event()

        def serve() -> None:
            while not done.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.settimeout(HANG_S)
                    conn.recv(4096)
                    conn.sendall(answer)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield f"127.0.0.1:{server.getsockname()[1]}"
        finally:
            done.set()
            thread.join(HANG_S)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        # An HTTP server's port.
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "(the peer answered text, 'HTTP'...: not a Kafka"),
        # A TLS listener: its alert record (a plaintext ApiVersions is no handshake).
        (b"\x15\x03\x03\x00\x02\x02\x46", "(the peer answered in TLS: set security.protocol"),
    ],
)
def test_a_peer_that_is_no_kafka_broker_is_named(answer: bytes, said: str) -> None:
    with answering(answer) as address:
        done = run("topics", "list", "-b", address)
    assert done.returncode == 1, done
    assert "bad response framing" in done.stderr and said in done.stderr, done.stderr


# -- misuse ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["consume", "t", "-X", "no.such.key=1"], "unknown configuration key 'no.such.key'"),
        (["produce", "t", "-X", "acks=banana"], "acks must be one of"),
        (["topics", "list", "-X", "nope"], "'nope' is not key=value"),
        (["produce", "t", "-X", "transactional.id=tx"], "-X transactional.id is not for"),
    ],
)
def test_a_bad_setting_is_a_usage_error_before_any_connect(args: list[str], said: str) -> None:
    # Nothing listens at the address: the command must not get as far as trying it.
    done = run(*args, "-b", "127.0.0.1:9")
    assert done.returncode == 2, done
    assert said in done.stderr and "no broker available" not in done.stderr


def test_consume_e_on_an_empty_topic_exits_at_once(broker: RunningBroker) -> None:
    topic = fresh("empty")
    bootstrap = broker.bootstrap_servers
    assert run("topics", "create", topic, "-p", "2", "-b", bootstrap).returncode == 0
    done = run("consume", topic, "-e", "-b", bootstrap)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "0 records consumed\n")


def test_consume_a_partition_the_topic_does_not_have_is_an_error(broker: RunningBroker) -> None:
    """As ``produce -p`` and ``groups reset-offsets``: it would never be read
    (``-e`` waited for its end for ever)."""
    topic = fresh("two")
    bootstrap = broker.bootstrap_servers
    assert run("topics", "create", topic, "-p", "2", "-b", bootstrap).returncode == 0
    done = run("consume", topic, "-p", "1", "-p", "5", "-e", "-b", bootstrap)
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr == f"Error: {topic} has no partition 5\n"
