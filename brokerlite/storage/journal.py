"""A CRC-checked append-only journal of JSON entries: brokerlite's small durable stores.

The offset store (:mod:`..groups.offsets`) and the transaction coordinator's journal
(:mod:`..transactions.journal`) keep their state as a sequence of entries in one file,
replayed into memory on open. This module is the file's life cycle; the stores
decide what the entries mean.

Format:

* Every entry is ``length (u32 big-endian) | crc (u32 big-endian) | payload`` where
  ``payload`` is one UTF-8 JSON object of ``length`` bytes and ``crc`` is the
  CRC-32C of the payload.
* The first entry is a header: ``{"kind": "header", "format": name, "version": n}``,
  or without ``format`` for a store created before formats had names (the offset
  store). Opening a file with another format or version is an error.

Rules and invariants:

* A crash mid-write leaves at most one torn entry, at the tail. Replay stops at the
  first entry that is short, fails its CRC or does not parse, and truncates the
  file there. At the head of the file only a prefix of the header counts as
  torn (the store starts empty); other bytes there are damage, and the file is
  refused rather than emptied. A failed write is rolled back the same way (truncate to the last
  good length), so a torn entry never precedes a later good one.
* An entry written with ``sync=False`` (or with ``fsync=False``) is in the page
  cache: it survives a crash of the process, and becomes durable with the next
  fsync, which covers every entry before it (the file is append-only).
* :meth:`CrcJournal.rewrite` writes a temporary file, fsyncs it, renames it over
  the journal and fsyncs the directory: a crash at any point leaves either the
  complete old journal or the complete new one.
* A journal that fsyncs (``fsync=True``) is preallocated: entries are written
  over zeros the file already holds (written, not merely reserved, in chunks
  of ``_PREALLOC`` bytes), so that an fsync carries the new bytes only, not a
  change of the file's size and blocks as well. On open, a tail of zeros after
  the last entry is that reserve, not damage: it is kept, without a warning.
  Closing cuts the reserve off, so a closed journal is its entries end to end.
  A reserve that a crash leaves behind is only zeros, so replay still stops
  where the entries end; an entry torn by a crash is followed by zeros or
  nothing, and is cut off as before.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.state_port import DurableStore
from trafka.codec.crc import crc32c

__all__ = ["CrcJournal", "JournalFile", "JournalState", "JournalStore", "frame"]

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">II")
# A sanity bound for a length prefix: anything larger is a torn or corrupt entry.
_MAX_ENTRY = 256 * 1024 * 1024
# A store compacts when its journal is this many times larger than its live state.
_GROWTH_FACTOR = 4
# How far ahead a journal that fsyncs writes zeros for its entries to overwrite.
_PREALLOC = 1024 * 1024
_ZEROS = bytes(64 * 1024)


def frame(entry: Mapping[str, Any]) -> bytes:
    """One journal entry's bytes: length, CRC-32C, compact JSON."""
    payload = json.dumps(entry, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    return _HEAD.pack(len(payload), crc32c(payload)) + payload


class _TornEntry(Exception):
    """Replay met an entry that is incomplete or damaged (internal)."""


def _read_entry(view: memoryview, pos: int) -> tuple[dict[str, Any], int]:
    if len(view) - pos < _HEAD.size:
        raise _TornEntry
    length, crc = _HEAD.unpack_from(view, pos)
    start = pos + _HEAD.size
    end = start + length
    if not 0 < length <= _MAX_ENTRY or end > len(view):
        raise _TornEntry
    payload = view[start:end]
    if crc32c(payload) != crc:
        raise _TornEntry
    try:
        entry = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _TornEntry from exc
    if not isinstance(entry, dict):
        raise _TornEntry
    return entry, end


class CrcJournal:
    """An append-only file of CRC-checked JSON entries with a header and atomic rewrite.

    The owner calls :meth:`open` once, gets the entries after the header, builds
    its state from them, then calls :meth:`append` for each change and
    :meth:`rewrite` to compact. See the module docstring for the rules.

    Args:
        path: the journal file; its directory is created if missing.
        format_name: written in the header and checked on open, so that one store
            never replays another's file; None for a header without one (such a
            journal refuses a file whose header names a format).
        version: the format version this code reads and writes.
        fsync: fsync after every write.
        error: the exception class raised for I/O and format errors.
    """

    def __init__(
        self,
        path: Path,
        *,
        format_name: str | None,
        version: int,
        fsync: bool = True,
        error: type[BrokerError] = BrokerError,
    ) -> None:
        self._path = Path(path)
        self._tmp_path = self._path.with_name(self._path.name + ".compact.tmp")
        self._format = format_name
        self._version = version
        self._fsync = fsync
        self._error = error
        self._fd: int | None = None
        self._size = 0  # where the entries end (the next one is written there)
        self._allocated = 0  # the file's size: the entries and the zeros after them
        self._failed = False
        self._dirty = False  # unsynced entries written (only tracked with fsync=True)

    @property
    def path(self) -> Path:
        """The journal file."""
        return self._path

    @property
    def size(self) -> int:
        """The journal's current size in bytes."""
        return self._size

    @property
    def closed(self) -> bool:
        """Whether the journal is closed (or was never opened)."""
        return self._fd is None

    def header(self) -> dict[str, Any]:
        """The header entry this journal writes."""
        if self._format is None:
            return {"kind": "header", "version": self._version}
        return {"kind": "header", "format": self._format, "version": self._version}

    def open(self) -> list[dict[str, Any]]:
        """Read the journal, truncate a torn tail, and open it for appending.

        A missing or empty file becomes a journal holding only the header.

        Returns:
            The entries after the header, in order.

        Raises:
            The ``error`` class: the file cannot be read or written, has no header,
            or has another format or version.
        """
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # A leftover temporary file is an interrupted compaction: the journal it
            # was meant to replace is still complete, so the temporary file is garbage.
            with contextlib.suppress(FileNotFoundError):
                self._tmp_path.unlink()
            data = self._path.read_bytes() if self._path.exists() else b""
        except OSError as exc:
            raise self._error(f"cannot read journal {self._path}: {exc}") from exc
        entries, good = self._parse(data)
        if good == 0 and not _all_zeros(data, 0) and not frame(self.header()).startswith(data):
            # Not a header cut short: these bytes are damage (or another program's
            # file), and starting empty would silently drop everything the store held.
            raise self._error(
                f"journal {self._path}: its header entry is damaged ({len(data)} bytes that "
                "are not a journal); move the file away to start this store empty"
            )
        reserve = len(data) if good and _all_zeros(data, good) else good
        try:
            if reserve < len(data):
                log.warning(
                    "journal %s: dropping %d bytes of torn or corrupt tail at offset %d",
                    self._path,
                    len(data) - good,
                    good,
                )
                with open(self._path, "r+b") as f:
                    f.truncate(good)
                    f.flush()
                    os.fsync(f.fileno())
            if good == 0:
                self._rewrite_raw(frame(self.header()))
            else:
                self._fd = fd = os.open(self._path, os.O_WRONLY)
                os.lseek(fd, good, os.SEEK_SET)
                self._size = good
                self._allocated = reserve
        except OSError as exc:
            raise self._error(f"cannot open journal {self._path}: {exc}") from exc
        return entries

    def _parse(self, data: bytes) -> tuple[list[dict[str, Any]], int]:
        view = memoryview(data)
        pos = 0
        entries: list[dict[str, Any]] = []
        first = True
        while pos < len(data):
            try:
                entry, end = _read_entry(view, pos)
            except _TornEntry:
                break
            if first:
                if entry.get("kind") != "header":
                    raise self._error(f"journal {self._path} has no header entry")
                if entry.get("format") != self._format:
                    raise self._error(
                        f"journal {self._path} holds {entry.get('format')!r}, not {self._format!r}"
                    )
                if entry.get("version") != self._version:
                    raise self._error(
                        f"journal {self._path} has format version {entry.get('version')!r}; "
                        f"this brokerlite reads {self._version}"
                    )
                first = False
            else:
                entries.append(entry)
            pos = end
        return entries, pos

    def append(self, entry: Mapping[str, Any], *, sync: bool = True) -> None:
        """Write one entry (and fsync it when configured and ``sync``).

        Raises:
            The ``error`` class: the write failed and was rolled back, or the
            journal is closed or broken.
        """
        self.append_many((entry,), sync=sync)

    def append_many(self, entries: Iterable[Mapping[str, Any]], *, sync: bool = True) -> None:
        """Write entries in order with one write (and at most one fsync).

        ``sync=False`` leaves the entries in the page cache: they become durable
        with the next synced append, :meth:`flush` or :meth:`close`.

        Raises:
            The ``error`` class: the write failed and was rolled back (none of the
            entries stays), or the journal is closed or broken.
        """
        fd = self._writable()
        data = b"".join(frame(e) for e in entries)
        try:
            if self._size + len(data) > self._allocated:
                self._reserve(fd, self._size + len(data))
            _write_all(fd, data)
            if sync and self._fsync:
                os.fsync(fd)
        except OSError as exc:
            # Cut the partial entry off so that later entries are not hidden behind it
            # (and the reserve with it: the next write makes a new one).
            try:
                os.ftruncate(fd, self._size)
                os.lseek(fd, self._size, os.SEEK_SET)
                self._allocated = self._size
            except OSError:
                self._failed = True
            raise self._error(f"cannot write journal {self._path}: {exc}") from exc
        self._size += len(data)
        if self._fsync:
            self._dirty = not sync

    def rewrite(self, entries: Iterable[Mapping[str, Any]]) -> None:
        """Atomically replace the journal with the header followed by ``entries``.

        Raises:
            The ``error`` class: the rewrite failed; the old journal is still in place.
        """
        self._writable()
        data = frame(self.header()) + b"".join(frame(e) for e in entries)
        try:
            self._rewrite_raw(data)
        except OSError as exc:
            raise self._error(f"cannot rewrite journal {self._path}: {exc}") from exc

    def _rewrite_raw(self, data: bytes) -> None:
        fd = os.open(self._tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self._tmp_path, self._path)
        self._dirty = False
        _fsync_dir(self._path.parent)
        new_fd = os.open(self._path, os.O_WRONLY)
        old_fd, self._fd = self._fd, new_fd
        if old_fd is not None:
            os.close(old_fd)
        os.lseek(new_fd, len(data), os.SEEK_SET)
        self._size = self._allocated = len(data)  # the next append makes the reserve
        self._failed = False

    def _reserve(self, fd: int, end: int) -> None:
        """Make the file hold at least ``end`` bytes.

        A journal that fsyncs writes zeros from its current end up to the next
        multiple of ``_PREALLOC``; one that does not reserves nothing (the
        write that follows extends the file).
        """
        if not self._fsync:
            self._allocated = end
            return
        target = -(-end // _PREALLOC) * _PREALLOC
        pos = self._allocated
        while pos < target:
            n = os.pwrite(fd, _ZEROS[: target - pos], pos)
            if n <= 0:
                raise OSError(errno.EIO, "write returned 0")
            pos += n
        self._allocated = target

    def flush(self) -> None:
        """fsync the journal (a no-op when every write is already fsynced)."""
        if self._fd is not None and (self._dirty or not self._fsync):
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise self._error(f"cannot fsync journal {self._path}: {exc}") from exc
            self._dirty = False

    def close(self) -> None:
        """Flush and close; later writes raise the ``error`` class."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._allocated > self._size and not self._failed:
                os.ftruncate(fd, self._size)  # the reserve goes; entries stay
            if self._dirty or not self._fsync:
                os.fsync(fd)
        finally:
            self._dirty = False
            self._allocated = self._size
            os.close(fd)

    def _writable(self) -> int:
        if self._fd is None:
            raise self._error(f"journal {self._path} is closed")
        if self._failed:
            raise self._error(f"journal {self._path} failed earlier and could not be repaired")
        return self._fd


class JournalState(Protocol):
    """A state that a :class:`JournalFile` keeps: entries applied, and the entries
    that rebuild it."""

    def apply(self, entry: dict[str, Any]) -> None: ...

    def live_entries(self) -> list[dict[str, Any]]: ...


class JournalFile:
    """A state's changes as the entries of a :class:`CrcJournal`: the persistence
    port of one node (:class:`~.state_port.StatePort`).

    The state is two callables: ``apply`` (one entry into the state) and
    ``live_entries`` (entries that rebuild the state). :meth:`open` replays the
    journal; :meth:`write` appends, then applies, so the state never runs ahead of
    the file. Compaction runs on open when the journal is over twice its live
    state, and after a write that makes it grow past ``_GROWTH_FACTOR`` times the
    size of its last compaction; never below ``compact_min_bytes``.

    Args:
        journal: the (unopened) journal.
        apply: applies one entry to the state (raises the journal's error class
            for an entry it cannot read).
        live_entries: the entries that rebuild the state as it is.
        compact_min_bytes: never compact a journal smaller than this.
        name: what log lines call the journal.
    """

    def __init__(
        self,
        journal: CrcJournal,
        *,
        apply: Callable[[dict[str, Any]], None],
        live_entries: Callable[[], list[dict[str, Any]]],
        compact_min_bytes: int,
        name: str,
    ) -> None:
        self.journal = journal
        self._apply = apply
        self._live_entries = live_entries
        self._compact_min = compact_min_bytes
        self._compact_at = compact_min_bytes
        self._name = name

    @classmethod
    def over(
        cls, journal: CrcJournal, state: JournalState, *, compact_min_bytes: int, name: str
    ) -> JournalFile:
        """A journal file for ``state``, whose ``apply`` and ``live_entries`` it calls."""
        return cls(
            journal,
            apply=state.apply,
            live_entries=state.live_entries,
            compact_min_bytes=compact_min_bytes,
            name=name,
        )

    @property
    def path(self) -> Path:
        """The journal file."""
        return self.journal.path

    @property
    def size(self) -> int:
        """The journal's current size in bytes."""
        return self.journal.size

    def open(self) -> None:
        """Open the journal and replay it into the state (the journal is closed on failure)."""
        entries = self.journal.open()
        try:
            for entry in entries:
                self._apply(entry)
            live = len(frame(self.journal.header())) + sum(
                len(frame(e)) for e in self._live_entries()
            )
            self._compact_at = max(self._compact_min, _GROWTH_FACTOR * live)
            if self.journal.size > max(self._compact_min, 2 * live):
                self.compact()
        except BaseException:
            self.journal.close()
            raise

    def write(self, *entries: dict[str, Any], sync: bool = True) -> None:
        """Write ``entries`` in one append, then apply them in order.

        Raises:
            The journal's error class: the write failed; nothing was applied.
        """
        self.journal.append_many(entries, sync=sync)
        for entry in entries:
            self._apply(entry)
        if self.journal.size > self._compact_at:
            try:
                self.compact()
            except BrokerError as exc:
                # The entries are durable; a failed compaction only postpones the next one.
                log.warning("%s %s: compaction failed: %s", self._name, self.path, exc)
                self._compact_at = self.journal.size * 2

    def compact(self) -> None:
        """Rewrite the journal to hold only the live state.

        Raises:
            The journal's error class: the rewrite failed; the old journal is still in place.
        """
        self.journal.rewrite(self._live_entries())
        self._compact_at = max(self._compact_min, _GROWTH_FACTOR * self.journal.size)

    def flush(self) -> None:
        """fsync the journal (a no-op when every write is already fsynced)."""
        self.journal.flush()

    def close(self) -> None:
        """Flush and close the journal; later writes raise the journal's error class."""
        self.journal.close()


class JournalStore(DurableStore):
    """In-memory state kept in a :class:`CrcJournal`, for a store that lives on one
    node only: the state and its :class:`JournalFile` in one object.

    A subclass sets up its empty state, then calls :meth:`_load`; it implements
    :meth:`_apply` (one entry into the state) and :meth:`_live_entries` (entries
    that rebuild the state), and writes with :meth:`_write` (see
    :class:`JournalFile` for replay and compaction).

    Args:
        journal: the (unopened) journal.
        compact_min_bytes: never compact a journal smaller than this.
        name: what log lines call the store.
    """

    def __init__(self, journal: CrcJournal, *, compact_min_bytes: int, name: str) -> None:
        self._journal = journal
        self._file = JournalFile(
            journal,
            apply=self._apply,
            live_entries=self._live_entries,
            compact_min_bytes=compact_min_bytes,
            name=name,
        )
        super().__init__(self._file)

    def _load(self) -> None:
        """Open the journal and replay it into the state (the journal is closed on failure)."""
        self._file.open()

    def _write(self, *entries: dict[str, Any], sync: bool = True) -> None:
        """Write ``entries`` in one append, then apply them (so the state never runs
        ahead of the file)."""
        self._file.write(*entries, sync=sync)

    def _apply(self, entry: dict[str, Any]) -> None:
        raise NotImplementedError

    def _live_entries(self) -> list[dict[str, Any]]:
        raise NotImplementedError


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _all_zeros(data: bytes, start: int) -> bool:
    """Whether ``data[start:]`` is only zero bytes (a preallocated reserve)."""
    return data.count(0, start) == len(data) - start


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
