"""The proxy's placement journal: exactly once across a restart of the proxy.

Opt-in. Without it, a routed idempotent producer's batches that were in
flight when the proxy died can be written twice (see docs/proxy.md); with it,
they are not. Two kinds keep the same records behind one interface
(:class:`PlacementJournal`): a directory on the proxy's machine
(:class:`DirectoryJournal`, this module: ``ProxyConfig.journal_dir``,
``trafka proxy --journal DIR``), and a compacted topic of the upstream
cluster that outlives the machine and that every proxy instance shares
(:class:`~.journal_topic.TopicJournal`: ``ProxyConfig.journal_topic``,
``trafka proxy --journal topic``).

The directory journal's rules:

Rules:

* Before the proxy writes the upstream batches of an idempotent producer's
  request, it records, for each client batch it placed (or whose upstream
  batches were renumbered since), where the batch's records went: per target
  partition, the last sequence number of the upstream batch holding them
  (:class:`Placement`). The records are on disk (``fdatasync``) before any of
  those batches is written; the records of every request waiting meanwhile are
  synced at once (group commit).
* A restarted proxy reads the journal. A client's retry of a batch the proxy
  does not know but the journal does is split again: the same keys, hash and
  partition count put the same records on the same targets. For each target,
  the leader's last sequence for the producer, asked after the restart
  (DescribeProducers), tells whether the old proxy's upstream batch was
  written: at or past its last sequence, it was, and those records are not
  written again; before it, they are written afresh (see
  :func:`~.idempotent_plan.prepare_idempotent`).
* A retry that splits otherwise than its record (the topic gained partitions)
  is placed afresh, with a warning: its records may be written twice.
* Only the newest ``max_entries`` placements are kept (a client retries only
  the batches it has in flight); the file is rewritten with them when it grows
  past twice their size.
* The format is versioned (:data:`FORMAT`): a first line
  ``{"trafka_proxy_journal": <version>}``, then a line of JSON per placement:
  ``[producer id, epoch, topic, partition, base sequence, count, [[target,
  last sequence], ...]]``. A torn last line (the proxy died writing it) is
  ignored, as is any line that does not parse (with a warning).
* Versions: 1, the first, had no header line (its placement lines are as
  2's); a file without a header is read as 1. A file of an older version is
  read, then rewritten whole in the current one (new file, synced, renamed
  over the old) before anything is appended; a file of a newer version is
  refused (:class:`JournalError`): the proxy does not start rather than
  misread placements. A new file starts with its header, written the same
  way, so a header is never torn. (A trafka of version 1 reading a version 2
  file skips the header as a line that does not parse, with a warning.)
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import trio

from .sequences import Placement, PlacementKey

__all__ = [
    "DirectoryJournal",
    "Journal",
    "JournalError",
    "JournalFenced",
    "JournalWrite",
    "Placement",
    "PlacementJournal",
    "PlacementKey",
    "decode",
    "encode",
]

log = logging.getLogger("trafka.proxy")

FILE_NAME = "placements.jsonl"
# The journal file's format version (see the module's rules).
FORMAT = 2
_HEADER_KEY = "trafka_proxy_journal"
HEADER = json.dumps({_HEADER_KEY: FORMAT}, separators=(",", ":")).encode() + b"\n"
_MIN_REWRITE_BYTES = 16 * 1024 * 1024


class JournalError(OSError):
    """The journal could not be written."""


class JournalFenced(JournalError):
    """Another proxy instance owns the producer now (a shared journal only)."""


class JournalWrite(Protocol):
    """A journal write under way (see :meth:`PlacementJournal.submit`)."""

    async def wait(self) -> None:
        """Return once the write is durable (and, for a shared journal, the
        proxy still owns the producer).

        Raises:
            JournalFenced: another instance owns the producer (write nothing).
            JournalError: the write failed (write nothing).
        """


class PlacementJournal(Protocol):
    """Where key routing records placements before writing their batches.

    Attributes:
        shared: whether other proxy instances read it too (then a producer is
            claimed before it is routed, and placements fence, see
            :mod:`.journal_topic`).
    """

    shared: bool

    def lookup(self, key: PlacementKey) -> Placement | None:
        """A client batch's placement, as recorded (by any instance)."""

    def placements(self, pid: int, epoch: int) -> list[tuple[PlacementKey, Placement]]:
        """The producer's placements at ``epoch``, as recorded (by any instance)."""

    def __len__(self) -> int: ...

    async def record(
        self,
        entries: Iterable[tuple[PlacementKey, Placement]],
        *,
        deadline: float | None = None,
        producer: int | None = None,
    ) -> None:
        """Record one producer's ``entries`` durably; returns once they are
        (:meth:`submit`, then its write's :meth:`JournalWrite.wait`).

        Raises:
            JournalFenced: another instance owns the producer (write nothing).
            JournalError: the journal could not take them (write nothing).
        """
        await (await self.submit(entries, deadline=deadline, producer=producer)).wait()

    async def submit(
        self,
        entries: Iterable[tuple[PlacementKey, Placement]],
        *,
        deadline: float | None = None,
        producer: int | None = None,
    ) -> JournalWrite:
        """Hand one producer's ``entries`` to the journal and return at once:
        the write is under way (joined with the others handed meanwhile: a
        group commit); its :meth:`JournalWrite.wait` returns once they are
        durable. Entries handed later are written after them. A shared
        journal checks the proxy still owns ``producer`` even when there are
        no entries (batches written again).

        Raises:
            JournalError: the journal could not take them (write nothing).
        """

    async def claim(self, pid: int, epoch: int, deadline: float) -> float:
        """Own producer ``pid``'s sequences; the seconds to wait before asking
        the leaders for them (a takeover's grace).

        Raises:
            JournalError: the claim could not be recorded.
        """

    def close(self) -> None: ...


def encode(key: PlacementKey, placement: Placement) -> bytes:
    pid, epoch, topic, partition, base = key
    row = [
        pid,
        epoch,
        topic,
        partition,
        base,
        placement.count,
        [list(t) for t in placement.targets],
    ]
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


def decode(data: bytes) -> Iterator[tuple[PlacementKey, Placement]]:
    """The placements in ``data``, a journal's bytes; a torn last line is skipped."""
    lines = data.split(b"\n")
    for number, line in enumerate(lines[:-1], 1):  # the last piece lacks its newline
        if not line or line.startswith(b"{"):  # the header (see format_of)
            continue
        try:
            pid, epoch, topic, partition, base, count, targets = json.loads(line)
            key = (int(pid), int(epoch), str(topic), int(partition), int(base))
            placement = Placement(int(count), tuple((int(x), int(s)) for x, s in targets))
        except (ValueError, TypeError) as exc:
            log.warning("journal line %d does not parse (%s): skipped", number, exc)
            continue
        yield key, placement


def format_of(data: bytes) -> int:
    """The format version of a journal file's bytes (1: no header; see the module's rules).

    Raises:
        JournalError: the first line is a header that does not parse.
    """
    first = data.split(b"\n", 1)[0]
    if not first.startswith(b"{"):
        return 1
    try:
        version = json.loads(first)[_HEADER_KEY]
        if isinstance(version, int) and not isinstance(version, bool):
            return version
    except (ValueError, TypeError, KeyError):
        pass
    raise JournalError(f"the journal's header {first[:80]!r} does not parse")


class DirectoryJournal(PlacementJournal):
    """Placements on disk, and the newest ones in memory.

    Args:
        directory: where the journal file lives (created if missing).
        max_entries: the placements kept.
    """

    shared = False

    def __init__(self, directory: str | os.PathLike[str], *, max_entries: int = 1_000_000) -> None:
        self.path = Path(directory) / FILE_NAME
        self.max_entries = max_entries
        self._entries: OrderedDict[PlacementKey, Placement] = OrderedDict()
        # The keys of ``_entries`` per producer id and epoch (for placements()).
        self._by_producer: dict[tuple[int, int], dict[PlacementKey, None]] = {}
        self._file_bytes = 0
        self._fd: int | None = None
        self._queue: list[bytes] = []
        self._queued = 0  # records handed to record(), in all
        self._synced = 0  # of which on disk
        self._lock = trio.Lock()
        self._torn = False  # the last write failed, perhaps mid-line
        self.syncs = 0

    # -- start and stop -------------------------------------------------------------------

    def open(self) -> int:
        """Read the journal and open it for appending; the placements read.

        Raises:
            JournalError: the directory or file cannot be read or written.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = self.path.read_bytes() if self.path.exists() else b""
            version = format_of(data) if data else 0
            if version > FORMAT:
                raise JournalError(
                    f"the journal {self.path} is of format {version}, written by a newer "
                    f"trafka (this one reads formats 1 to {FORMAT})"
                )
            for key, placement in decode(data):
                self._remember(key, placement)
            if version < FORMAT:  # new, or older: rewritten whole (see the rules)
                self._replace_file(list(self._entries.items()))
                if version:
                    log.info("journal %s: format %d rewritten as %d", self.path, version, FORMAT)
                return len(self._entries)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            if not data.endswith(b"\n"):
                os.write(self._fd, b"\n")  # the torn line stays apart from the next
        except OSError as exc:
            if isinstance(exc, JournalError):
                raise
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from None
        self._file_bytes = len(data)
        return len(self._entries)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading ----------------------------------------------------------------------------

    def lookup(self, key: PlacementKey) -> Placement | None:
        return self._entries.get(key)

    def placements(self, pid: int, epoch: int) -> list[tuple[PlacementKey, Placement]]:
        return [(k, self._entries[k]) for k in self._by_producer.get((pid, epoch), ())]

    def __len__(self) -> int:
        return len(self._entries)

    # -- writing ----------------------------------------------------------------------------

    async def claim(self, pid: int, epoch: int, deadline: float) -> float:
        """No other instance reads this journal: nothing to claim."""
        return 0.0

    async def submit(
        self,
        entries: Iterable[tuple[PlacementKey, Placement]],
        *,
        deadline: float | None = None,
        producer: int | None = None,
    ) -> JournalWrite:
        """Queue ``entries`` for the next sync; the write's ``wait()`` syncs
        them, with every other caller's queued meanwhile (``deadline`` and
        ``producer`` are not used: a local sync has no deadline, and no other
        instance owns producers)."""
        lines = []
        for key, placement in entries:
            self._remember(key, placement)
            lines.append(encode(key, placement))
        if not lines:
            return _Synced(self._sync, 0)
        self._queue.append(b"".join(lines))
        self._queued += 1
        return _Synced(self._sync, self._queued)

    async def _sync(self, mine: int) -> None:
        """Sync the queue up to caller number ``mine`` (at least).

        Raises:
            JournalError: writing or syncing failed.
        """
        async with self._lock:
            if self._synced >= mine:
                return  # synced with an earlier caller's
            batch, self._queue = b"".join(self._queue), []
            upto = self._queued
            try:
                await trio.to_thread.run_sync(self._write, batch)
            except JournalError:
                # The callers waiting on it are not synced either: the next
                # holder of the lock writes it again (or fails as well).
                self._queue.insert(0, batch)
                raise
            self._synced = upto
            if self._file_bytes > max(_MIN_REWRITE_BYTES, 2 * self._live_bytes()):
                kept = list(self._entries.items())  # the loop may add more meanwhile
                await trio.to_thread.run_sync(self._rewrite, kept)

    def _remember(self, key: PlacementKey, placement: Placement) -> None:
        self._entries[key] = placement
        self._entries.move_to_end(key)
        self._by_producer.setdefault(key[:2], {})[key] = None
        while len(self._entries) > self.max_entries:
            old, _ = self._entries.popitem(last=False)
            keys = self._by_producer[old[:2]]
            del keys[old]
            if not keys:
                del self._by_producer[old[:2]]

    def _forget(self, key: PlacementKey) -> None:
        """Drop a placement from memory (the file keeps it until a rewrite)."""
        if self._entries.pop(key, None) is None:
            return
        keys = self._by_producer[key[:2]]
        del keys[key]
        if not keys:
            del self._by_producer[key[:2]]

    def _live_bytes(self) -> int:
        return len(self._entries) * 64  # about a line's size

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            raise JournalError("the journal is not open")
        if self._torn:  # a failed write may have left part of a line
            data = b"\n" + data
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fdatasync(self._fd)
        except OSError as exc:
            self._torn = True
            raise JournalError(f"cannot write the journal {self.path}: {exc}") from None
        self._torn = False
        self._file_bytes += len(data)
        self.syncs += 1

    def _rewrite(self, kept: list[tuple[PlacementKey, Placement]]) -> None:
        try:
            self._replace_file(kept)
        except OSError as exc:
            log.error("cannot rewrite the journal %s: %s (it keeps growing)", self.path, exc)

    def _replace_file(self, kept: list[tuple[PlacementKey, Placement]]) -> None:
        """The kept placements to a new file (header first), synced, then put in
        the old one's place, and opened for appending.

        Raises:
            OSError: the new file could not be written or renamed.
        """
        fresh = self.path.with_suffix(".new")
        data = HEADER + b"".join(encode(k, p) for k, p in kept)
        with open(fresh, "wb") as out:
            out.write(data)
            out.flush()
            os.fdatasync(out.fileno())
        os.replace(fresh, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._file_bytes = len(data)


class _Synced:
    """A directory journal's write: synced by whichever caller gets the lock
    first (``mine``: its number among the queued, 0: nothing to write)."""

    __slots__ = ("mine", "sync")

    def __init__(self, sync: Callable[[int], Awaitable[None]], mine: int) -> None:
        self.sync = sync
        self.mine = mine

    async def wait(self) -> None:
        if self.mine:
            await self.sync(self.mine)


# The name it had when it was the only kind.
Journal = DirectoryJournal
