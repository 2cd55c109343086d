"""A worker's journal that reads its sibling workers' (``trafka proxy --workers
N --journal DIR``, :mod:`trafka.proxy.journal_peers`), on files, without
sockets. The whole path (a worker killed -9, its clients' retries taken over by
another worker from this journal, nothing written twice) is
tests/proxy/test_proxy_worker_kill.py."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from trafka.proxy.keyrouting.journal import DirectoryJournal, encode
from trafka.proxy.keyrouting.journal_peers import PeersJournal
from trafka.proxy.keyrouting.sequences import Placement, PlacementKey


def key(pid: int, base: int, partition: int = 0) -> PlacementKey:
    return (pid, 0, "orders", partition, base)


def at(*targets: tuple[int, int]) -> Placement:
    return Placement(sum(1 for _ in targets), targets)


def write(journal: DirectoryJournal, *entries: tuple[PlacementKey, Placement]) -> None:
    trio.run(lambda: journal.record(entries))


def test_a_producer_from_another_worker_is_found_in_its_journal(tmp_path: Path) -> None:
    peer = DirectoryJournal(tmp_path / "worker-1")
    peer.open()
    write(peer, (key(7, 0), at((2, 4))), (key(7, 5), at((3, 9), (1, 2))))
    mine = PeersJournal(tmp_path / "worker-0", [tmp_path / "worker-1", tmp_path / "worker-2"])
    assert mine.open() == 0  # its own journal is empty; worker-2 has none at all
    assert mine.lookup(key(7, 5)) == at((3, 9), (1, 2))
    assert sorted(mine.placements(7, 0)) == sorted(
        [(key(7, 0), at((2, 4))), (key(7, 5), at((3, 9), (1, 2)))]
    )
    assert mine.lookup(key(8, 0)) is None
    # Written later by the peer: read on from where it stopped.
    write(peer, (key(8, 0), at((0, 0))))
    assert mine.lookup(key(8, 0)) == at((0, 0))
    # Its own placement of a producer wins over a peer's, and nothing is written
    # to the peer's file.
    size = peer.path.stat().st_size
    write(mine, (key(7, 5), at((4, 1))))
    assert mine.lookup(key(7, 5)) == at((4, 1))
    assert dict(mine.placements(7, 0))[key(7, 5)] == at((4, 1))
    assert peer.path.stat().st_size == size
    peer.close()
    mine.close()


def test_a_torn_line_waits_for_its_end_and_a_rewritten_file_is_read_again(
    tmp_path: Path,
) -> None:
    peer_dir = tmp_path / "worker-1"
    peer_dir.mkdir()
    line = encode(key(7, 0), at((2, 4)))
    path = peer_dir / "placements.jsonl"
    path.write_bytes(encode(key(6, 0), at((1, 1))) + line[:10])  # the peer writing it now
    mine = PeersJournal(tmp_path / "worker-0", [peer_dir])
    mine.open()
    assert mine.lookup(key(6, 0)) == at((1, 1))
    assert mine.lookup(key(7, 0)) is None
    with path.open("ab") as out:
        out.write(line[10:])
    assert mine.lookup(key(7, 0)) == at((2, 4))
    # The peer's rewrite: a new file in the old one's place (shorter).
    fresh = peer_dir / "placements.new"
    fresh.write_bytes(encode(key(9, 3), at((5, 6))))
    os.replace(fresh, path)
    assert mine.lookup(key(9, 3)) == at((5, 6))
    mine.close()


def test_a_producer_placed_here_does_not_read_the_peers(tmp_path: Path) -> None:
    """The peers' files are read for producers with no placement here only: a
    producer this worker serves costs no read (its batches' lookups miss)."""
    mine = PeersJournal(tmp_path / "worker-0", [tmp_path / "worker-1"])
    mine.open()
    write(mine, (key(7, 0), at((2, 4))))
    peer = DirectoryJournal(tmp_path / "worker-1")
    peer.open()
    write(peer, (key(7, 9), at((1, 1))))
    assert mine.lookup(key(7, 9)) is None  # producer 7 is this worker's
    assert mine.lookup(key(8, 0)) is None  # a new producer: the peers were read
    assert mine.lookup(key(7, 9)) == at((1, 1))  # and are known since
    peer.close()
    mine.close()
