"""The namespace harness itself (netlab.py): a cut between two hosts stops traffic both
ways and only between them, a heal restores it, and what a killed run left
behind (namespaces, bridge, processes) is removed by the next run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import netlab
import pytest
import trio

pytestmark = pytest.mark.skipif(netlab.available() is not None, reason=str(netlab.available()))

SERVER = "import socket,time; s=socket.create_server(({!r}, 7000)); time.sleep(600)"


def connects(lab: netlab.NetLab, host: str, address: str) -> bool:
    probe = f"import socket; socket.create_connection(({address!r}, 7000), 3).close()"
    done = subprocess.run(
        ["ip", "netns", "exec", lab.namespace(host), sys.executable, "-c", probe],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def test_isolate_cuts_both_ways_and_heal_restores():
    with netlab.NetLab() as lab:
        addresses = {h: lab.add_host(h) for h in ("a", "b", "c")}
        for h in ("a", "b"):
            lab.spawn(h, [sys.executable, "-c", SERVER.format(addresses[h])], subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (connects(lab, "c", addresses["a"]) and connects(lab, "c", addresses["b"])):
            assert time.monotonic() < deadline, "the servers did not listen"
            time.sleep(0.2)
        assert connects(lab, "a", addresses["b"])
        lab.isolate(["a"], ["b"])
        assert not connects(lab, "a", addresses["b"])
        assert not connects(lab, "b", addresses["a"])
        assert connects(lab, "c", addresses["a"])
        assert connects(lab, "c", addresses["b"])
        lab.heal()
        assert connects(lab, "a", addresses["b"])
        assert connects(lab, "b", addresses["a"])


def test_a_killed_runs_leftovers_are_removed():
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(netlab.__file__.rsplit("/", 1)[0])!r})
        import netlab
        lab = netlab.NetLab()
        lab.add_host("x")
        lab.spawn("x", [sys.executable, "-c", "import time; time.sleep(600)"], None)
        print(lab.run, lab.namespace("x"), flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        run, ns = proc.stdout.readline().split()
    finally:
        proc.kill()
        proc.wait()
    assert ns in netlab.ip("netns", "list").stdout
    # (another run starting meanwhile may have removed it first: the same code)
    netlab.remove_stale()
    assert ns not in netlab.ip("netns", "list").stdout
    assert f"{netlab.PREFIX}{run}br" not in netlab.ip("link").stdout


RECEIVE = (
    "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
    "s.bind((sys.argv[1], 7001)); s.settimeout(5); print(s.recv(100).decode())"
)


def datagram_arrives(lab: netlab.NetLab, src: str, dst: str) -> bool:
    """A UDP datagram sent (a few times, a lossless link loses none) from ``src`` to
    ``dst`` reaches it: one direction of a link, without TCP's return path."""
    address = lab.hosts[dst]
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", lab.namespace(dst), sys.executable, "-c", RECEIVE, address],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    send = (
        "import socket,sys,time\n"
        "for _ in range(10):\n"
        "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hi', (sys.argv[1], 7001))\n"
        "    time.sleep(0.1)\n"
    )
    with netlab.in_namespace(lab.namespace(src)):
        subprocess.run([sys.executable, "-c", send, address], check=True)
    return receiver.communicate(timeout=30)[0].strip() == "hi"


def test_one_way_cut_drops_one_direction_only_and_heals():
    with netlab.NetLab() as lab:
        addresses = {h: lab.add_host(h) for h in ("a", "b")}
        lab.spawn("b", [sys.executable, "-c", SERVER.format(addresses["b"])], subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not connects(lab, "a", addresses["b"]):
            assert time.monotonic() < deadline, "the server did not listen"
            time.sleep(0.2)
        lab.cut_one_way(["a"], ["b"])
        assert not datagram_arrives(lab, "a", "b")
        assert datagram_arrives(lab, "b", "a")
        # TCP needs both directions: a connection from either side fails.
        assert not connects(lab, "a", addresses["b"])
        lab.heal()
        assert datagram_arrives(lab, "a", "b")
        assert connects(lab, "a", addresses["b"])


def test_a_namespaced_trio_run_leaves_no_thread_in_the_hosts_namespace():
    """run_in_namespace: the run's sockets are made in the host's namespace (a
    socket binds the host's address, which only the host has), while the
    threads it starts, trio's workers, stay in the process's own. A thread inherits the namespace
    of the thread that starts it and trio keeps its workers for the next run,
    so a loop run inside the host's namespace left workers there, and a later
    test's ZooKeeper client, connected from one, could not reach its server."""
    home = os.readlink("/proc/thread-self/ns/net")
    jobs = 12  # more than trio may hold idle: the run starts workers of its own

    def namespace_of_thread(gate: threading.Barrier) -> str:
        gate.wait(30)  # every job at once: one worker each
        return os.readlink("/proc/thread-self/ns/net")

    async def namespaces() -> set[str]:
        gate, found = threading.Barrier(jobs), set()

        async def one() -> None:
            found.add(await trio.to_thread.run_sync(namespace_of_thread, gate))

        async with trio.open_nursery() as nursery:
            for _ in range(jobs):
                nursery.start_soon(one)
        return found

    with netlab.NetLab() as lab:
        address = lab.add_host("a")

        async def client() -> set[str]:
            with socket.socket() as sock:  # made as the SDK makes its own
                sock.bind((address, 0))  # in the host's namespace
            return await namespaces()

        assert netlab.run_in_namespace(lab.namespace("a"), client) == {home}
        assert trio.run(namespaces) == {home}  # a later run's workers

        with socket.socket() as sock, pytest.raises(OSError):
            sock.bind((address, 0))  # not an address of the machine's
