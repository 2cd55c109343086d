"""Test hosts made of Linux network namespaces: each joined to one bridge by a veth pair.

A :class:`NetLab` owns, for one run, a bridge ``fz<run>br`` in the root namespace
(address ``10.201.N.1``: the *client host*, where the workload and the checker
run) and one namespace per host (``fz<run>-<name>``, address ``10.201.N.<k>``),
``N`` a subnet no other live run holds. Nothing leaves the machine.

Faults between hosts:

* :meth:`NetLab.isolate` / :meth:`NetLab.heal`: a symmetric cut between two
  groups of hosts, made of ``blackhole`` routes (iproute2; no packet filter is
  installed here) in both hosts' namespaces: neither side can send to the other,
  established TCP connections stall as they do behind a partition, new ones fail.
  The client host (the root namespace) is not cut by these (it is the machine's):
  clients that a schedule cuts run in a host of their own (:func:`in_namespace`
  puts the calling thread, and the threads it starts, in a host's namespace;
  :func:`run_in_namespace` runs a trio loop there, the threads it starts
  staying in the process's own namespace).
* :meth:`NetLab.cut_one_way`: ``a`` can no longer send to ``b`` while ``b``
  still sends to ``a``. No packet filter (nftables, iptables) nor tc's drop
  action is in this kernel, so it is a tc queue on ``a``'s interface: an htb
  root whose class for ``b``'s address (a u32 match) ends in a ``pfifo`` of
  length 0, which drops every packet it is given, silently, as a lossy link does
  (a blackhole route fails the sender's own call instead). TCP needs both ways,
  so a connection across a one-way cut stalls like a symmetric one; what differs
  is that ``b``'s packets (its SYNs, its data, its retransmissions) still arrive.
* processes: :meth:`NetLab.spawn` runs a command in a host's namespace
  (``ip netns exec`` execs it: the Popen's pid is the process itself, so
  SIGSTOP/SIGCONT/SIGKILL reach it).

Cleanup: :meth:`NetLab.close` kills what it spawned and removes the namespaces,
the bridge and its claim on the subnet; it also runs from a finalizer at exit.
A run killed before it could clean up leaves a state file naming its pid in
``STATE_DIR``: :func:`remove_stale` (called by every new lab) removes the
namespaces, bridge and processes of every run whose pid is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import trio

STATE_DIR = Path("/tmp/trafka-faults")
PREFIX = "fz"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def available() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        ip("netns", "list")
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"ip netns does not work: {exc}"
    return None


CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def in_namespace(namespace: str | None) -> Iterator[None]:
    """Run the calling thread (and the threads it starts meanwhile) in ``namespace``
    (a name of ``ip netns``; None: stay), back in its own afterwards. A network
    namespace is a thread's own (setns(2)), so the rest of the process stays."""
    if namespace is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {namespace}")
        try:
            yield
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)


@functools.cache
def _home() -> int:
    """The process's own network namespace (its main thread's), opened once."""
    return os.open("/proc/self/ns/net", os.O_RDONLY)


def _go_home(*_: object) -> None:
    """First thing in a thread started while :func:`run_in_namespace` runs: back
    to the process's namespace (then no more profiling)."""
    sys.setprofile(None)
    ctypes.CDLL(None, use_errno=True).setns(_home(), CLONE_NEWNET)


def run_in_namespace(namespace: str | None, main: Callable[[], Awaitable[Any]]) -> Any:
    """``trio.run(main)`` as a client of the host ``namespace`` (None: the machine's):
    its thread, and so the sockets it makes, in the host's namespace, and every
    thread started meanwhile in the process's own.

    Not :func:`in_namespace` around ``trio.run`` alone: a thread inherits the
    network namespace of the thread that starts it, and trio keeps its worker
    threads for the next ``to_thread`` call of any run in the process, so
    workers started by that loop carried the host's namespace into later tests
    (a brokerlite cluster's ZooKeeper client connected from the lab's host,
    and failed). ``threading.setprofile`` runs :func:`_go_home` first in each
    thread started meanwhile; a worker that needs the host (a librdkafka client)
    enters it itself."""
    if namespace is None:
        return trio.run(main)
    _home()  # opened here, in the process's namespace
    with in_namespace(namespace):
        threading.setprofile(_go_home)
        try:
            return trio.run(main)
        finally:
            threading.setprofile(None)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(run: str, namespaces: Iterable[str]) -> None:
    for ns in namespaces:
        for pid in ip("netns", "pids", ns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        ip("netns", "del", ns, check=False)
    ip("link", "del", f"{PREFIX}{run}br", check=False)
    for path in STATE_DIR.glob(f"*{run}*"):
        path.unlink(missing_ok=True)


def remove_stale() -> list[str]:
    """Remove what runs whose process is gone left behind; the runs removed."""
    removed = []
    for state in STATE_DIR.glob("run-*.json"):
        try:
            info = json.loads(state.read_text())
        except (OSError, ValueError):
            continue
        if _alive(info["pid"]):
            continue
        run = info["run"]
        listed = ip("netns", "list", check=False).stdout.split("\n")
        _remove(run, [ln.split()[0] for ln in listed if ln.startswith(f"{PREFIX}{run}-")])
        removed.append(run)
    return removed


def _claim_subnet(run: str) -> int:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    used = ip("-o", "-4", "addr", check=False).stdout
    for n in range(1, 250):
        if f" 10.201.{n}." in used:
            continue
        try:
            fd = os.open(STATE_DIR / f"subnet-{n}-{run}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.close(fd)
        if len(list(STATE_DIR.glob(f"subnet-{n}-*"))) == 1:
            return n
        (STATE_DIR / f"subnet-{n}-{run}").unlink()
    raise RuntimeError("no free 10.201.N.0/24 subnet")


class NetLab:
    """One run's bridge and namespaces (see the module)."""

    def __init__(self) -> None:
        remove_stale()
        self.run = secrets.token_hex(3)[:5]
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / f"run-{self.run}.json").write_text(
            json.dumps({"run": self.run, "pid": os.getpid()})
        )
        self.subnet = _claim_subnet(self.run)
        self.hosts: dict[str, str] = {}  # host name -> address
        self.cuts: set[tuple[str, str]] = set()
        self.one_way: set[tuple[str, str]] = set()  # (from, to) cut by tc
        self.procs: list[subprocess.Popen[bytes]] = []
        self.bridge = f"{PREFIX}{self.run}br"
        self.client_address = f"10.201.{self.subnet}.1"
        self._finalizer = weakref.finalize(self, _remove, self.run, [])
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.client_address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def namespace(self, host: str) -> str:
        return f"{PREFIX}{self.run}-{host}"

    def add_host(self, host: str) -> str:
        """Make a host (a namespace on the bridge); its address."""
        index = len(self.hosts) + 2
        address = f"10.201.{self.subnet}.{index}"
        ns = self.namespace(host)
        veth = f"{PREFIX}{self.run}v{index}"
        ip("netns", "add", ns)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(
            self, _remove, self.run, [self.namespace(h) for h in [*self.hosts, host]]
        )
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        self.hosts[host] = address
        return address

    def spawn(
        self, host: str, argv: list[str], log: IO[bytes], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(host), *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def _route(self, op: str, host: str, peer: str) -> None:
        ip("-n", self.namespace(host), "route", op, "blackhole", f"{self.hosts[peer]}/32")

    def isolate(self, a: Iterable[str], b: Iterable[str]) -> None:
        """Cut every link between a host of ``a`` and one of ``b`` (both ways)."""
        for x in a:
            for y in b:
                if x == y or (x, y) in self.cuts:
                    continue
                self._route("add", x, y)
                self._route("add", y, x)
                self.cuts |= {(x, y), (y, x)}

    def cut_one_way(self, a: Iterable[str], b: Iterable[str]) -> None:
        """Drop every packet a host of ``a`` sends to one of ``b`` (not the reverse)."""
        self.one_way |= {(x, y) for x in a for y in b if x != y}
        self._queue({x for x, _ in self.one_way})

    def _queue(self, hosts: Iterable[str]) -> None:
        """Set each host's tc queue to drop what it sends to the hosts it is cut from."""
        for host in hosts:
            tc = ["ip", "netns", "exec", self.namespace(host), "tc"]
            subprocess.run([*tc, "qdisc", "del", "dev", "eth0", "root"], capture_output=True)
            peers = [y for x, y in sorted(self.one_way) if x == host]
            if not peers:
                continue
            for step in (
                "qdisc add dev eth0 root handle 1: htb default 1",
                "class add dev eth0 parent 1: classid 1:1 htb rate 10gbit",
                "class add dev eth0 parent 1: classid 1:2 htb rate 10gbit",
                "qdisc add dev eth0 parent 1:2 handle 20: pfifo limit 0",
                *(f"filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst "
                  f"{self.hosts[y]}/32 flowid 1:2" for y in peers),
            ):  # fmt: skip
                subprocess.run([*tc, *step.split()], capture_output=True, check=True)

    def heal(self, a: Iterable[str] | None = None, b: Iterable[str] | None = None) -> None:
        """Restore the links cut between ``a`` and ``b`` (every cut, symmetric or one
        way, when not given)."""
        pairs = (
            set(self.cuts) if a is None or b is None else {(x, y) for x in a for y in b if x != y}
        )
        for x, y in pairs & self.cuts:
            self._route("del", x, y)
            self.cuts.discard((x, y))
        if a is None or b is None:
            pairs |= self.one_way
        else:
            pairs |= {(y, x) for x, y in pairs}
        healed = pairs & self.one_way
        self.one_way -= healed
        self._queue({x for x, _ in healed})

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                proc.wait()
        self._finalizer()

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
