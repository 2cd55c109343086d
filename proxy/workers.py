"""``trafka proxy --workers N``: N proxy processes behind one bootstrap port,
and the supervisor that keeps them running.

One proxy is one trio loop, so one core of Python. Workers are whole proxies
(:func:`~.server.serve_proxy`), each in a process of its own; the parent
process (the supervisor, :func:`run_workers`) serves no client.

Rules:

* **The bootstrap ports are shared**: the proxy's and each named listener's
  (:mod:`.listeners`). Every worker binds them with ``SO_REUSEPORT``
  (:mod:`.startup`) and the kernel hands each new connection to one of them.
  The supervisor holds the ports (bound, not listening; a port 0 is chosen
  there, once) for as long as it runs, so a restarted worker always gets
  them back.
* **The broker ports are not.** Worker ``k`` serves broker ``n`` on
  ``node_port_base + k * stride + n`` (``stride``: ``--node-port-stride``,
  default :data:`DEFAULT_STRIDE`; a broker whose id is ``stride`` or more is
  served on a free port, logged), or on free ports without
  ``node_port_base``; and for each named listener likewise from the
  listener's own ``node_port_base``. The spans may not overlap each other
  or a bootstrap port (:func:`check_workers`). Its Metadata, FindCoordinator
  and DescribeCluster answers name its own ports only (on a named listener's
  connections, its ports for that listener).
* **Who owns a producer's sequences: the worker whose Metadata answer the
  client read.** Every connection a client opens from that answer (Produce,
  the coordinators, Fetch) reaches that worker, so one worker numbers a
  routed idempotent producer's batches, as one proxy does. Only a client's
  bootstrap connection may reach another worker; what it sends there
  (Metadata, ApiVersions, an InitProducerId) is served by the worker holding
  it, and an InitProducerId answered there only makes that worker expect the
  producer: the worker its Produce reaches, which did not pass the answer,
  asks the leaders for the producer's sequences before its first write, as
  for a producer that came through another proxy (:mod:`.keyrouting.sequences`).
  Clients send Metadata to the brokers they learned (Java, librdkafka 2.10
  and later) and so stay with their worker; a client moves to another worker
  only when it bootstraps again, which is a failover between two proxies
  (librdkafka's clients of a worker killed -9 all do, while it is down):
  without a journal, batches in flight at that moment can be written twice;
  ``--journal DIR`` lets the new worker find their placements in the lost
  one's journal (:mod:`.keyrouting.journal_peers`), ``--journal topic``'s claims order
  it (:mod:`.keyrouting.journal_topic`).
* **Journals.** ``--journal DIR``: worker ``k`` writes ``DIR/worker-k``, read
  by its restarts, and reads the other workers' for the producers that come
  to it from them (:mod:`.keyrouting.journal_peers`): a worker killed -9, its clients
  bootstrap again and reach another worker, which finds the placements of
  their batches in flight. ``--journal topic``: shared, each worker one
  instance.
* **Supervision.** A worker that ends while the proxy serves is started
  again with the ports it served (``ProxyConfig.node_ports``, and each named
  listener's ``node_ports``), so its
  clients find it where they left it: at once after a run of
  :data:`STABLE_S` or more, else after a delay doubling from
  :data:`FIRST_DELAY_S` to :data:`MAX_DELAY_S` (:class:`Backoff`). A worker
  that fails before its first start fails the whole proxy, and so does one
  that, started again, fails to start :data:`MAX_START_FAILURES` times in a
  row (its journal cannot be opened, say): restarting it would not mend it,
  and a proxy that serves with a worker missing for good says nothing
  (:class:`WorkerGaveUp`; ``trafka proxy`` exits 1 with its error). SIGTERM or SIGINT
  to the supervisor: SIGTERM to every worker (a clean stop each), SIGKILL to
  those still there after :data:`STOP_TIMEOUT_S`. A worker stops by itself
  when its pipe to the supervisor ends (the supervisor was killed).
* **Metrics.** With ``--metrics-listen``, each worker serves its own metrics
  on a free loopback port, and the supervisor's listener serves them all in
  one exposition, each sample labelled ``worker``
  (:func:`~.metrics.merged_exposition`), with ``trafka_proxy_worker_up`` and
  ``trafka_proxy_worker_restarts_total``; ``/readyz`` is 200 while a worker
  is up and an upstream bootstrap server takes connections.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import trio

from trafka.common.logformat import line_format, quiet_libraries
from trafka.common.metrics_http import Endpoint, serve_metrics
from trafka.discovery import announcing_listener

from .assembly import serve_proxy
from .config import ProxyConfig
from .keyrouting.worker_lives import Births, SupervisorLink
from .metrics import ProxyStatistics, merged_exposition
from .reload import Reloader, configured_filters, reloader, until_stopped
from .settings import DEFAULT_STRIDE, FilterSpec, Sources
from .startup import discover_upstream, shared_sockets, upstream_reachable

__all__ = [
    "DEFAULT_STRIDE",
    "Backoff",
    "WorkerGaveUp",
    "WorkersFailed",
    "check_workers",
    "run_workers",
    "worker_config",
]

log = logging.getLogger("trafka.proxy")

STABLE_S = 30.0
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0
MAX_START_FAILURES = 10
STOP_TIMEOUT_S = 30.0
_SCRAPE_TIMEOUT_S = 5.0
_SCRAPE_MAX_BYTES = 16 * 1024 * 1024
_NODES_EVERY_S = 0.2


class WorkersFailed(OSError):
    """A worker could not start (its own error says why)."""


class WorkerGaveUp(WorkersFailed):
    """A worker started again failed to start :data:`MAX_START_FAILURES` times in a row."""


def check_workers(config: ProxyConfig, workers: int, stride: int) -> None:
    """Refuse a worker count or stride that cannot be served.

    Raises:
        ValueError: fewer than one worker, a stride below one, the last
            worker's ports past 65535, or the workers' node ports of the
            proxy and of its named listeners overlapping each other or a
            bootstrap port.
    """
    if workers < 1:
        raise ValueError(f"workers must be 1 or more, not {workers}")
    if stride < 1:
        raise ValueError(f"the node port stride must be 1 or more, not {stride}")
    spans = [("the proxy", config.node_port_base)]
    spans += [(f"listener {n.name!r}", n.node_port_base) for n in config.listeners]
    taken = [(base, base + workers * stride - 1, who) for who, base in spans if base is not None]
    for first, last, who in taken:
        if last > 65535:
            raise ValueError(
                f"{who}: {workers} workers of {stride} node ports from {first} need ports up "
                f"to {last}, past 65535"
            )
    bootstraps = [config.port, *(n.port for n in config.listeners)]
    # (One process: its brokers' ports are unbounded, from each base, as without workers.)
    for i, (first, last, who) in enumerate(taken if workers > 1 else ()):
        for other_first, other_last, other in taken[i + 1 :]:
            if first <= other_last and other_first <= last:
                raise ValueError(
                    f"{who} and {other}: the workers' node ports {first}-{last} and "
                    f"{other_first}-{other_last} overlap (--node-port-stride, node_port_base)"
                )
        if any(first <= port <= last for port in bootstraps if port):
            raise ValueError(f"{who}: the workers' node ports {first}-{last} take a bootstrap port")


def worker_config(
    config: ProxyConfig,
    index: int,
    stride: int,
    node_ports: dict[int, int] | None = None,
    *,
    workers: int = 1,
    listener_ports: Mapping[tuple[str, int], int] | None = None,
) -> ProxyConfig:
    """The settings of worker ``index`` of ``workers`` (see the module's rules):
    the shared bootstrap ports, its own node ports, the proxy's and each named
    listener's (``node_ports``, ``listener_ports``: those it served before a
    restart), its own journal directory (the others' read), its metrics on a
    loopback port."""
    base = config.node_port_base
    served = listener_ports or {}
    listeners = tuple(
        replace(
            n,
            node_port_base=None if n.node_port_base is None else n.node_port_base + index * stride,
            node_port_span=None if n.node_port_base is None else stride,
            node_ports=tuple(sorted((i, p) for (name, i), p in served.items() if name == n.name)),
        )
        for n in config.listeners
    )
    journal = config.journal_dir
    peers = (
        ()
        if journal is None
        else tuple(str(Path(journal) / f"worker-{k}") for k in range(workers) if k != index)
    )
    return replace(
        config,
        reuse_port=True,
        node_port_base=None if base is None else base + index * stride,
        node_port_span=None if base is None else stride,
        node_ports=tuple(sorted((node_ports or {}).items())),
        listeners=listeners,
        journal_dir=None if journal is None else str(Path(journal) / f"worker-{index}"),
        journal_peer_dirs=peers,
        metrics_listen=None if config.metrics_listen is None else "127.0.0.1:0",
        announce=False,  # the supervisor announces the shared port
        filters=(),  # loaded again in the worker, from their specs
    )


class Backoff:
    """How long to wait before starting a worker again (see the module's rules)."""

    def __init__(self) -> None:
        self.quick_ends = 0

    def delay(self, ran_s: float) -> float:
        """The delay after a run that lasted ``ran_s`` seconds."""
        if ran_s >= STABLE_S:
            self.quick_ends = 0
        delay = 0.0 if not self.quick_ends else FIRST_DELAY_S * 2 ** (self.quick_ends - 1)
        self.quick_ends += 1
        return min(delay, MAX_DELAY_S)


@dataclass(frozen=True, slots=True)
class _Spec:
    """What a worker process is given (pickled)."""

    config: ProxyConfig
    index: int
    filter_specs: tuple[FilterSpec, ...]
    verbose: bool
    # What SIGHUP reloads from: the sources and the values of the configuration.
    reload: tuple[Sources, dict[str, Any]] | None = None


@dataclass(slots=True)
class _Slot:
    """One worker's place: its process now, what it told the supervisor."""

    index: int
    process: Any = None  # multiprocessing's spawned Process
    up: bool = False
    metrics_address: tuple[str, int] | None = None
    node_ports: dict[int, int] = field(default_factory=dict)
    listener_ports: dict[tuple[str, int], int] = field(default_factory=dict)
    restarts: int = 0
    ended: trio.Event = field(default_factory=trio.Event)


class _Supervisor:
    """The workers' slots, started, watched and stopped from the supervisor's
    trio loop."""

    def __init__(
        self,
        config: ProxyConfig,
        workers: int,
        stride: int,
        filter_specs: tuple[FilterSpec, ...],
        verbose: bool,
        reload: tuple[Sources, dict[str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.stride = stride
        self.filter_specs = filter_specs
        self.verbose = verbose
        self.reload = reload
        self.slots = [_Slot(k) for k in range(workers)]
        self.stopping = False
        self.upstream_reachable = False
        # Set with why once a worker is given up (the proxy then stops).
        self.gave_up = trio.Event()
        self.failure: str | None = None
        # Spawned, not forked: the supervisor runs a trio loop (and the
        # interpreter's threads), whose state a fork would copy half-way.
        self.context = multiprocessing.get_context("spawn")
        # The producers born through each worker, and the workers' ends
        # (:mod:`.keyrouting.worker_lives`): which a restarted worker may sync at once.
        self.births = Births(time.monotonic())

    def _start(self, slot: _Slot) -> Connection:
        # Duplex (a socket pair): each end sees the other close.
        ours, theirs = self.context.Pipe()
        spec = _Spec(
            worker_config(
                self.config,
                slot.index,
                self.stride,
                slot.node_ports,
                workers=len(self.slots),
                listener_ports=slot.listener_ports,
            ),
            slot.index,
            self.filter_specs,
            self.verbose,
            self.reload,
        )
        process = self.context.Process(
            target=_worker_main,
            args=(spec, theirs),
            name=f"trafka-proxy-worker-{slot.index}",
            daemon=True,
        )
        process.start()
        theirs.close()  # so that ours ends when the worker does
        slot.process, slot.ended = process, trio.Event()
        log.info("worker %d started (pid %d)", slot.index, process.pid)
        return ours

    async def keep(self, slot: _Slot, task_status: trio.TaskStatus[str | None]) -> None:
        """Run worker ``slot`` and start it again whenever it ends, until the
        proxy stops. Started (None) once the worker serves; started with the
        reason when it ends before it ever served."""
        backoff = Backoff()
        starting: trio.TaskStatus[str | None] | None = task_status
        failed_starts = 0
        while not self.stopping:
            began = trio.current_time()
            served, error = await self._run(slot, starting)
            code = slot.process.exitcode
            if self.stopping:
                return
            why = f"worker {slot.index}: {error or _exit(code)}"
            if starting is not None and not served:
                starting.started(why)
                return
            starting = None
            failed_starts = 0 if served else failed_starts + 1
            if failed_starts >= MAX_START_FAILURES:
                log.error("worker %d failed to start %d times in a row", slot.index, failed_starts)
                self.failure = f"{why} (started again, it failed {failed_starts} times in a row)"
                self.gave_up.set()
                return
            delay = backoff.delay(trio.current_time() - began)
            slot.restarts += 1
            log.warning(
                "worker %d (pid %d) ended (%s); starting it again%s",
                slot.index,
                slot.process.pid,
                _exit(code),
                f" in {delay:g} s" if delay else "",
            )
            await trio.sleep(delay)

    async def _run(
        self, slot: _Slot, task_status: trio.TaskStatus[str | None] | None
    ) -> tuple[bool, str | None]:
        """One run of a worker, to its end: whether it served, and what it said
        failed (None: nothing)."""
        conn = self._start(slot)
        served = False
        error: str | None = None
        try:
            while True:
                await trio.lowlevel.wait_readable(conn.fileno())
                try:
                    kind, value = conn.recv()
                except (EOFError, OSError):
                    break
                if kind == "ready":
                    served = slot.up = True
                    slot.metrics_address = value
                    if task_status is not None:
                        task_status.started(None)
                        task_status = None
                elif kind == "nodes":
                    slot.node_ports.update(value)
                elif kind == "listener_nodes":
                    for (name, node_id), port in value.items():
                        if slot.listener_ports.get((name, node_id)) != port:
                            slot.listener_ports[name, node_id] = port
                            log.info(
                                "worker %d serves broker %d on port %d for listener %s "
                                "(kept for its restarts)",
                                slot.index, node_id, port, name,
                            )  # fmt: skip
                elif kind == "failed":
                    error = value
                elif kind == "born":
                    self.births.born(*value)
                elif kind == "born_alive":
                    self._answer(conn, *value)
            await trio.lowlevel.wait_readable(slot.process.sentinel)
            slot.process.join()
        finally:
            # Seen ended no sooner than it ended (see worker_lives).
            self.births.ended(time.monotonic())
            slot.up, slot.metrics_address = False, None
            conn.close()
            slot.ended.set()
        return served, error

    def _answer(self, conn: Connection, qid: int, producer_id: int, epoch: int) -> None:
        """Answer a worker's question (:meth:`.keyrouting.worker_lives.SupervisorLink.born_alive`),
        every worker process checked alive now (one that died unseen counts)."""
        alive = all(
            s.process is None or s.ended.is_set() or s.process.is_alive() for s in self.slots
        )
        yes = self.births.answer(producer_id, epoch, alive, time.monotonic())
        try:
            conn.send(("born_alive", (qid, yes)))
        except OSError:
            pass  # the worker is gone: its end is read next

    async def stop(self) -> None:
        """SIGTERM to every worker, SIGKILL to those still there after the timeout."""
        self.stopping = True
        running = [s for s in self.slots if s.process is not None and not s.ended.is_set()]
        for slot in running:
            _signal(slot.process.pid, signal.SIGTERM)
        with trio.move_on_after(STOP_TIMEOUT_S):
            for slot in running:
                await slot.ended.wait()
        for slot in running:
            if not slot.ended.is_set():
                log.warning("worker %d did not stop in time: killing it", slot.index)
                _signal(slot.process.pid, signal.SIGKILL)
                await slot.ended.wait()

    def reloaded(self) -> None:
        """SIGHUP: the configuration checked and taken here first (a worker
        started later gets it), then handed to each worker, which reloads itself."""
        if self.reload is None:
            log.warning("received SIGHUP: no configuration to reload (started from code)")
            return
        log.info("received SIGHUP, reloading the configuration")
        again = Reloader(*self.reload, (), None)
        if not again.reload():
            return
        self.reload = (self.reload[0], again.values)
        self.filter_specs = again.values["filter"]
        self.config = replace(
            self.config,
            ssl_certfile=again.values["ssl_certfile"],
            ssl_keyfile=again.values["ssl_keyfile"],
        )
        for slot in self.slots:
            if slot.up:
                _signal(slot.process.pid, signal.SIGHUP)

    def ready(self) -> bool:
        return self.upstream_reachable and any(s.up for s in self.slots)

    async def probe_upstream(self) -> None:
        while True:
            self.upstream_reachable = await upstream_reachable(self.config)
            await trio.sleep(5)

    async def metrics(self) -> bytes:
        """Every worker's metrics in one exposition (the supervisor's ``/metrics``)."""
        pages: dict[int, bytes | None] = {}

        async def scrape(slot: _Slot) -> None:
            pages[slot.index] = (
                None if slot.metrics_address is None else await _scrape(slot.metrics_address)
            )

        async with trio.open_nursery() as nursery:
            for slot in self.slots:
                nursery.start_soon(scrape, slot)
        return merged_exposition(
            pages,
            {s.index: s.up for s in self.slots},
            {s.index: s.restarts for s in self.slots},
        )


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


async def _scrape(address: tuple[str, int]) -> bytes | None:
    """A worker's ``/metrics`` page (None: it did not answer in time)."""
    chunks: list[bytes] = []
    size = 0
    try:
        with trio.fail_after(_SCRAPE_TIMEOUT_S):
            stream = await trio.open_tcp_stream(*address)
            async with stream:
                await stream.send_all(b"GET /metrics HTTP/1.0\r\n\r\n")
                while data := await stream.receive_some(65536):
                    chunks.append(data)
                    size += len(data)
                    if size > _SCRAPE_MAX_BYTES:
                        return None
    except (OSError, trio.TooSlowError, trio.BrokenResourceError):
        return None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return body if head.split(b" ", 2)[1:2] == [b"200"] else None


def run_workers(
    config: ProxyConfig,
    workers: int,
    *,
    stride: int = DEFAULT_STRIDE,
    filter_specs: tuple[FilterSpec | str, ...] = (),
    verbose: bool = False,
    reload: tuple[Sources, Mapping[str, Any]] | None = None,
) -> None:
    """Serve with ``workers`` proxy processes until SIGINT or SIGTERM (the
    ``trafka proxy --workers`` command; blocking, from the main thread).

    Args:
        config: the proxy's settings (its ``filters`` are not passed on: the
            workers load ``filter_specs`` themselves).
        workers: how many worker processes.
        stride: node ports per worker (see the module's rules).
        filter_specs: the filters each worker runs (``module:attribute``, or
            with their settings).
        verbose: the workers log at DEBUG.
        reload: what SIGHUP reloads from (:mod:`.reload`; the supervisor hands
            the signal to each worker). None: SIGHUP reloads nothing.

    Raises:
        ValueError: settings that cannot be served.
        OSError: the bootstrap port cannot be bound, or a worker failed to
            start (:class:`WorkersFailed`).
    """
    check_workers(config, workers, stride)
    specs = tuple(FilterSpec(s) if isinstance(s, str) else s for s in filter_specs)
    again = None if reload is None else (reload[0], dict(reload[1]))
    supervisor = _Supervisor(config, workers, stride, specs, verbose, again)
    trio.run(_supervise, supervisor)


async def _supervise(supervisor: _Supervisor) -> None:
    config = supervisor.config
    config = await discover_upstream(config)
    held = shared_sockets(config.host, config.port, listen=False)
    failed: str | None = None
    try:
        port = held[0].getsockname()[1]
        # The named listeners' bootstrap ports too (port 0: the one found here).
        listeners = []
        for named in config.listeners:
            sockets = shared_sockets(named.host, named.port, listen=False)
            held += sockets
            listeners.append(replace(named, port=sockets[0].getsockname()[1]))
        config = supervisor.config = replace(config, port=port, listeners=tuple(listeners))
        signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        with trio.open_signal_receiver(*signums) as signals:
            async with trio.open_nursery() as nursery:
                failed = await _start_all(supervisor, nursery)
                if failed is None:
                    async with _serving(config, supervisor, nursery, port):
                        await _until_stopped(signals, supervisor)
                await supervisor.stop()
                nursery.cancel_scope.cancel()
    finally:
        for sock in held:
            sock.close()
    if failed is not None:
        raise WorkersFailed(failed)
    if supervisor.failure is not None:
        raise WorkerGaveUp(supervisor.failure)
    log.info("proxy stopped")


async def _until_stopped(signals: AsyncIterator[int], supervisor: _Supervisor) -> None:
    """Return at SIGINT or SIGTERM, or once a worker is given up."""
    async with trio.open_nursery() as nursery:

        async def on_signal() -> None:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    supervisor.reloaded()
                    continue
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()

        async def on_give_up() -> None:
            await supervisor.gave_up.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(on_signal)
        nursery.start_soon(on_give_up)


async def _start_all(supervisor: _Supervisor, nursery: trio.Nursery) -> str | None:
    """Start every worker at once; what one that failed said (None: all serve)."""
    failures: list[str] = []

    async def start(slot: _Slot) -> None:
        failed = await nursery.start(supervisor.keep, slot)
        if failed is not None:
            failures.append(failed)

    async with trio.open_nursery() as starting:
        for slot in supervisor.slots:
            starting.start_soon(start, slot)
    return failures[0] if failures else None


@asynccontextmanager
async def _serving(
    config: ProxyConfig, supervisor: _Supervisor, nursery: trio.Nursery, port: int
) -> AsyncIterator[None]:
    """What the supervisor serves once every worker does: the metrics
    listener and the announcement."""
    advertised = config.advertised_host or config.host
    async with AsyncExitStack() as stack:
        if config.metrics_listen is not None:
            host, _, metrics_port = config.metrics_listen.rpartition(":")
            served = await trio.open_tcp_listeners(int(metrics_port), host=host.strip("[]") or None)
            endpoint = Endpoint(lambda: b"", supervisor.ready, {"/metrics": supervisor.metrics})
            await nursery.start(serve_metrics, endpoint, served)
            nursery.start_soon(supervisor.probe_upstream)
        if config.announce:
            protocol = "SSL" if config.ssl_certfile else None
            await stack.enter_async_context(
                announcing_listener("proxy", advertised, port, security_protocol=protocol)
            )
        log.info(
            "proxy on %s:%d for %s (%d workers)",
            advertised,
            port,
            ",".join(config.upstream),
            len(supervisor.slots),
        )
        yield


# -- the worker process ----------------------------------------------------------------


def _worker_main(spec: _Spec, conn: Connection) -> None:
    """A worker process: one proxy, its news sent to the supervisor over ``conn``."""
    logging.basicConfig(
        level=logging.DEBUG if spec.verbose else logging.INFO,
        format=line_format(f"[worker {spec.index}] "),
    )
    quiet_libraries(logging.DEBUG if spec.verbose else logging.INFO)
    try:
        config = replace(spec.config, filters=configured_filters(spec.filter_specs))
        trio.run(_serve_worker, config, conn, spec.reload)
    except (ValueError, OSError) as exc:
        log.error("cannot start: %s", exc)
        conn.send(("failed", str(exc)))
        sys.exit(1)
    except KeyboardInterrupt:
        pass


async def _serve_worker(
    config: ProxyConfig, conn: Connection, reload: tuple[Sources, dict[str, Any]] | None
) -> None:
    link = SupervisorLink(conn)
    link.install()  # this process's key routing asks it (see worker_lives)
    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    with trio.open_signal_receiver(*signums) as signals:
        async with serve_proxy(config) as running:
            conn.send(("ready", running.metrics_address))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_report_nodes, running.statistics, conn)
                # Answers the worker's questions; stops it when the
                # supervisor is gone (its end of the pipe closed).
                nursery.start_soon(link.read, nursery.cancel_scope)
                again = reloader(reload, running.filters, running.client_tls)
                await until_stopped(signals, again)
                nursery.cancel_scope.cancel()
    log.info("worker stopped")


async def _report_nodes(stats: ProxyStatistics, conn: Connection) -> None:
    """Tell the supervisor the ports this worker serves brokers on (its own and
    its named listeners'), as they open."""
    told: dict[int, int] = {}
    told_named: dict[tuple[str, int], int] = {}
    while True:
        ports = {node_id: port for node_id, (_, port) in stats.nodes.items()}
        if ports != told:
            conn.send(("nodes", ports))
            told = ports
        if stats.listener_nodes != told_named:
            told_named = dict(stats.listener_nodes)
            conn.send(("listener_nodes", told_named))
        await trio.sleep(_NODES_EVERY_S)
