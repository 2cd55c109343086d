"""The placement journal kept in the upstream cluster: exactly once across
the loss of a proxy, and any proxy instance taking over a client's retries.

Opt-in (``ProxyConfig(journal_topic=True)``, ``trafka proxy --journal topic``).
The same records as the directory journal (:mod:`.journal`), in a compacted
topic of the cluster the proxy serves (:data:`TOPIC`, created by the first
proxy that needs it: replication factor min(3, brokers), ``min.insync.replicas``
2 when it is 3), so that they outlive the proxy's machine.

Rules:

* All of a producer id's records are in one partition of the topic (the id
  modulo the partition count): that partition orders them.
* Two kinds of record, keyed so that compaction keeps the live state and
  nothing else:

  - ``p:<producer id>:<topic>:<partition>:<instance>``: the placements of
    the client's last :data:`~.sequences.CLIENT_BATCHES_KEPT` batches of
    that partition (a *window*, written whole each time it changes, with the
    offset of its writer's claim): a client retries only the batches it has
    in flight, and a new record replaces the old one. One key per instance,
    so that a fenced instance's late write never compacts away the owner's.
  - ``c:<producer id>``: the producer's *claim*: the proxy instance that owns
    its sequences from that offset on.
  - ``b:<producer id>``: a *beat*, empty, written for the fencing check
    before batches are written again whose placements did not change.

* **Who owns a producer's sequences.** The instance whose claim is the last
  one in the producer's partition. A proxy claims a producer before it
  routes the producer's first request (a new producer, a client that failed
  over, a restart): it writes its claim with acks=all and reads the partition
  up to it, which gives it every placement of the previous owner that counts.
  A window written by an instance that is not the owner at its offset is
  void (a fenced proxy's late write changes nothing); of two windows of a
  client partition, the one whose writer claimed last counts (its claim
  record may have been compacted away, its offset is in the window).
* **Fencing.** Before writing a producer's upstream batches, the proxy writes
  their placements with acks=all (:meth:`TopicJournal.record`) and reads its
  partition up to them. If a later claim of another instance is there, the
  proxy is fenced: it writes nothing (:class:`~.journal.JournalFenced`), and
  forgets the producer (should the client come back, it claims again).
  So a proxy writes a producer's batches only while it owns the producer, up
  to the moment of its own placement record.
* **Taking over a live producer.** The previous owner may have written
  placements just before the claim, and be writing their batches still. The
  new owner waits ``takeover_grace`` seconds after its claim (holding the
  client's request while its deadline allows, else answering it with a
  retriable error) before it asks the leaders for the producer's sequences
  (DescribeProducers). An old owner's write that took longer than that to
  reach its broker can clash with the new numbers (the client hears a
  retriable error and retries; nothing is written twice unless such a write
  was paused past the grace, see docs/proxy.md).
* When the cluster cannot take the journal's writes (no leader, too few
  in-sync replicas, unreachable), :meth:`TopicJournal.record` fails with
  :class:`~.journal.JournalError`: the routed batches are not written and the
  client hears a retriable error.
* **Format versions.** A window's and a claim's value (JSON objects) carry
  ``"v"``, their format (:data:`FORMAT`); one without it is of format 1,
  written before the format had a version, and read as 2 (the fields are the
  same). A record of a newer format than this proxy knows is skipped with an
  error logged (a newer proxy shares the topic: upgrade this one). A format 1
  proxy reads format 2 records, ignoring ``"v"``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from trafka.codec.errors import ErrorCode, KafkaError, TrafkaError
from trafka.sdk import (
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)

from ..config import JOURNAL_TOPIC
from .journal import JournalError, JournalFenced, JournalWrite, PlacementJournal
from .sequences import CLIENT_BATCHES_KEPT, Placement, PlacementKey

__all__ = ["TOPIC", "TopicJournal"]

log = logging.getLogger("trafka.proxy")

TOPIC = JOURNAL_TOPIC
# The records' format version (see the module's rules).
FORMAT = 2
DEFAULT_PARTITIONS = 12
_RETRY_S = 1.0
_SWEEP_S = 60.0

# (producer id, topic, partition) of a client partition's window.
_WindowKey = tuple[int, str, int]
# (epoch, base sequence, placement), oldest first.
_Window = list[tuple[int, int, Placement]]


@dataclass(frozen=True, slots=True)
class _Claim:
    instance: str
    epoch: int
    offset: int


def window_key(key: _WindowKey, instance: str) -> bytes:
    pid, topic, partition = key
    return f"p:{pid}:{topic}:{partition}:{instance}".encode()


def claim_key(pid: int) -> bytes:
    return f"c:{pid}".encode()


def beat_key(pid: int) -> bytes:
    return f"b:{pid}".encode()


def encode_window(claimed: int, window: _Window) -> bytes:
    """A window's value; ``claimed``: the offset of its writer's claim."""
    rows = [[e, b, p.count, [list(t) for t in p.targets]] for e, b, p in window]
    return json.dumps({"v": FORMAT, "c": claimed, "w": rows}, separators=(",", ":")).encode()


def encode_claim(instance: str, epoch: int) -> bytes:
    """A claim's value: the claiming instance, at the producer's ``epoch``."""
    return json.dumps({"v": FORMAT, "o": instance, "e": epoch}, separators=(",", ":")).encode()


def _versioned(value: bytes) -> Any:
    """A record's JSON value, or None when its format is newer than this proxy's."""
    data = json.loads(value)
    version = data.get("v", 1)
    if not isinstance(version, int) or version > FORMAT:
        log.error(
            "a journal record of format %r, newer than this proxy's %d, skipped: "
            "a newer trafka shares the journal topic (upgrade this proxy)",
            version,
            FORMAT,
        )
        return None
    return data


def decode_record(key: bytes, value: bytes | None) -> tuple[str, Any] | None:
    """``("p", (window key, instance, its claim's offset, window))``, ``("c",
    (pid, instance, epoch))``, ``("b", pid)``, or None for a record this
    journal does not know (skipped). A window's tombstone has an empty window."""
    try:
        kind, _, rest = key.decode().partition(":")
        if kind == "b":
            return "b", int(rest)
        if kind == "c":
            if value is None:
                return None
            claim = _versioned(value)
            if claim is None:
                return None
            return "c", (int(rest), str(claim["o"]), int(claim["e"]))
        if kind == "p":
            # Topic names hold no ":" (Kafka allows letters, digits, ".", "_", "-").
            pid, topic, partition, instance = rest.split(":")
            wkey = (int(pid), topic, int(partition))
            if value is None:
                return "p", (wkey, instance, -1, [])
            row = _versioned(value)
            if row is None:
                return None
            window = [
                (int(e), int(b), Placement(int(n), tuple((int(x), int(s)) for x, s in targets)))
                for e, b, n, targets in row["w"]
            ]
            return "p", (wkey, instance, int(row["c"]), window)
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
        log.warning("a journal record (key %r) does not parse (%s): skipped", key[:80], exc)
    return None


class TopicJournal(PlacementJournal):
    """Placements and claims in a compacted topic of the upstream cluster.

    :meth:`run` (a task of the proxy's nursery) opens the clients, creates
    the topic if missing and follows it; :meth:`record` and :meth:`claim`
    wait until it has read the topic to its end once.

    Args:
        servers: the cluster's bootstrap servers.
        client_settings: more settings of the journal's own clients (TLS).
        topic: the journal's topic.
        partitions: its partition count, when the proxy creates it.
        takeover_grace: seconds a new owner waits after claiming a producer
            another instance owned (see the module's rules).
        timeout: seconds a journal write may take before it fails.
        idle_s: a producer nothing was written for this long has its records
            deleted (tombstones; as the proxy forgets an idle producer).
        instance: this proxy's name in claims (default: a fresh random one,
            so a restarted proxy takes over from its former self).
        clock: monotonic seconds (trio's clock).
    """

    shared = True

    def __init__(
        self,
        servers: Iterable[str],
        *,
        client_settings: Mapping[str, Any] | None = None,
        topic: str = TOPIC,
        partitions: int = DEFAULT_PARTITIONS,
        takeover_grace: float = 5.0,
        timeout: float = 10.0,
        idle_s: float = 3600.0,
        instance: str | None = None,
    ) -> None:
        self.servers = tuple(servers)
        self.settings = dict(client_settings or {})
        self.topic = topic
        self.partitions = partitions
        self.takeover_grace = takeover_grace
        self.timeout = timeout
        self.idle_s = idle_s
        self.instance = instance or uuid.uuid4().hex[:16]
        # Per client partition, the window that counts, and its writer's claim offset.
        self._windows: dict[_WindowKey, tuple[int, _Window]] = {}
        # (producer id, client partition, instance) of every window in the topic.
        self._written: set[tuple[int, _WindowKey, str]] = set()
        # The offset of this instance's claim of each producer it claimed.
        self._claimed: dict[int, int] = {}
        # Producers with a beat record in the topic.
        self._beats: set[int] = set()
        self._claims: dict[int, _Claim] = {}
        # Per producer, the claim before its last one.
        self._before: dict[int, _Claim | None] = {}
        self._position: dict[int, int] = {}
        # Per producer: when a record of it was last written or read (trio's
        # clock), and those with a write under way.
        self._seen: dict[int, float] = {}
        self._busy: dict[int, int] = {}  # writes under way
        # Per partition, offsets of this instance's own records not yet read
        # back (its windows are kept as written, not as read).
        self._own: dict[int, set[int]] = {}
        self._waiters: list[tuple[int, int, trio.Event]] = []
        self._ready = trio.Event()
        self._loading = False  # reading the topic to its end (own windows count then)
        self._producer: Producer | None = None
        self._count = 0  # partitions of the topic, once known
        self.writes = 0
        self.records = 0  # records handed to the producer, in all
        self.write_seconds = 0.0  # from handing to read back, summed over writes
        self.claims_made = 0
        self.fenced = 0

    # -- the follower task ----------------------------------------------------------------

    async def run(self) -> None:
        """Open the journal and follow its topic until cancelled (retrying
        while the cluster cannot be reached)."""
        while True:
            try:
                await self._run_once()
            except (TrafkaError, OSError) as exc:
                log.error("the placement journal %s: %s (retrying)", self.topic, exc)
                self._producer = None
                await trio.sleep(_RETRY_S)

    async def _run_once(self) -> None:
        # Read afresh from the start (after a failure, what was read is
        # replayed in order: a window is judged by the claims before it).
        for state in (
            self._windows,
            self._written,
            self._claims,
            self._before,
            self._own,
            self._beats,
        ):
            state.clear()
        self._position.clear()
        common = {"bootstrap_servers": ",".join(self.servers), **self.settings}
        async with open_admin(**common) as admin:
            await self._create_topic(admin)
            described = await admin.describe_topics([self.topic])
            count = len(next(iter(described.values())).partitions)
            tps = [TopicPartition(self.topic, p) for p in range(count)]
            ends = await admin.list_offsets(dict.fromkeys(tps, "latest"))
        async with (
            open_producer(
                acks="all",
                enable_idempotence=True,
                linger_ms=0,
                # A write not taken in time is failed (the proxy answered a
                # retriable error already): no backlog of them builds up.
                request_timeout_ms=int(self.timeout * 1000),
                delivery_timeout_ms=int(self.timeout * 1000),
                client_id="trafka-proxy-journal",
                **common,
            ) as producer,
            open_consumer(
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                client_id="trafka-proxy-journal",
                fetch_max_wait_ms=100,
                **common,
            ) as consumer,
        ):
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            for tp in tps:
                self._position.setdefault(tp.partition, 0)
            self._count = count
            started = trio.current_time()
            loading = {tp.partition: end[0] for tp, end in ends.items() if end and end[0] > 0}
            self._loading = True
            while loading:
                await self._apply(consumer)
                loading = {p: e for p, e in loading.items() if self._position[p] < e}
            self._loading = False
            log.info(
                "placement journal %s: %d windows, %d claims read in %.1f s (instance %s)",
                self.topic,
                len(self._windows),
                len(self._claims),
                trio.current_time() - started,
                self.instance,
            )
            self._producer = producer
            self._ready.set()
            swept = trio.current_time()
            while True:
                await self._apply(consumer)
                if trio.current_time() - swept >= _SWEEP_S:
                    swept = trio.current_time()
                    await self._forget_idle(producer, swept)

    def idle(self, now: float) -> dict[int, list[bytes]]:
        """The keys to delete (tombstones) of producers nothing was written
        for since ``idle_s`` before ``now``: their windows and claim. A client
        retries a batch for minutes at most; compaction then drops them."""
        gone = {
            pid
            for pid, seen in self._seen.items()
            if now - seen >= self.idle_s and pid not in self._busy
        }
        out: dict[int, list[bytes]] = {pid: [] for pid in gone}
        for pid, wkey, instance in sorted(self._written):
            if pid in gone:
                out[pid].append(window_key(wkey, instance))
        for pid in gone:
            if pid in self._beats:
                out[pid].append(beat_key(pid))
            if pid in self._claims:
                out[pid].append(claim_key(pid))
        return out

    async def _forget_idle(self, producer: Producer, now: float) -> None:
        """Delete the idle producers' records (any instance may: a tombstone
        of a record already deleted changes nothing)."""
        idle = self.idle(now)
        for pid in idle:
            # Dropped before the tombstones are sent: a write for the producer
            # meanwhile starts a new window, written after them.
            self._seen.pop(pid, None)
            self._claims.pop(pid, None)
            self._claimed.pop(pid, None)
            self._beats.discard(pid)
            self._before.pop(pid, None)
            for wkey in [w for w in self._windows if w[0] == pid]:
                del self._windows[wkey]
            self._written = {w for w in self._written if w[0] != pid}
        try:
            with trio.fail_after(self.timeout):
                futures = [
                    await producer.send(self.topic, None, key, partition=pid % self._count)
                    for pid, keys in idle.items()
                    for key in keys
                ]
                for future in futures:
                    await future
        except (TrafkaError, OSError, trio.TooSlowError) as exc:
            log.warning("the placement journal %s: idle producers not deleted: %s", self.topic, exc)
        else:
            if futures:
                log.info("placement journal %s: %d idle producers deleted", self.topic, len(idle))

    async def _create_topic(self, admin: Any) -> None:
        brokers = len((await admin.describe_cluster()).brokers)
        rf = min(3, max(1, brokers))
        configs = {"cleanup.policy": "compact", "min.insync.replicas": "2" if rf == 3 else "1"}
        try:
            await admin.create_topics([NewTopic(self.topic, self.partitions, rf, configs)])
            log.info("created the placement journal %s (replication %d)", self.topic, rf)
        except KafkaError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    async def _apply(self, consumer: Consumer[Any, Any]) -> None:
        got = await consumer.getmany(timeout_ms=500)
        now = trio.current_time()
        for tp, records in got.items():
            own = self._own.get(tp.partition, set())
            for r in records:
                self._apply_one(r.key or b"", r.value, r.offset, own=r.offset in own, now=now)
                own.discard(r.offset)
                self._position[tp.partition] = r.offset + 1
        if got and self._waiters:
            still = []
            for partition, offset, event in self._waiters:
                if self._position.get(partition, 0) > offset:
                    event.set()
                else:
                    still.append((partition, offset, event))
            self._waiters = still

    def _apply_one(
        self, key: bytes, value: bytes | None, offset: int, *, own: bool = False, now: float = 0.0
    ) -> None:
        """Apply one record read at ``offset`` (``own``: this instance wrote
        it; ``now``: trio's clock, for :meth:`idle`)."""
        decoded = decode_record(key, value)
        if decoded is None:
            return
        if decoded[0] == "p" and (own or (not self._loading and decoded[1][1] == self.instance)):
            # This instance's own windows are kept as written: one read back
            # before its write was acknowledged (its offset not known as its
            # own yet) may be older than one handed since.
            return
        kind, data = decoded
        if kind == "b":
            self._beats.add(data)
            self._seen[data] = now
            return
        self._seen[data[0] if kind == "c" else data[0][0]] = now
        if kind == "c":
            pid, instance, epoch = data
            self._before[pid] = self._claims.get(pid)
            self._claims[pid] = _Claim(instance, epoch, offset)
            return
        wkey, instance, claimed, window = data
        self._written.add((wkey[0], wkey, instance))
        if not window:
            return  # a tombstone: the window it deletes is not the owner's, or idle
        owner = self._claims.get(wkey[0])
        if owner is not None and owner.instance != instance and owner.offset > claimed:
            return  # written by a proxy fenced by then: void
        current = self._windows.get(wkey)
        if current is not None and current[0] > claimed:
            return  # a later owner's window is known (its claim compacted away)
        self._windows[wkey] = (claimed, window)

    async def _read_past(self, partition: int, offset: int, *, foreign: bool = True) -> None:
        """Wait until the partition is read past ``offset``; with ``foreign``
        False, only past what other instances wrote before it: records of
        this instance's own between (their offsets known from its writes)
        change nothing it must learn."""
        position = self._position.get(partition, 0)
        if position > offset:
            return
        own = self._own.setdefault(partition, set())
        if not foreign and all(o in own for o in range(position, offset + 1)):
            return
        event = trio.Event()
        self._waiters.append((partition, offset, event))
        await event.wait()

    # -- what the proxy asks -------------------------------------------------------------

    def lookup(self, key: PlacementKey) -> Placement | None:
        pid, epoch, topic, partition, base = key
        _, window = self._windows.get((pid, topic, partition), (-1, []))
        for e, b, placement in window:
            if (e, b) == (epoch, base):
                return placement
        return None

    def placements(self, pid: int, epoch: int) -> list[tuple[PlacementKey, Placement]]:
        # Asked once per target partition a proxy learns a producer's
        # sequence at: a walk over the windows known.
        return [
            ((pid, epoch, topic, partition, b), placement)
            for (p, topic, partition), (_, window) in self._windows.items()
            if p == pid
            for e, b, placement in window
            if e == epoch
        ]

    def __len__(self) -> int:
        return sum(len(w) for _, w in self._windows.values())

    def owner(self, pid: int) -> str | None:
        claim = self._claims.get(pid)
        return None if claim is None else claim.instance

    async def _open(self, deadline: float) -> Producer | None:
        """The producer, once the topic was read to its end (None: closed).

        Raises:
            JournalError: not open by ``deadline``.
        """
        with trio.move_on_at(deadline):
            await self._ready.wait()
            return self._producer
        raise JournalError(
            f"the placement journal {self.topic} is not open yet (is the cluster up?)"
        )

    async def _send(
        self, pid: int, records: list[tuple[bytes, bytes]], deadline: float, *, foreign: bool = True
    ) -> int:
        """Write ``records`` to the producer's partition (acks=all) and read the
        partition past them (with ``foreign`` False: past what other instances
        wrote before them); the last one's offset."""
        return await (await self._submit(pid, records, deadline, foreign=foreign)).offset()

    async def _submit(
        self, pid: int, records: list[tuple[bytes, bytes]], deadline: float, *, foreign: bool
    ) -> _TopicWrite:
        """Hand ``records`` to the journal's producer (the producer's
        partition); the write, under way. The producer sends what is handed
        while its earlier requests are in flight together (a group commit),
        and keeps a partition's records in the order handed.

        Raises:
            JournalError: not open by ``deadline``.
        """
        with trio.move_on_at(deadline):
            producer = await self._open(deadline)
            if producer is None:
                raise JournalError(f"the placement journal {self.topic} is not open")
            partition = pid % self._count
            own = self._own.setdefault(partition, set())

            def mine(handle: Any) -> None:
                # Known as this instance's own as soon as it is written, so
                # that a later write's read-back need not wait for the
                # follower to read it.
                if handle.exception() is None:
                    offset = handle.result().offset
                    if offset >= self._position.get(partition, 0):
                        own.add(offset)

            self._busy[pid] = self._busy.get(pid, 0) + 1
            futures = []
            try:
                for key, value in records:
                    future = await producer.send(self.topic, value, key, partition=partition)
                    future.add_done_callback(mine)
                    futures.append(future)
            except (TrafkaError, OSError) as exc:
                self._done(pid)
                raise JournalError(
                    f"cannot write the placement journal {self.topic}: {exc}"
                ) from None
            except BaseException:
                self._done(pid)
                raise
            self.records += len(futures)
            return _TopicWrite(self, pid, partition, futures, deadline, foreign)
        raise JournalError(
            f"the placement journal {self.topic} took no write in time (is the cluster up?)"
        )

    def _done(self, pid: int) -> None:
        left = self._busy.get(pid, 1) - 1
        if left:
            self._busy[pid] = left
        else:
            self._busy.pop(pid, None)
        self._seen[pid] = trio.current_time()

    async def written(self, write: _TopicWrite) -> int:
        """Wait until ``write``'s records are written (acks=all) and the
        partition is read past them (with ``write.foreign`` False: past what
        other instances wrote before them); the last one's offset.

        Raises:
            JournalError: not written by the deadline, or failed.
        """
        try:
            with trio.move_on_at(write.deadline):
                try:
                    offsets: list[int] = [(await future).offset for future in write.futures]
                except (TrafkaError, OSError) as exc:
                    raise JournalError(
                        f"cannot write the placement journal {self.topic}: {exc}"
                    ) from None
                self.writes += 1
                own = self._own.setdefault(write.partition, set())
                own.update(o for o in offsets if o >= self._position.get(write.partition, 0))
                last = max(offsets)
                await self._read_past(write.partition, last, foreign=write.foreign)
                self.write_seconds += trio.current_time() - write.handed
                return last
        finally:
            self._done(write.pid)
        raise JournalError(
            f"the placement journal {self.topic} took no write in time (is the cluster up?)"
        )

    async def claim(self, pid: int, epoch: int, deadline: float) -> float:
        """Make this instance the owner of producer ``pid``'s sequences.

        Returns:
            How long (seconds from now) to wait before the producer's
            sequences are asked of the leaders: ``takeover_grace`` when another
            instance owned the producer at this epoch, else 0.

        Raises:
            JournalError: the claim could not be written in time.
        """
        claim = encode_claim(self.instance, epoch)
        self._claimed[pid] = await self._send(pid, [(claim_key(pid), claim)], deadline)
        self.claims_made += 1
        # The claim ours follows (ours is the last one read, unless another
        # instance's came right after: then this proxy is fenced at its write).
        before = self._before.get(pid)
        if before is not None and before.instance != self.instance and before.epoch == epoch:
            log.info(
                "producer %d taken over from proxy instance %s (waiting %.1f s)",
                pid,
                before.instance,
                self.takeover_grace,
            )
            return self.takeover_grace
        return 0.0

    async def submit(
        self,
        entries: Iterable[tuple[PlacementKey, Placement]],
        *,
        deadline: float | None = None,
        producer: int | None = None,
    ) -> JournalWrite:
        """Hand ``entries`` (one producer's) to the journal's producer
        (acks=all); the write's ``wait()`` returns once they are written and
        read back, and checks this instance still owns the producer. Without
        entries (the batches written again keep their placements), a *beat*
        record of ``producer`` (``b:<producer id>``, one per producer) is
        written for the check.

        The windows written are kept at once (a write handed next builds on
        them, though this one is not acknowledged yet: a window holds the
        placements of the writes before it).

        Raises:
            JournalError: the journal is not open in time.
        """
        touched: dict[_WindowKey, _Window] = {}
        pid = -1
        for (pid, epoch, topic, partition, base), placement in entries:
            wkey = (pid, topic, partition)
            window = touched.get(wkey)
            if window is None:
                window = touched[wkey] = list(self._windows.get(wkey, (-1, []))[1])
            window[:] = [w for w in window if (w[0], w[1]) != (epoch, base) and w[0] >= epoch]
            window.append((epoch, base, placement))
            del window[:-CLIENT_BATCHES_KEPT]
        claimed = self._claimed.get(pid, -1)
        records = [
            (window_key(k, self.instance), encode_window(claimed, w)) for k, w in touched.items()
        ]
        if not records:
            if producer is None:
                return _TopicWrite(self, -1, -1, [], 0.0, False)
            pid = producer
            records = [(beat_key(pid), b"")]
            self._beats.add(pid)
        when = trio.current_time() + self.timeout if deadline is None else deadline
        write = await self._submit(
            pid, records, min(when, trio.current_time() + self.timeout), foreign=False
        )
        for k, w in touched.items():  # this instance's own, kept as written
            current = self._windows.get(k)
            if current is None or current[0] <= claimed:  # not a later owner's
                self._windows[k] = (claimed, w)
            self._written.add((pid, k, self.instance))
        return write

    def close(self) -> None:
        if self._producer is not None and self.writes:
            # What the journal cost, for the benchmark (bench/proxy.py --keep).
            try:
                batches = self._producer.statistics().batches_sent
            except Exception:  # a closed producer's, while stopping: a log line only
                batches = -1
            log.info(
                "placement journal %s: %d writes of %d records in %d batches, %.2f ms a write",
                self.topic,
                self.writes,
                self.records,
                batches,
                self.write_seconds / self.writes * 1000,
            )
        self._producer = None


class _TopicWrite:
    """A topic journal's write under way: its records handed to the producer."""

    __slots__ = ("deadline", "foreign", "futures", "handed", "journal", "partition", "pid")

    def __init__(
        self,
        journal: TopicJournal,
        pid: int,
        partition: int,
        futures: list[Any],
        deadline: float,
        foreign: bool,
    ) -> None:
        self.journal = journal
        self.pid = pid
        self.partition = partition
        self.futures = futures
        self.deadline = deadline
        self.foreign = foreign
        self.handed = trio.current_time()

    async def offset(self) -> int:
        """Wait until the records are written (acks=all) and the partition is
        read past them (see :meth:`TopicJournal.written`); the last one's offset.

        Raises:
            JournalError: not written by the deadline, or failed.
        """
        return await self.journal.written(self)

    async def wait(self) -> None:
        """:meth:`offset`, then check this instance still owns the producer.

        Raises:
            JournalFenced: another instance claimed the producer meanwhile.
            JournalError: not written by the deadline, or failed.
        """
        if not self.futures:
            return
        await self.offset()
        journal = self.journal
        if journal.owner(self.pid) != journal.instance:
            journal.fenced += 1
            raise JournalFenced(
                f"producer {self.pid} is owned by proxy instance {journal.owner(self.pid)} now: "
                "its batches are not written here"
            )
