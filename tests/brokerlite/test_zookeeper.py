"""The private ZooKeeper server (:mod:`trafka.brokerlite.dev.zookeeper_server`) with kazoo as client.

The server tests skip when ZooKeeper (Debian's ``zookeeper`` package) is missing;
the tests of the error messages run anyway. Every kazoo call has its own short
timeout under the module's deadline.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState

from trafka.brokerlite.dev import zookeeper_server as zk_module
from trafka.brokerlite.dev.zookeeper_server import (
    CLASSPATH_ENV,
    ZooKeeperError,
    ZooKeeperServer,
    find_zookeeper,
    zookeeper_available,
)

pytestmark = pytest.mark.timeout(90)

needs_zookeeper = pytest.mark.skipif(
    not zookeeper_available(),
    reason="ZooKeeper not found (apt-get install zookeeper, or set TRAFKA_ZOOKEEPER_CLASSPATH)",
)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path / "zk") as zk:
        yield zk


@pytest.fixture
def connect() -> Iterator[Callable[..., KazooClient]]:
    """``connect(hosts) -> KazooClient``, started; every client is closed after the test."""
    clients: list[KazooClient] = []

    def connect_(hosts: str, **kwargs: object) -> KazooClient:
        client = KazooClient(hosts=hosts, timeout=5.0, **kwargs)
        clients.append(client)
        client.start(timeout=10.0)
        return client

    yield connect_
    for client in clients:
        client.stop()
        client.close()


@needs_zookeeper
def test_start_serves_kazoo_reads_and_writes(
    server: ZooKeeperServer, connect: Callable[..., KazooClient]
) -> None:
    assert server.running
    host, port = server.connect_string.rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) == server.port > 0
    client = connect(server.connect_string)
    client.create("/brokers/ids/1", b'{"host":"127.0.0.1"}', makepath=True)
    data, stat = client.get("/brokers/ids/1")
    assert data == b'{"host":"127.0.0.1"}'
    assert stat.version == 0
    assert client.get_children("/brokers/ids") == ["1"]
    # ZooKeeper's files stay in data_dir; its logging goes to the log file.
    assert (server.data_dir / "zoo.cfg").is_file()
    assert (server.data_dir / "data" / "version-2").is_dir()
    assert "ZooKeeper starting on" in server.log_path.read_text()


@needs_zookeeper
def test_ephemeral_znode_goes_with_its_session(
    server: ZooKeeperServer, connect: Callable[..., KazooClient]
) -> None:
    owner = connect(server.connect_string)
    watcher = connect(server.connect_string)
    owner.create("/controller", b"1", ephemeral=True)
    assert watcher.exists("/controller") is not None
    owner.stop()  # closes the session, which deletes its ephemeral znodes
    assert wait_for(lambda: watcher.exists("/controller") is None, timeout=5.0)


@needs_zookeeper
def test_restart_keeps_port_and_persistent_data(
    server: ZooKeeperServer, connect: Callable[..., KazooClient]
) -> None:
    connect_string = server.connect_string
    client = connect(connect_string)
    client.create("/config/topics/t", b"persistent", makepath=True)
    client.create("/brokers/ids/7", b"ephemeral", ephemeral=True, makepath=True)
    client.stop()

    server.restart(timeout=30.0)

    assert server.running
    assert server.connect_string == connect_string
    again = connect(connect_string)
    assert again.get("/config/topics/t")[0] == b"persistent"
    assert again.exists("/brokers/ids/7") is None


@needs_zookeeper
def test_kill_makes_clients_lose_the_connection(
    server: ZooKeeperServer, connect: Callable[..., KazooClient]
) -> None:
    client = connect(server.connect_string)
    client.create("/kept", b"v")
    lost = threading.Event()
    back = threading.Event()

    def listener(state: str) -> None:
        if state == KazooState.SUSPENDED:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            back.set()

    client.add_listener(listener)
    pid = server.pid
    assert pid is not None
    server.kill()

    assert not server.running
    assert lost.wait(10.0), "kazoo did not notice that ZooKeeper died"
    assert not _process_alive(pid)
    server.kill()  # killing a dead server is harmless
    server.stop()

    # Back within the session timeout (5 s): the same session resumes.
    server.start(timeout=30.0)
    assert back.wait(10.0), "kazoo did not reconnect after the restart"
    assert client.get("/kept")[0] == b"v"


def _process_alive(pid: int) -> bool:
    # The server reaps its JVM, so a dead one no longer exists at all.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@needs_zookeeper
def test_context_manager_stops_and_start_twice_is_an_error(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zk", tick_ms=200, max_session_timeout_ms=4000) as zk:
        pid = zk.pid
        assert pid is not None
        with pytest.raises(ZooKeeperError, match="already running"):
            zk.start()
        assert "tickTime=200" in (zk.data_dir / "zoo.cfg").read_text()
    assert not zk.running
    assert zk.pid is None
    assert wait_for(lambda: not _process_alive(pid), timeout=5.0)
    zk.stop()  # stopping a stopped server is harmless


@needs_zookeeper
def test_taken_fixed_port_is_a_clear_error(server: ZooKeeperServer, tmp_path: Path) -> None:
    other = ZooKeeperServer(tmp_path / "other", port=server.port)
    with pytest.raises(ZooKeeperError, match="is in use"):
        other.start(timeout=10.0)
    assert not other.running


def test_connect_string_before_first_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperError, match="first start"):
        _ = ZooKeeperServer(tmp_path).connect_string
    assert ZooKeeperServer(tmp_path, port=2181).connect_string == "127.0.0.1:2181"


def test_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="port"):
        ZooKeeperServer(tmp_path, port=70000)
    with pytest.raises(ValueError, match="max_session_timeout_ms"):
        ZooKeeperServer(tmp_path, tick_ms=2000, max_session_timeout_ms=3000)


def test_missing_classpath_variable_entry_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime")
    missing = tmp_path / "zookeeper-3.8.jar"
    monkeypatch.setenv(CLASSPATH_ENV, str(missing))
    with pytest.raises(ZooKeeperError) as info:
        find_zookeeper()
    assert CLASSPATH_ENV in str(info.value)
    assert str(missing) in str(info.value)
    assert not zookeeper_available()


def test_missing_zookeeper_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime")
    monkeypatch.delenv(CLASSPATH_ENV, raising=False)
    monkeypatch.setattr(zk_module, "DEBIAN_JAVA_DIR", tmp_path)
    with pytest.raises(ZooKeeperError) as info:
        find_zookeeper()
    message = str(info.value)
    assert "apt-get install zookeeper" in message
    assert CLASSPATH_ENV in message
    with pytest.raises(ZooKeeperError, match="apt-get install zookeeper"):
        ZooKeeperServer(tmp_path / "zk").start(timeout=5.0)


def test_bad_java_home_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(ZooKeeperError, match="JAVA_HOME"):
        find_zookeeper()


def test_missing_classpath_argument_fails_before_launching(tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime")
    server = ZooKeeperServer(tmp_path / "zk", classpath=str(tmp_path / "nope.jar"))
    with pytest.raises(ZooKeeperError, match="classpath argument names"):
        server.start(timeout=5.0)
    assert not server.running
    assert not (tmp_path / "zk" / "zookeeper.log").exists()


def test_classpath_without_zookeeper_reports_the_log_tail(tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime")
    empty = tmp_path / "empty"
    empty.mkdir()
    server = ZooKeeperServer(tmp_path / "zk", classpath=str(empty))
    with pytest.raises(ZooKeeperError) as info:
        server.start(timeout=30.0)
    message = str(info.value)
    assert "exited with code" in message
    assert "ZooKeeperServerMain" in message  # Java's "could not find or load main class"
    assert not server.running


# --- the shared fixtures (tests/brokerlite/conftest.py) ---------------------------------------


def test_zk_chroot_gives_each_test_an_empty_corner(
    zookeeper: ZooKeeperServer, zk_chroot: Any, connect: Callable[..., KazooClient]
) -> None:
    assert zk_chroot.path.startswith("/t-")
    assert zk_chroot.connect_string == zookeeper.connect_string + zk_chroot.path
    assert zk_chroot.server_connect_string == zookeeper.connect_string
    client = connect(zk_chroot.connect_string)
    assert client.get_children("/") == []
    client.create("/brokers/ids/0", b"b0", makepath=True)
    root = connect(zookeeper.connect_string)
    assert root.get(zk_chroot.path + "/brokers/ids/0")[0] == b"b0"


def test_zk_chroot_differs_per_test(zk_chroot: Any, connect: Callable[..., KazooClient]) -> None:
    # The previous test's znodes are not visible here.
    client = connect(zk_chroot.connect_string)
    assert client.get_children("/") == []


def test_make_zookeeper_gives_private_servers(
    zookeeper: ZooKeeperServer, make_zookeeper: Any
) -> None:
    private = make_zookeeper(tick_ms=250, max_session_timeout_ms=5000)
    idle = make_zookeeper(start=False)
    assert private.running and not idle.running
    assert private.port != zookeeper.port
    private.kill()
    assert not private.running
    assert zookeeper.running
