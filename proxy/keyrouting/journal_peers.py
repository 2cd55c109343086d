"""A worker's directory journal that also reads its sibling workers' journals
(``trafka proxy --workers N --journal DIR``, issue #46).

A worker killed -9 leaves its clients' batches unanswered. librdkafka's
clients bootstrap again while it is down, and the kernel hands their new
connection to a worker still listening on the shared port: their retries
reach another worker, which did not place those batches. Each worker writes
its own directory, ``DIR/worker-k`` (one writer per file, as
:class:`~.journal.DirectoryJournal` needs); this journal also reads the
others', so that the worker a client moved to finds the placements the lost
one journaled, and writes none of the retried records twice (the same path as
a restarted proxy: :mod:`.journal`).

Rules:

* It writes its own directory only; the peers' files are read, never written.
* A placement is looked up in its own journal first. A miss for a producer id
  and epoch it has journaled nothing for (a producer that came from another
  worker, or a new one) reads on the peers' files from where it last stopped
  (a file that shrank or was replaced, a peer's rewrite, is read again from
  its start) before looking there: a stat per peer for a producer's first
  batches, nothing once the producer has placements here. The peers' files
  are read whole when the journal opens, then only what they gained since
  (on the worker's loop, as its own journal is read at its start): each
  worker decodes every other worker's placements once.
* A torn last line of a peer's file (its worker died writing it, or is
  writing it now) is kept back until its newline arrives.
* A producer can come back to a worker that holds placements of it: its
  client moved to a sibling, which wrote for it, and back (each move a new
  connection, as a client bootstraps again). The worker's own placements and
  its state of the producer's sequences are then stale: numbered from them,
  its batches take numbers the sibling gave to other records, and the broker
  answers them as those records' duplicates (written records that are in no
  log); a retry of a batch the sibling placed, looked up here only, is placed
  afresh and written twice. So the driver asks :meth:`PeersJournal.peer_writes`
  (the peers' files read on) at a producer's first request on each client
  connection, and when the peers journaled placements of it since its state
  here was made, drops that state: its sequences are asked of the leaders
  again, after a failover's grace (:mod:`.sync_grace`), the sibling's
  placements looked up. So is the state of a producer born here (its
  InitProducerId answer passed here) that a peer journaled placements of when
  it first comes: its client's Metadata came from the peer, which wrote for
  it; its sequences are the leaders' to tell, not 0 (:meth:`PeersJournal.peers_placed`).
  Within a worker, a placement read from a peer after this worker's own of
  the same client batch replaces it (the later wins; at the journal's
  opening, when there is no telling which came later, its own).
* The peers' placements are bounded as the journal's own (``max_entries``,
  the newest kept).
* It covers a client that left a worker that is gone (killed, or stopped):
  that worker writes nothing more. A client that left a worker still
  writing for it is not ordered against it (``--journal topic``'s claims
  do that, :mod:`.journal_topic`).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from .journal import FILE_NAME, DirectoryJournal, decode
from .sequences import Placement, PlacementKey

__all__ = ["PeersJournal"]

log = logging.getLogger("trafka.proxy")

_READ_CHUNK = 16 * 1024 * 1024
# Producers whose last peer placement's number is kept (the oldest forgotten:
# past them, any producer's state may be asked of the leaders again once).
MAX_COUNTED = 100_000


class _PeerFile:
    """How far a peer's journal file has been read."""

    __slots__ = ("inode", "offset", "path", "tail")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inode = -1
        self.offset = 0
        self.tail = b""  # a line not yet ended

    def read_on(self) -> bytes:
        """The whole lines appended since the last read (all of them when the
        file was replaced or shrank); b"" when it cannot be read."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return b""
        try:
            stat = os.fstat(fd)
            if stat.st_ino != self.inode or stat.st_size < self.offset:
                self.inode, self.offset, self.tail = stat.st_ino, 0, b""
            if stat.st_size == self.offset:
                return b""
            chunks = [self.tail]
            while chunk := os.pread(fd, _READ_CHUNK, self.offset):
                chunks.append(chunk)
                self.offset += len(chunk)
        except OSError as exc:
            log.warning("cannot read the peer journal %s: %s", self.path, exc)
            return b""
        finally:
            os.close(fd)
        data = b"".join(chunks)
        end = data.rfind(b"\n") + 1
        self.tail = data[end:]
        return data[:end]


class _Theirs(DirectoryJournal):
    """The peers' placements: the in-memory half of a directory journal (the
    newest ``max_entries``, by producer), never opened, so never written."""

    def add(self, key: PlacementKey, placement: Placement) -> None:
        self._remember(key, placement)


class PeersJournal(DirectoryJournal):
    """A :class:`~.journal.DirectoryJournal` in ``directory`` that also reads
    the journals in ``peers`` (directories; see the module's rules)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        peers: Iterable[str | os.PathLike[str]],
        *,
        max_entries: int = 1_000_000,
    ) -> None:
        super().__init__(directory, max_entries=max_entries)
        self._peers = [_PeerFile(Path(p) / FILE_NAME) for p in peers]
        self._theirs = _Theirs(os.devnull, max_entries=max_entries)
        # Per producer id and epoch: the number of the last peer placement
        # read since the opening (numbered 1, 2...), and the highest forgotten.
        self._last: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._read = 0
        self._forgotten = 0
        self._opened = False

    def open(self) -> int:
        """Read its own journal and open it (:meth:`DirectoryJournal.open`), and
        read the peers' as they are now; its own placements read."""
        read = super().open()
        self._read_all_peers()
        self._opened = True
        return read

    def peer_writes(self, pid: int, epoch: int, *, read: bool = True) -> int:
        """A mark of the producer's placements the peers journaled since this
        journal opened (their files read on first unless ``read`` is False):
        a change says the producer was served by a sibling meanwhile (or,
        past :data:`MAX_COUNTED` producers, may have been)."""
        if read:
            self._read_all_peers()
        return self._last.get((pid, epoch), self._forgotten)

    def peers_placed(self, pid: int, epoch: int) -> bool:
        """Whether a peer journaled placements of the producer (as read so far)."""
        return bool(self._theirs.placements(pid, epoch))

    def lookup(self, key: PlacementKey) -> Placement | None:
        own = super().lookup(key)
        if own is not None:
            return own
        self._read_peers(key[0], key[1])
        return self._theirs.lookup(key)

    def placements(self, pid: int, epoch: int) -> list[tuple[PlacementKey, Placement]]:
        self._read_peers(pid, epoch)
        own = super().placements(pid, epoch)
        mine = {k for k, _ in own}
        return [(k, p) for k, p in self._theirs.placements(pid, epoch) if k not in mine] + own

    def _read_peers(self, pid: int, epoch: int) -> None:
        if not super().placements(pid, epoch):
            self._read_all_peers()  # else journaled here: the placements are its own

    def _read_all_peers(self) -> None:
        for peer in self._peers:
            for key, placement in decode(peer.read_on()):
                self._theirs.add(key, placement)
                if not self._opened:
                    continue
                self._forget(key)  # read after its own: the later wins
                self._read += 1
                self._last[key[:2]] = self._read
                self._last.move_to_end(key[:2])
                if len(self._last) > MAX_COUNTED:
                    self._forgotten = self._last.popitem(last=False)[1]
