"""Tests of :mod:`trafka.brokerlite.shares.partition`, the sans-IO state machine of
one KIP-932 share-partition, against the rules of its module docstring.

* Example tests, one group per rule: acquiring (available records first, lowest
  first, ``max_records``; new records in whole batches, compacted gaps and
  undeliverable batches archived, the record-lock window), acknowledging (one
  type per range or per offset, all-or-nothing, INVALID_RECORD_STATE and
  INVALID_REQUEST), transitions (acknowledging and releasing a member's records
  while their write is on its way, ``begin_write`` / ``settle``),
  release / lock expiry / leaving members and the delivery-count limit, putting back an acquisition never delivered
  (``unacquire``), ``move_start``, the SPSO, snapshots, the ``dirty`` flag.
* A model-based test: random sequences of every operation, run against a
  per-offset dict model written from the rules, comparing the two after every
  step and checking the invariants (runs cover ``[start, end)`` exactly and are
  maximal, the start never moves back, no offset held by two members, delivery
  counts never pass the limit and never decrease but by one when an acquisition
  is put back, finished offsets stay finished, only AVAILABLE or new offsets
  are handed out).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trafka.brokerlite.shares.partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    AcquiredRange,
    BatchSpan,
)
from trafka.brokerlite.shares.partition import SharePartition as Transitions
from trafka.codec.errors import ErrorCode


class SharePartition(Transitions):
    """A share-partition whose every transition is written at once, as after the
    one-node journal's append: acknowledging and releasing a member's records
    settle as they are made. The transitions themselves are tested on
    :class:`Transitions` (the product's class as it is)."""

    def acknowledge(self, member_id: str, batches: Any) -> ErrorCode:
        code = super().acknowledge(member_id, batches)
        self.settle((0,), written=True)
        return code

    def release_member(self, member_id: str) -> bool:
        changed = super().release_member(member_id)
        self.settle((0,), written=True)
        return changed


M = "member-m"
N = "member-n"
LOCK = 1_000

RunTuple = tuple[int, int, int, int, str | None, int]


def runs_of(sp: SharePartition) -> list[RunTuple]:
    return [
        (r.first, r.last, r.state, r.delivery_count, r.member_id, r.deadline_ms) for r in sp.runs()
    ]


def ranges(acquired: list[AcquiredRange]) -> list[tuple[int, int, int]]:
    return [(r.first, r.last, r.delivery_count) for r in acquired]


def check_structure(sp: SharePartition) -> None:
    """Runs cover ``[start, end)`` in order, without gaps, overlaps or two
    adjacent runs of the same kind; done runs never lead."""
    runs = sp.runs()
    assert sp.start_offset >= 0
    assert sp.end_offset >= sp.start_offset
    if not runs:
        assert sp.end_offset == sp.start_offset
        return
    assert runs[0].first == sp.start_offset
    assert runs[-1].last + 1 == sp.end_offset
    for run in runs:
        assert run.first <= run.last
        assert run.state in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED)
        assert run.delivery_count >= 0
        if run.state == ACQUIRED:
            assert run.member_id is not None
        else:
            assert run.member_id is None
            assert run.deadline_ms == 0
    for prev, run in itertools.pairwise(runs):
        assert prev.last + 1 == run.first
        assert not prev.same_kind(run), (prev, run)
    assert runs[0].state not in (ACKNOWLEDGED, ARCHIVED)


def new(
    sp: SharePartition,
    member: str,
    *spans: tuple[int, int],
    max_records: int = 10_000,
    now: int = 0,
):
    return sp.acquire_new(
        member, [BatchSpan(a, b) for a, b in spans], max_records, now_ms=now, lock_ms=LOCK
    )


def base_partition(start: int = 100) -> SharePartition:
    """``start..start+9`` ACQUIRED by M, ``+10..+14`` by N, ``+15`` ACKNOWLEDGED,
    ``+16`` ARCHIVED, ``+17..+19`` AVAILABLE (delivered once); not dirty."""
    sp = SharePartition(start)
    new(sp, M, (start, start + 9))
    new(sp, N, (start + 10, start + 14))
    new(sp, M, (start + 15, start + 19))
    s = start
    assert sp.acknowledge(M, [(s + 15, s + 19, [ACCEPT, REJECT, RELEASE, RELEASE, RELEASE])]) == (
        ErrorCode.NONE
    )
    sp.dirty = False
    assert runs_of(sp) == [
        (s, s + 9, ACQUIRED, 1, M, LOCK),
        (s + 10, s + 14, ACQUIRED, 1, N, LOCK),
        (s + 15, s + 15, ACKNOWLEDGED, 1, None, 0),
        (s + 16, s + 16, ARCHIVED, 1, None, 0),
        (s + 17, s + 19, AVAILABLE, 1, None, 0),
    ]
    return sp


# -- construction and reading ---------------------------------------------------------


def test_new_partition_is_empty() -> None:
    sp = SharePartition(42)
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (42, 42, [])
    assert sp.state_of(42) is None
    assert not sp.dirty
    assert not sp.has_available()
    assert sp.next_deadline() is None
    assert sp.acquired_count() == 0
    assert sp.snapshot() == {"start": 42, "runs": []}


def test_negative_start_offset_is_refused() -> None:
    with pytest.raises(ValueError):
        SharePartition(-1)


def test_reading_helpers() -> None:
    sp = base_partition(0)
    assert sp.state_of(-1) is None
    assert sp.state_of(0) == (ACQUIRED, 1, M)
    assert sp.state_of(12) == (ACQUIRED, 1, N)
    assert sp.state_of(15) == (ACKNOWLEDGED, 1, None)
    assert sp.state_of(16) == (ARCHIVED, 1, None)
    assert sp.state_of(19) == (AVAILABLE, 1, None)
    assert sp.state_of(20) is None
    assert sp.acquired_count() == 15
    assert sp.acquired_count(M) == 10
    assert sp.acquired_count(N) == 5
    assert sp.acquired_count("nobody") == 0
    assert sp.has_available()
    assert sp.next_deadline() == LOCK
    runs = sp.runs()
    runs[0].state = ARCHIVED  # copies: the partition is not changed through them
    assert sp.state_of(0) == (ACQUIRED, 1, M)


# -- acquire_available ----------------------------------------------------------------


def test_acquire_available_lowest_first_and_split_at_max_records() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 9))
    assert sp.acknowledge(M, [(2, 3, [RELEASE]), (6, 8, [RELEASE])]) == ErrorCode.NONE
    got = sp.acquire_available(N, 3, now_ms=50, lock_ms=200)
    assert ranges(got) == [(2, 3, 2), (6, 6, 2)]
    assert runs_of(sp) == [
        (0, 1, ACQUIRED, 1, M, LOCK),
        (2, 3, ACQUIRED, 2, N, 250),
        (4, 5, ACQUIRED, 1, M, LOCK),
        (6, 6, ACQUIRED, 2, N, 250),
        (7, 8, AVAILABLE, 1, None, 0),
        (9, 9, ACQUIRED, 1, M, LOCK),
    ]
    assert sp.next_deadline() == 250
    got = sp.acquire_available(M, 10, now_ms=60, lock_ms=10)
    assert ranges(got) == [(7, 8, 2)]
    assert not sp.has_available()
    assert sp.acquire_available(M, 10, now_ms=60, lock_ms=10) == []
    assert sp.next_deadline() == 70
    check_structure(sp)


def test_acquire_available_reports_each_delivery_count_and_joins_equal_ones() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 3))
    sp.acknowledge(M, [(0, 1, [RELEASE])])
    assert ranges(sp.acquire_available(M, 10, now_ms=0, lock_ms=LOCK)) == [(0, 1, 2)]
    sp.acknowledge(M, [(0, 3, [RELEASE])])
    # 0..1 delivered twice, 2..3 once: two ranges, each with its count
    got = sp.acquire_available(N, 10, now_ms=5, lock_ms=LOCK)
    assert ranges(got) == [(0, 1, 3), (2, 3, 2)]
    assert runs_of(sp) == [(0, 1, ACQUIRED, 3, N, 1005), (2, 3, ACQUIRED, 2, N, 1005)]
    sp.acknowledge(N, [(0, 0, [RELEASE]), (2, 2, [RELEASE])])
    sp.acknowledge(N, [(1, 1, [RELEASE]), (3, 3, [RELEASE])])
    assert ranges(sp.acquire_available(M, 10, now_ms=0, lock_ms=LOCK)) == [(0, 1, 4), (2, 3, 3)]


def test_acquire_available_with_nothing_or_zero_max_records() -> None:
    sp = base_partition(0)
    before = runs_of(sp)
    assert sp.acquire_available(M, 0, now_ms=0, lock_ms=LOCK) == []
    assert runs_of(sp) == before
    assert ranges(sp.acquire_available(M, 100, now_ms=0, lock_ms=LOCK)) == [(17, 19, 2)]
    assert sp.acquire_available(N, 100, now_ms=0, lock_ms=LOCK) == []
    assert not sp.dirty


def test_acquire_available_joins_a_members_adjacent_runs() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 4), now=0)
    sp.acknowledge(M, [(0, 4, [RELEASE])])
    # two acquisitions at the same time with the same lock: one run
    sp.acquire_available(N, 2, now_ms=7, lock_ms=LOCK)
    sp.acquire_available(N, 3, now_ms=7, lock_ms=LOCK)
    assert runs_of(sp) == [(0, 4, ACQUIRED, 2, N, 1007)]


# -- acquire_new ----------------------------------------------------------------------


def test_acquire_new_takes_whole_batches_past_max_records() -> None:
    sp = SharePartition(0)
    got = new(sp, M, (0, 4), (5, 9), (10, 14), max_records=7)
    assert ranges(got) == [(0, 9, 1)]
    assert sp.end_offset == 10
    assert runs_of(sp) == [(0, 9, ACQUIRED, 1, M, LOCK)]
    assert not sp.dirty


def test_acquire_new_takes_at_least_one_batch() -> None:
    sp = SharePartition(0)
    assert ranges(new(sp, M, (0, 99), (100, 101), max_records=1)) == [(0, 99, 1)]
    assert sp.end_offset == 100
    assert ranges(new(sp, N, (100, 101), max_records=0)) == []
    assert sp.end_offset == 100


def test_acquire_new_archives_compacted_gaps_between_batches() -> None:
    sp = SharePartition(0)
    got = new(sp, M, (0, 2), (6, 8), (9, 9))
    assert ranges(got) == [(0, 2, 1), (6, 9, 1)]
    assert runs_of(sp) == [
        (0, 2, ACQUIRED, 1, M, LOCK),
        (3, 5, ARCHIVED, 0, None, 0),
        (6, 9, ACQUIRED, 1, M, LOCK),
    ]
    assert sp.state_of(4) == (ARCHIVED, 0, None)
    assert sp.acknowledge(M, [(3, 3, [GAP])]) == ErrorCode.INVALID_RECORD_STATE


def test_acquire_new_leading_gap_moves_the_start() -> None:
    sp = SharePartition(0)
    assert ranges(new(sp, M, (5, 7))) == [(5, 7, 1)]
    assert (sp.start_offset, sp.end_offset) == (5, 8)
    assert runs_of(sp) == [(5, 7, ACQUIRED, 1, M, LOCK)]


def test_acquire_new_archives_undeliverable_batches() -> None:
    sp = SharePartition(0)
    batches = [BatchSpan(0, 1), BatchSpan(2, 2, deliverable=False), BatchSpan(3, 5)]
    got = sp.acquire_new(M, batches, 100, now_ms=0, lock_ms=LOCK)
    assert ranges(got) == [(0, 1, 1), (3, 5, 1)]
    assert runs_of(sp) == [
        (0, 1, ACQUIRED, 1, M, LOCK),
        (2, 2, ARCHIVED, 0, None, 0),
        (3, 5, ACQUIRED, 1, M, LOCK),
    ]
    # an undeliverable batch is not counted against max_records
    sp = SharePartition(0)
    batches = [BatchSpan(0, 3, deliverable=False), BatchSpan(4, 5), BatchSpan(6, 7)]
    got = sp.acquire_new(M, batches, 2, now_ms=0, lock_ms=LOCK)
    assert ranges(got) == [(4, 5, 1)]
    assert (sp.start_offset, sp.end_offset) == (4, 6)
    # only undeliverable: all archived, the start follows
    sp = SharePartition(0)
    got = sp.acquire_new(M, [BatchSpan(0, 4, deliverable=False)], 10, now_ms=0, lock_ms=LOCK)
    assert got == []
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (5, 5, [])


def test_acquire_new_skips_batches_below_the_end_and_starts_inside_a_batch() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 4))
    got = new(sp, N, (0, 4), (5, 9))
    assert ranges(got) == [(5, 9, 1)]
    assert sp.state_of(0) == (ACQUIRED, 1, M)
    sp = SharePartition(0)
    sp.move_start(5)
    got = new(sp, N, (3, 9))
    assert ranges(got) == [(5, 9, 1)]
    assert runs_of(sp) == [(5, 9, ACQUIRED, 1, N, LOCK)]


def test_acquire_new_stops_at_the_record_lock_window() -> None:
    sp = SharePartition(0, max_record_locks=10)
    got = new(sp, M, (0, 3), (4, 7), (8, 11), (12, 15))
    assert ranges(got) == [(0, 11, 1)]  # window 8 < 10 before the third batch
    assert sp.window_full()
    assert new(sp, N, (12, 15)) == []
    assert sp.end_offset == 12
    # the window counts from the start offset, whoever holds the records
    assert sp.acknowledge(M, [(0, 3, [ACCEPT])]) == ErrorCode.NONE
    assert sp.start_offset == 4
    assert not sp.window_full()
    assert ranges(new(sp, N, (12, 15), (16, 19))) == [(12, 15, 1)]
    assert sp.end_offset - sp.start_offset == 12
    check_structure(sp)


def test_acquire_new_window_counts_from_the_start_after_archiving() -> None:
    """Offsets archived at the head of the window leave it at once (the start
    offset moves past them), so they do not stop the batches behind them."""
    sp = SharePartition(0, max_record_locks=10)
    batches = [BatchSpan(0, 9, deliverable=False), BatchSpan(10, 12)]
    got = sp.acquire_new(M, batches, 100, now_ms=0, lock_ms=LOCK)
    assert ranges(got) == [(10, 12, 1)]
    assert (sp.start_offset, sp.end_offset) == (10, 13)


def test_acquire_new_makes_a_members_adjacent_batches_one_run() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 2), now=3)
    new(sp, M, (3, 5), now=3)
    new(sp, M, (6, 7), now=4)
    assert runs_of(sp) == [(0, 5, ACQUIRED, 1, M, 1003), (6, 7, ACQUIRED, 1, M, 1004)]


def test_skip_to_archives_up_to_the_offset() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 1))
    sp.dirty = False
    sp.skip_to(1)  # not past the end: nothing
    sp.skip_to(2)
    assert runs_of(sp) == [(0, 1, ACQUIRED, 1, M, LOCK)]
    assert not sp.dirty
    sp.skip_to(5)
    assert runs_of(sp) == [(0, 1, ACQUIRED, 1, M, LOCK), (2, 4, ARCHIVED, 0, None, 0)]
    assert sp.dirty
    sp = SharePartition(0)
    sp.skip_to(5)
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (5, 5, [])


# -- acknowledge ----------------------------------------------------------------------


def test_acknowledge_one_type_per_range() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 9))
    sp.dirty = False
    err = sp.acknowledge(M, [(0, 2, [ACCEPT]), (3, 4, [RELEASE]), (5, 6, [REJECT]), (7, 7, [GAP])])
    assert err == ErrorCode.NONE
    assert sp.dirty
    assert sp.start_offset == 3
    assert runs_of(sp) == [
        (3, 4, AVAILABLE, 1, None, 0),
        (5, 7, ARCHIVED, 1, None, 0),
        (8, 9, ACQUIRED, 1, M, LOCK),
    ]


def test_acknowledge_one_type_per_offset() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 7))
    types = [RELEASE, ACCEPT, ACCEPT, RELEASE, REJECT, GAP, ACCEPT, RELEASE]
    assert sp.acknowledge(M, [(0, 7, types)]) == ErrorCode.NONE
    assert runs_of(sp) == [
        (0, 0, AVAILABLE, 1, None, 0),
        (1, 2, ACKNOWLEDGED, 1, None, 0),
        (3, 3, AVAILABLE, 1, None, 0),
        (4, 5, ARCHIVED, 1, None, 0),
        (6, 6, ACKNOWLEDGED, 1, None, 0),
        (7, 7, AVAILABLE, 1, None, 0),
    ]
    # a one-offset batch with one type, and types given as a tuple
    sp = SharePartition(0)
    new(sp, M, (0, 2))
    assert sp.acknowledge(M, [(0, 0, (ACCEPT,)), (1, 2, (REJECT, ACCEPT))]) == ErrorCode.NONE
    assert sp.start_offset == 3


def test_acknowledge_across_runs_of_one_member() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 3), now=0)
    new(sp, M, (4, 7), now=10)  # another deadline: another run
    assert len(sp.runs()) == 2
    assert sp.acknowledge(M, [(2, 5, [ACCEPT])]) == ErrorCode.NONE
    assert runs_of(sp) == [
        (0, 1, ACQUIRED, 1, M, LOCK),
        (2, 5, ACKNOWLEDGED, 1, None, 0),
        (6, 7, ACQUIRED, 1, M, 1010),
    ]


def test_empty_acknowledgement_changes_nothing() -> None:
    sp = base_partition()
    before = runs_of(sp)
    assert sp.acknowledge(M, []) == ErrorCode.NONE
    assert runs_of(sp) == before
    assert not sp.dirty


VALID_PREFIX = (100, 101, [ACCEPT])

INVALID_ACKS: list[tuple[str, list[tuple[int, int, list[int]]], ErrorCode]] = [
    (
        "held by another member",
        [VALID_PREFIX, (110, 110, [ACCEPT])],
        ErrorCode.INVALID_RECORD_STATE,
    ),
    ("straddles two members", [VALID_PREFIX, (108, 111, [ACCEPT])], ErrorCode.INVALID_RECORD_STATE),
    ("already acknowledged", [VALID_PREFIX, (115, 115, [ACCEPT])], ErrorCode.INVALID_RECORD_STATE),
    ("already archived", [VALID_PREFIX, (116, 116, [REJECT])], ErrorCode.INVALID_RECORD_STATE),
    ("available", [VALID_PREFIX, (117, 117, [RELEASE])], ErrorCode.INVALID_RECORD_STATE),
    # Kafka: a range reaching past the last offset handed out is INVALID_REQUEST
    ("past the end", [VALID_PREFIX, (120, 120, [ACCEPT])], ErrorCode.INVALID_REQUEST),
    ("runs past the end", [VALID_PREFIX, (118, 125, [ACCEPT])], ErrorCode.INVALID_REQUEST),
    ("from below the start past the end", [(98, 120, [ACCEPT])], ErrorCode.INVALID_REQUEST),
    (
        "below the start, then not held",
        [(98, 99, [ACCEPT]), (110, 110, [ACCEPT])],
        ErrorCode.INVALID_RECORD_STATE,
    ),
    # the first range in error is the answer
    (
        "not held, then past the end",
        [(110, 110, [ACCEPT]), (120, 120, [ACCEPT])],
        ErrorCode.INVALID_RECORD_STATE,
    ),
    (
        "past the end, then malformed",
        [(120, 120, [ACCEPT]), (125, 124, [ACCEPT])],
        ErrorCode.INVALID_REQUEST,
    ),
    (
        "per-offset types over an invalid offset",
        [VALID_PREFIX, (108, 110, [ACCEPT, REJECT, ACCEPT])],
        ErrorCode.INVALID_RECORD_STATE,
    ),
    ("first after last", [VALID_PREFIX, (105, 104, [ACCEPT])], ErrorCode.INVALID_REQUEST),
    ("overlapping", [(100, 103, [ACCEPT]), (102, 105, [ACCEPT])], ErrorCode.INVALID_REQUEST),
    # Kafka's request check lets a range start where the previous one ended
    # (KafkaApis.validateAcknowledgementBatches); that offset, acknowledged by
    # the first range, is then no longer held (and nothing is applied).
    ("touching", [(100, 103, [ACCEPT]), (103, 105, [ACCEPT])], ErrorCode.INVALID_RECORD_STATE),
    ("out of order", [(104, 105, [ACCEPT]), VALID_PREFIX], ErrorCode.INVALID_REQUEST),
    ("same range twice", [VALID_PREFIX, VALID_PREFIX], ErrorCode.INVALID_REQUEST),
    ("too few types", [VALID_PREFIX, (102, 104, [ACCEPT, ACCEPT])], ErrorCode.INVALID_REQUEST),
    ("too many types", [VALID_PREFIX, (102, 103, [ACCEPT] * 3)], ErrorCode.INVALID_REQUEST),
    ("no types", [VALID_PREFIX, (102, 104, [])], ErrorCode.INVALID_REQUEST),
    ("unknown type 4", [VALID_PREFIX, (102, 104, [4])], ErrorCode.INVALID_REQUEST),
    (
        "unknown type 7 per offset",
        [VALID_PREFIX, (102, 104, [ACCEPT, 7, ACCEPT])],
        ErrorCode.INVALID_REQUEST,
    ),
    ("negative type", [VALID_PREFIX, (102, 102, [-1])], ErrorCode.INVALID_REQUEST),
    ("negative offset", [(-1, 101, [ACCEPT])], ErrorCode.INVALID_REQUEST),
]


@pytest.mark.parametrize(
    ("batches", "error"), [c[1:] for c in INVALID_ACKS], ids=[c[0] for c in INVALID_ACKS]
)
def test_invalid_acknowledgement_changes_nothing(
    batches: list[tuple[int, int, list[int]]], error: ErrorCode
) -> None:
    sp = base_partition()
    before = (runs_of(sp), sp.start_offset, sp.end_offset, sp.snapshot())
    assert sp.acknowledge(M, batches) == error
    assert (runs_of(sp), sp.start_offset, sp.end_offset, sp.snapshot()) == before
    assert not sp.dirty
    # and the partition still works: the valid part alone is accepted
    assert sp.acknowledge(M, [(100, 109, [ACCEPT])]) == ErrorCode.NONE
    assert sp.start_offset == 110


def test_acknowledging_twice_is_refused() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 4))
    assert sp.acknowledge(M, [(3, 4, [ACCEPT])]) == ErrorCode.NONE
    assert sp.acknowledge(M, [(3, 4, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge(M, [(4, 4, [RELEASE])]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.state_of(4) == (ACKNOWLEDGED, 1, None)
    assert sp.acknowledge(M, [(0, 2, [ACCEPT])]) == ErrorCode.NONE
    assert (sp.start_offset, sp.runs()) == (5, [])
    # below the start now: done already, so ignored (Kafka's SharePartition.acknowledge
    # skips a range whose last offset is below the start offset)
    sp.dirty = False
    assert sp.acknowledge(M, [(0, 0, [ACCEPT])]) == ErrorCode.NONE
    assert (sp.start_offset, sp.runs(), sp.dirty) == (5, [], False)
    # but with nothing in flight, a range from the start on is not found
    assert sp.acknowledge(M, [(4, 5, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge(M, [(5, 5, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE


def test_an_acknowledgement_undone_goes_back_to_the_state_before_it() -> None:
    # Kafka 4.4's SharePartition.rollbackOrProcessStateUpdates after a failed
    # write: every changed record back to its state and holder, its lock timer
    # still running (InFlightState.completeStateTransition(false)); the start
    # offset moves only after a successful write (maybeUpdateCachedStateAndOffsets).
    sp = Transitions(0)
    sp.acquire_new("m", [BatchSpan(0, 3)], 10, now_ms=0, lock_ms=100)
    sp.acquire_new("n", [BatchSpan(4, 5)], 10, now_ms=5, lock_ms=100)
    sp.dirty = False
    before = sp.runs()
    assert sp.acknowledge("m", [(0, 3, [ACCEPT, ACCEPT, RELEASE, REJECT])]) == ErrorCode.NONE
    assert sp.start_offset == 0 and sp.dirty and sp.writing()
    assert sp.settle((0,), written=False)
    assert sp.runs() == before and sp.start_offset == 0 and not sp.writing()
    assert sp.dirty  # written again with the next write
    assert sp.state_of(2) == (ACQUIRED, 1, "m")
    # The restored lock ends when it would have.
    assert sp.next_deadline() == 100
    assert sp.expire_locks(100)
    assert sp.state_of(0) == (AVAILABLE, 1, None) and sp.state_of(4) == (ACQUIRED, 1, "n")
    # Nothing is left to settle: acknowledging again works on its own.
    assert not sp.settle((0,), written=False)
    assert sp.acknowledge("n", [(4, 5, [ACCEPT])]) == ErrorCode.NONE
    assert sp.settle((0,), written=True) and sp.start_offset == 0  # (0-3 available)


def test_a_transition_on_its_way_is_neither_acquired_nor_acknowledged_nor_passed() -> None:
    # Kafka 4.4: a record with an ongoing state transition (InFlightState
    # .hasOngoingStateTransition) is skipped by SharePartition.acquire, refused by
    # acknowledge (INVALID_RECORD_STATE: "has on-going transition"), left alone by
    # the lock timeout (tryUpdateState refuses it), and the start offset does not
    # move past it (canMoveStartOffset).
    sp = Transitions(0)
    sp.acquire_new("m", [BatchSpan(0, 3)], 10, now_ms=0, lock_ms=100)
    assert sp.acknowledge("m", [(0, 1, [ACCEPT]), (2, 3, [RELEASE])]) == ErrorCode.NONE
    assert sp.state_of(0) == (ACKNOWLEDGED, 1, None) and sp.start_offset == 0
    assert sp.state_of(2) == (AVAILABLE, 1, None) and not sp.has_available()
    assert sp.acquire_available("n", 10, now_ms=1, lock_ms=100) == []
    assert sp.acknowledge("m", [(0, 0, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    assert not sp.expire_locks(1_000)
    # What is written is the state once written: the start past 0-1.
    assert sp.snapshot() == {"start": 2, "runs": [[2, 3, AVAILABLE, 1]]}
    # Written: the start moves past 0-1, and 2-3 may be acquired.
    sp.begin_write(7)
    assert not sp.settle((0, 6), written=True)  # (not these writes)
    assert sp.settle((7,), written=True)
    assert sp.start_offset == 2 and sp.has_available() and not sp.writing()
    got = sp.acquire_available("n", 10, now_ms=1, lock_ms=100)
    assert ranges(got) == [(2, 3, 2)]


def test_a_rollback_releases_a_record_whose_lock_ended_meanwhile() -> None:
    # Kafka 4.4's InFlightState.completeStateTransition(false): when the record's
    # acquisition lock timer task has expired by then, the record becomes
    # AVAILABLE (ARCHIVED at the delivery-count limit) instead of held again.
    sp = Transitions(0, delivery_count_limit=2)
    sp.acquire_new("m", [BatchSpan(0, 1)], 10, now_ms=0, lock_ms=100)
    sp.release_member("m")
    assert sp.settle((0,), written=False)  # (no time: held again)
    assert sp.state_of(0) == (ACQUIRED, 1, "m")
    assert sp.acknowledge("m", [(0, 0, [ACCEPT]), (1, 1, [REJECT])]) == ErrorCode.NONE
    sp.dirty = False
    assert sp.settle((0,), written=False, now_ms=99)  # the lock still runs
    assert sp.state_of(0) == (ACQUIRED, 1, "m") and not sp.dirty
    assert sp.acknowledge("m", [(0, 1, [ACCEPT])]) == ErrorCode.NONE
    sp.dirty = False  # (written, and refused)
    assert sp.settle((0,), written=False, now_ms=100)  # its end: released
    assert sp.state_of(0) == (AVAILABLE, 1, None) and not sp.dirty  # (written so already)
    got = sp.acquire_available("n", 10, now_ms=100, lock_ms=100)
    assert ranges(got) == [(0, 1, 2)]
    sp.release_member("n")
    assert sp.settle((0,), written=False, now_ms=300)  # at the limit: archived
    assert sp.start_offset == 2 and sp.runs() == []


def test_a_failed_write_rolls_back_its_own_transitions_only() -> None:
    # Two writes on their way: the failed one puts back the records it changed;
    # the other's, and what changed without a transition (a lock expiry, new
    # records), stay.
    sp = Transitions(0)
    sp.acquire_new("m", [BatchSpan(0, 1)], 10, now_ms=0, lock_ms=100)
    sp.acquire_new("n", [BatchSpan(2, 3)], 10, now_ms=0, lock_ms=50)
    sp.acquire_new("o", [BatchSpan(4, 4)], 10, now_ms=0, lock_ms=100)
    assert sp.acknowledge("m", [(0, 1, [ACCEPT])]) == ErrorCode.NONE
    sp.begin_write(1)
    assert sp.release_member("o")
    sp.begin_write(2)
    assert sp.expire_locks(50)  # n's lock: no transition
    sp.acquire_new("p", [BatchSpan(5, 5)], 10, now_ms=60, lock_ms=100)
    assert sp.settle((2,), written=False)
    assert sp.state_of(4) == (ACQUIRED, 1, "o")
    assert sp.state_of(0) == (ACKNOWLEDGED, 1, None)  # (still on its way)
    assert sp.state_of(2) == (AVAILABLE, 1, None) and sp.state_of(5) == (ACQUIRED, 1, "p")
    assert sp.settle((1,), written=True) and sp.start_offset == 2


def test_acknowledging_from_below_the_start_skips_the_done_offsets() -> None:
    """Offsets below the start are skipped; the rest of the range is applied,
    per-offset types staying with their offsets (Kafka: per-offset acknowledgement
    skips offsets below the start offset)."""
    sp = base_partition()
    assert sp.acknowledge(M, [(97, 101, [REJECT, REJECT, REJECT, ACCEPT, REJECT])]) == (
        ErrorCode.NONE
    )
    assert sp.start_offset == 102
    assert sp.dirty
    sp.dirty = False
    assert sp.acknowledge(M, [(90, 101, [ACCEPT])]) == ErrorCode.NONE
    assert not sp.dirty
    assert sp.acknowledge(M, [(90, 103, [ACCEPT])]) == ErrorCode.NONE
    assert sp.start_offset == 104


# -- release, lock expiry, leaving members, delivery-count limit ----------------------


def test_release_keeps_delivery_count_and_archives_at_the_limit() -> None:
    sp = SharePartition(0, delivery_count_limit=3)
    new(sp, M, (0, 1))
    assert sp.acknowledge(M, [(0, 0, [RELEASE])]) == ErrorCode.NONE
    assert sp.state_of(0) == (AVAILABLE, 1, None)
    assert ranges(sp.acquire_available(N, 1, now_ms=0, lock_ms=LOCK)) == [(0, 0, 2)]
    assert sp.acknowledge(N, [(0, 0, [RELEASE])]) == ErrorCode.NONE
    assert sp.state_of(0) == (AVAILABLE, 2, None)
    assert ranges(sp.acquire_available(M, 1, now_ms=0, lock_ms=LOCK)) == [(0, 0, 3)]
    assert sp.acknowledge(M, [(0, 0, [RELEASE])]) == ErrorCode.NONE
    # delivered three times: archived, and the start moves past it
    assert sp.state_of(0) is None
    assert sp.start_offset == 1
    assert sp.acquire_available(N, 10, now_ms=0, lock_ms=LOCK) == []


def test_delivery_count_limit_one_archives_on_first_release() -> None:
    sp = SharePartition(0, delivery_count_limit=1)
    new(sp, M, (0, 3))
    assert sp.acknowledge(M, [(1, 2, [RELEASE])]) == ErrorCode.NONE
    assert runs_of(sp) == [
        (0, 0, ACQUIRED, 1, M, LOCK),
        (1, 2, ARCHIVED, 1, None, 0),
        (3, 3, ACQUIRED, 1, M, LOCK),
    ]


def test_lock_expiry_makes_records_available_again() -> None:
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire_new(M, [BatchSpan(0, 2)], 10, now_ms=0, lock_ms=100)
    sp.acquire_new(N, [BatchSpan(3, 5)], 10, now_ms=50, lock_ms=100)
    sp.dirty = False
    assert sp.next_deadline() == 100
    assert not sp.expire_locks(99)
    assert not sp.dirty
    assert sp.expire_locks(120)
    assert sp.dirty
    assert runs_of(sp) == [(0, 2, AVAILABLE, 1, None, 0), (3, 5, ACQUIRED, 1, N, 150)]
    assert sp.next_deadline() == 150
    # the old holder can no longer acknowledge
    assert sp.acknowledge(M, [(0, 0, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    assert ranges(sp.acquire_available(N, 10, now_ms=200, lock_ms=100)) == [(0, 2, 2)]
    assert sp.acknowledge(M, [(0, 0, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    # both runs expire; 0..2 reached the limit (2) and is archived, 3..5 comes back
    assert sp.expire_locks(1_000)
    assert (sp.start_offset, runs_of(sp)) == (3, [(3, 5, AVAILABLE, 1, None, 0)])
    assert not sp.expire_locks(10_000)


def test_release_member() -> None:
    sp = SharePartition(0, delivery_count_limit=2)
    new(sp, M, (0, 2))
    new(sp, N, (3, 4))
    new(sp, M, (5, 6))
    sp.acknowledge(M, [(5, 5, [RELEASE])])
    sp.acquire_available(M, 1, now_ms=0, lock_ms=LOCK)  # offset 5: second delivery
    sp.dirty = False
    assert not sp.release_member("nobody")
    assert not sp.dirty
    assert sp.release_member(M)
    assert sp.dirty
    assert runs_of(sp) == [
        (0, 2, AVAILABLE, 1, None, 0),
        (3, 4, ACQUIRED, 1, N, LOCK),
        (5, 5, ARCHIVED, 2, None, 0),
        (6, 6, AVAILABLE, 1, None, 0),
    ]
    assert sp.acquired_count(M) == 0
    assert not sp.release_member(M)
    assert sp.release_member(N)
    assert sp.acquired_count() == 0


def test_unacquire_puts_back_one_acquisition_with_the_count_from_before() -> None:
    """An acquisition whose answer never reached its member is put back: AVAILABLE,
    one delivery fewer, never archived by it (Kafka's DeliveryCountOps.DECREASE)."""
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire_new(M, [BatchSpan(0, 3)], 10, now_ms=0, lock_ms=LOCK)
    assert sp.acknowledge(M, [(0, 0, [RELEASE])]) == ErrorCode.NONE
    assert ranges(sp.acquire_available(N, 10, now_ms=5, lock_ms=LOCK)) == [(0, 0, 2)]
    sp.dirty = False
    # At the delivery-count limit, yet not archived: that delivery never happened.
    assert sp.unacquire(N, 0, 0, 2, 5 + LOCK)
    assert sp.state_of(0) == (AVAILABLE, 1, None)
    # Only what that very acquisition holds: member, count and deadline must match.
    assert not sp.unacquire(N, 1, 3, 1, LOCK)
    assert not sp.unacquire(M, 1, 3, 2, LOCK)
    assert not sp.unacquire(M, 1, 3, 1, LOCK + 1)
    assert not sp.unacquire(M, 7, 9, 1, LOCK)
    assert sp.acknowledge(M, [(2, 2, [ACCEPT])]) == ErrorCode.NONE
    sp.dirty = False
    assert sp.unacquire(M, 0, 3, 1, LOCK)  # 1 and 3; 0 (available) and 2 (accepted) stay
    assert runs_of(sp) == [
        (0, 0, AVAILABLE, 1, None, 0),
        (1, 1, AVAILABLE, 0, None, 0),
        (2, 2, ACKNOWLEDGED, 1, None, 0),
        (3, 3, AVAILABLE, 0, None, 0),
    ]
    assert not sp.dirty  # (acquiring is not written, and neither is its undoing)
    assert sp.next_deadline() is None
    assert ranges(sp.acquire_available(M, 10, now_ms=9, lock_ms=LOCK)) == [
        (0, 0, 2),
        (1, 1, 1),
        (3, 3, 1),
    ]


# -- start offset ---------------------------------------------------------------------


def test_start_advances_over_finished_prefixes_only() -> None:
    sp = SharePartition(10)
    new(sp, M, (10, 19))
    assert sp.acknowledge(M, [(15, 19, [ACCEPT])]) == ErrorCode.NONE
    assert sp.start_offset == 10
    assert sp.acknowledge(M, [(10, 11, [REJECT]), (13, 13, [ACCEPT])]) == ErrorCode.NONE
    assert sp.start_offset == 12
    assert sp.acknowledge(M, [(12, 12, [RELEASE])]) == ErrorCode.NONE
    assert sp.start_offset == 12  # AVAILABLE is not finished
    sp.acquire_available(M, 1, now_ms=0, lock_ms=LOCK)
    assert sp.acknowledge(M, [(12, 12, [ACCEPT]), (14, 14, [GAP])]) == ErrorCode.NONE
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (20, 20, [])
    assert ranges(new(sp, N, (20, 21))) == [(20, 21, 1)]


def test_move_start_forgets_offsets_below_the_log_start() -> None:
    sp = base_partition(0)
    assert sp.move_start(4)
    assert sp.dirty
    assert sp.start_offset == 4
    assert runs_of(sp)[0] == (4, 9, ACQUIRED, 1, M, LOCK)
    assert sp.state_of(3) is None
    assert sp.acquired_count(M) == 6
    assert sp.acknowledge(M, [(3, 4, [ACCEPT])]) == ErrorCode.NONE  # 3: forgotten, skipped
    assert sp.start_offset == 5
    assert sp.acknowledge(M, [(5, 5, [ACCEPT])]) == ErrorCode.NONE
    check_structure(sp)


def test_move_start_backwards_or_to_the_start_is_a_no_op() -> None:
    sp = base_partition(10)
    before = runs_of(sp)
    assert not sp.move_start(10)
    assert not sp.move_start(3)
    assert (sp.start_offset, runs_of(sp), sp.dirty) == (10, before, False)


def test_move_start_skips_finished_offsets_behind_the_log_start() -> None:
    sp = base_partition(0)
    sp.acknowledge(N, [(10, 14, [ACCEPT])])
    assert sp.move_start(8)
    # 8..9 are M's; move past them: 10..16 are finished, 17 is available
    assert sp.move_start(10)
    assert sp.start_offset == 17
    assert runs_of(sp) == [(17, 19, AVAILABLE, 1, None, 0)]


def test_move_start_past_the_end() -> None:
    sp = base_partition(0)
    assert sp.move_start(30)
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (30, 30, [])
    assert sp.acquired_count() == 0
    assert ranges(new(sp, N, (30, 31))) == [(30, 31, 1)]
    sp = SharePartition(0)
    assert sp.move_start(7)
    assert (sp.start_offset, sp.end_offset) == (7, 7)


# -- snapshots ------------------------------------------------------------------------


def test_snapshot_round_trip_saves_acquired_as_available() -> None:
    sp = base_partition(0)
    snap = sp.snapshot()
    assert snap == {
        "start": 0,
        "runs": [
            [0, 14, AVAILABLE, 1],  # M's and N's locks are not kept
            [15, 15, ACKNOWLEDGED, 1],
            [16, 16, ARCHIVED, 1],
            [17, 19, AVAILABLE, 1],
        ],
    }
    assert json.loads(json.dumps(snap)) == snap
    restored = SharePartition.from_snapshot(json.loads(json.dumps(snap)))
    assert not restored.dirty
    assert (restored.start_offset, restored.end_offset) == (0, 20)
    assert runs_of(restored) == [
        (0, 14, AVAILABLE, 1, None, 0),
        (15, 15, ACKNOWLEDGED, 1, None, 0),
        (16, 16, ARCHIVED, 1, None, 0),
        (17, 19, AVAILABLE, 1, None, 0),
    ]
    assert restored.snapshot() == snap
    # the lost locks' records are delivered again, counting the earlier delivery
    assert ranges(restored.acquire_available(N, 100, now_ms=0, lock_ms=LOCK)) == [
        (0, 14, 2),
        (17, 19, 2),
    ]
    check_structure(restored)


def test_snapshot_keeps_delivery_counts_apart() -> None:
    sp = SharePartition(5)
    new(sp, M, (5, 9))
    sp.acknowledge(M, [(5, 6, [RELEASE]), (8, 8, [ACCEPT])])
    sp.acquire_available(N, 1, now_ms=0, lock_ms=LOCK)  # offset 5, count 2
    snap = sp.snapshot()
    assert snap == {
        "start": 5,
        "runs": [
            [5, 5, AVAILABLE, 2],
            [6, 7, AVAILABLE, 1],
            [8, 8, ACKNOWLEDGED, 1],
            [9, 9, AVAILABLE, 1],
        ],
    }
    restored = SharePartition.from_snapshot(snap, delivery_count_limit=7, max_record_locks=9)
    assert restored.delivery_count_limit == 7
    assert restored.max_record_locks == 9
    assert restored.state_of(5) == (AVAILABLE, 2, None)
    assert restored.snapshot() == snap


def test_from_snapshot_moves_past_finished_prefix_and_joins_runs() -> None:
    data = {
        "start": 3,
        "runs": [
            [3, 4, ARCHIVED, 0],
            [5, 5, ACKNOWLEDGED, 1],
            [6, 7, AVAILABLE, 1],
            [8, 9, AVAILABLE, 1],
        ],
    }
    sp = SharePartition.from_snapshot(data)
    assert (sp.start_offset, runs_of(sp)) == (6, [(6, 9, AVAILABLE, 1, None, 0)])
    assert not sp.dirty


def test_restored_records_never_pass_the_delivery_count_limit() -> None:
    """A record acquired for the limit-th time when the partition restarts must
    not be delivered a (limit+1)-th time: a poison record stops coming back."""
    sp = SharePartition(0, delivery_count_limit=2)
    new(sp, M, (0, 0))
    sp.acknowledge(M, [(0, 0, [RELEASE])])
    assert ranges(sp.acquire_available(M, 10, now_ms=0, lock_ms=LOCK)) == [(0, 0, 2)]
    restored = SharePartition.from_snapshot(sp.snapshot(), delivery_count_limit=2)
    got = restored.acquire_available(N, 10, now_ms=0, lock_ms=LOCK)
    assert all(r.delivery_count <= 2 for r in got), got
    assert restored.state_of(0) in (None, (ARCHIVED, 2, None))


DAMAGED: list[tuple[str, Any]] = [
    ("first run not at start", {"start": 5, "runs": [[6, 7, AVAILABLE, 1]]}),
    ("first run below start", {"start": 5, "runs": [[4, 7, AVAILABLE, 1]]}),
    ("hole between runs", {"start": 0, "runs": [[0, 1, AVAILABLE, 1], [3, 4, AVAILABLE, 1]]}),
    ("overlapping runs", {"start": 0, "runs": [[0, 3, AVAILABLE, 1], [3, 4, ARCHIVED, 1]]}),
    ("last before first", {"start": 0, "runs": [[0, 1, AVAILABLE, 1], [2, 1, AVAILABLE, 1]]}),
    ("acquired state", {"start": 0, "runs": [[0, 1, ACQUIRED, 1]]}),
    ("unknown state 5", {"start": 0, "runs": [[0, 1, 5, 1]]}),
    ("negative count", {"start": 0, "runs": [[0, 1, AVAILABLE, -1]]}),
    ("negative start", {"start": -1, "runs": []}),
    ("short row", {"start": 0, "runs": [[0, 1, AVAILABLE]]}),
    ("long row", {"start": 0, "runs": [[0, 1, AVAILABLE, 1, 0]]}),
    ("text value", {"start": 0, "runs": [[0, "x", AVAILABLE, 1]]}),
    ("missing start", {"runs": []}),
    ("missing runs", {"start": 0}),
    ("null value", {"start": 0, "runs": [[0, None, AVAILABLE, 1]]}),
    ("fractional value", {"start": 0, "runs": [[0, 2.5, AVAILABLE, 1]]}),
    ("row not a list", {"start": 0, "runs": [5]}),
]


@pytest.mark.parametrize("data", [d for _, d in DAMAGED], ids=[n for n, _ in DAMAGED])
def test_damaged_snapshot_raises_value_error(data: Any) -> None:
    with pytest.raises(ValueError):
        SharePartition.from_snapshot(data)


# -- the dirty flag -------------------------------------------------------------------


def test_acquiring_alone_is_not_dirty() -> None:
    sp = SharePartition(0)
    new(sp, M, (0, 4), (5, 9))
    assert not sp.dirty
    sp.acknowledge(M, [(0, 4, [RELEASE])])
    sp.dirty = False
    sp.acquire_available(N, 10, now_ms=0, lock_ms=LOCK)
    assert not sp.dirty


def test_state_changes_make_the_partition_dirty() -> None:
    def fresh() -> SharePartition:
        sp = SharePartition(0)
        new(sp, M, (0, 4))
        assert not sp.dirty
        return sp

    for ack in (ACCEPT, RELEASE, REJECT, GAP):
        sp = fresh()
        sp.acknowledge(M, [(1, 1, [ack])])
        assert sp.dirty, ack
    sp = fresh()
    sp.acquire_new(M, [BatchSpan(5, 6, deliverable=False)], 10, now_ms=0, lock_ms=LOCK)
    assert sp.dirty
    sp = fresh()
    sp.acknowledge(M, [(1, 1, [4])])
    sp.acknowledge(N, [(1, 1, [ACCEPT])])
    sp.expire_locks(LOCK - 1)
    sp.release_member(N)
    sp.move_start(0)
    sp.skip_to(3)
    assert not sp.dirty


def test_archiving_offsets_the_log_lacks_is_dirty_the_same_way_however_found() -> None:
    """Compacted-away offsets reached by acquire_new (a gap between batches) and
    by skip_to are the same fact; an undeliverable batch is the same kind of
    fact. The dirty flag should not depend on which call recorded it."""
    by_skip = SharePartition(0)
    new(by_skip, M, (0, 1))
    by_skip.skip_to(5)
    by_gap = SharePartition(0)
    new(by_gap, M, (0, 1))
    new(by_gap, M, (5, 6))
    assert by_gap.state_of(3) == by_skip.state_of(3) == (ARCHIVED, 0, None)
    by_batch = SharePartition(0)
    new(by_batch, M, (0, 1))
    by_batch.acquire_new(M, [BatchSpan(2, 4, deliverable=False)], 10, now_ms=0, lock_ms=LOCK)
    assert by_batch.dirty == by_skip.dirty == by_gap.dirty


# -- model-based test -----------------------------------------------------------------

MEMBERS = ("a", "b", "c")
DONE = (ACKNOWLEDGED, ARCHIVED)


class Model:
    """Every in-flight offset: ``[state, delivery_count, holder, deadline]``."""

    def __init__(self, start: int, limit: int, locks: int) -> None:
        self.start = start
        self.end = start
        self.recs: dict[int, list[Any]] = {}
        self.limit = limit
        self.locks = locks
        self.archived_gap = self.archived_batch = False  # by the last acquire_new
        self.changed = False  # by the last acknowledge

    def advance(self) -> None:
        while self.start < self.end and self.recs[self.start][0] in DONE:
            del self.recs[self.start]
            self.start += 1

    def release(self, offset: int) -> None:
        rec = self.recs[offset]
        rec[0] = ARCHIVED if rec[1] >= self.limit else AVAILABLE
        rec[2] = None
        rec[3] = 0

    def runs(self) -> list[RunTuple]:
        out: list[list[Any]] = []
        for o in range(self.start, self.end):
            kind = self.recs[o]
            if out and out[-1][1] + 1 == o and out[-1][2:] == kind:
                out[-1][1] = o
            else:
                out.append([o, o, *kind])
        return [tuple(r) for r in out]  # type: ignore[misc]

    def held(self, member: str) -> list[int]:
        return [o for o, r in sorted(self.recs.items()) if r[0] == ACQUIRED and r[2] == member]

    @staticmethod
    def merged(offsets: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        out: list[list[int]] = []
        for o, count in offsets:
            if out and out[-1][1] + 1 == o and out[-1][2] == count:
                out[-1][1] = o
            else:
                out.append([o, o, count])
        return [tuple(r) for r in out]  # type: ignore[misc]

    def acquire_available(self, member: str, max_records: int, now: int, lock: int):
        got = []
        for o in range(self.start, self.end):
            if len(got) >= max_records:
                break
            rec = self.recs[o]
            if rec[0] == AVAILABLE:
                rec[:] = [ACQUIRED, rec[1] + 1, member, now + lock]
                got.append((o, rec[1]))
        return self.merged(got)

    def acquire_new(
        self, member: str, batches: list[BatchSpan], max_records: int, now: int, lock: int
    ):
        got = []
        taken = 0
        self.archived_gap = self.archived_batch = False
        for b in batches:
            if b.last < self.end:
                continue
            if taken >= max_records or self.end - self.start >= self.locks:
                break
            first = max(b.first, self.end)
            for o in range(self.end, first):
                self.recs[o] = [ARCHIVED, 0, None, 0]
                self.archived_gap = True
            self.archived_batch |= not b.deliverable
            for o in range(first, b.last + 1):
                if b.deliverable:
                    self.recs[o] = [ACQUIRED, 1, member, now + lock]
                    got.append((o, 1))
                    taken += 1
                else:
                    self.recs[o] = [ARCHIVED, 0, None, 0]
            self.end = b.last + 1
            self.advance()
        return self.merged(got)

    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]]) -> ErrorCode:
        self.changed = False
        previous = -1
        for first, last, types in batches:
            if first > last or first < previous or first < 0:
                return ErrorCode.INVALID_REQUEST
            if len(types) not in (1, last - first + 1):
                return ErrorCode.INVALID_REQUEST
            if any(t not in (GAP, ACCEPT, RELEASE, REJECT) for t in types):
                return ErrorCode.INVALID_REQUEST
            previous = last
        # Kafka's SharePartition.acknowledge, one range at a time: a range below
        # the start is done already (ignored); one past the last offset handed out
        # is INVALID_REQUEST; inside, every offset from the start on must be held.
        plan = []
        for first, last, types in batches:
            if last < self.start:
                continue
            if self.start == self.end:
                return ErrorCode.INVALID_RECORD_STATE
            if last >= self.end:
                return ErrorCode.INVALID_REQUEST
            for o in range(max(first, self.start), last + 1):
                rec = self.recs[o]
                if rec[0] != ACQUIRED or rec[2] != member or any(o == p for p, _ in plan):
                    return ErrorCode.INVALID_RECORD_STATE
                plan.append((o, types[0] if len(types) == 1 else types[o - first]))
        self.changed = bool(plan)
        for o, ack in plan:
            rec = self.recs[o]
            if ack == RELEASE:
                self.release(o)
            else:
                rec[:] = [ACKNOWLEDGED if ack == ACCEPT else ARCHIVED, rec[1], None, 0]
        self.advance()
        return ErrorCode.NONE

    def expire(self, now: int) -> bool:
        expired = [o for o, r in self.recs.items() if r[0] == ACQUIRED and r[3] <= now]
        for o in expired:
            self.release(o)
        self.advance()
        return bool(expired)

    def release_member(self, member: str) -> bool:
        held = self.held(member)
        for o in held:
            self.release(o)
        self.advance()
        return bool(held)

    def move_start(self, lso: int) -> bool:
        if lso <= self.start:
            return False
        for o in range(self.start, min(lso, self.end)):
            del self.recs[o]
        self.start = lso
        self.end = max(self.end, lso)
        self.advance()
        return True

    def skip_to(self, offset: int) -> None:
        for o in range(self.end, offset):
            self.recs[o] = [ARCHIVED, 0, None, 0]
        self.end = max(self.end, offset)
        self.advance()

    def unacquire(self, member: str, first: int, last: int, count: int, deadline: int) -> bool:
        """Put back what one acquisition still holds: one delivery fewer."""
        back = [
            o
            for o in range(max(first, self.start), min(last + 1, self.end))
            if self.recs[o] == [ACQUIRED, count, member, deadline]
        ]
        for o in back:
            self.recs[o] = [AVAILABLE, count - 1, None, 0]
        return bool(back)

    def restart(self) -> None:
        """Locks end with the restart: held records are released (so archived
        once their count has reached the limit)."""
        for offset, rec in self.recs.items():
            if rec[0] == ACQUIRED:
                self.release(offset)
        self.advance()


def compare(sp: SharePartition, model: Model) -> None:
    check_structure(sp)
    assert (sp.start_offset, sp.end_offset) == (model.start, model.end)
    assert runs_of(sp) == model.runs()
    for o in range(model.start - 2, model.end + 2):
        rec = model.recs.get(o) if model.start <= o < model.end else None
        assert sp.state_of(o) == (None if rec is None else (rec[0], rec[1], rec[2]))
    for m in MEMBERS:
        assert sp.acquired_count(m) == len(model.held(m))
    deadlines = [r[3] for r in model.recs.values() if r[0] == ACQUIRED]
    assert sp.next_deadline() == (min(deadlines) if deadlines else None)
    assert sp.has_available() == any(r[0] == AVAILABLE for r in model.recs.values())
    assert sp.window_full() == (model.end - model.start >= model.locks)


def per_offset(sp: SharePartition) -> dict[int, tuple[int, int, str | None, int]]:
    return {
        o: (r.state, r.delivery_count, r.member_id, r.deadline_ms)
        for r in sp.runs()
        for o in range(r.first, r.last + 1)
    }


def draw_batches(data: st.DataObject, end: int) -> list[BatchSpan]:
    pos = max(0, end - data.draw(st.integers(0, 3), label="lead"))
    batches = []
    for _ in range(data.draw(st.integers(1, 5), label="batches")):
        first = pos + data.draw(st.sampled_from([0, 0, 0, 1, 2, 4]), label="gap")
        last = first + data.draw(st.integers(0, 4), label="size")
        deliverable = data.draw(st.sampled_from([True, True, True, False]), label="deliverable")
        batches.append(BatchSpan(first, last, deliverable))
        pos = last + 1
    return batches


def draw_types(data: st.DataObject, n: int) -> list[int]:
    kinds = st.sampled_from([GAP, ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT])
    if n > 1 and data.draw(st.booleans(), label="per offset"):
        return [data.draw(kinds) for _ in range(n)]
    return [data.draw(kinds)]


def draw_valid_ack(data: st.DataObject, held: list[int]) -> list[tuple[int, int, list[int]]]:
    """Ranges inside the member's held offsets, in order."""
    batches: list[tuple[int, int, list[int]]] = []
    i = 0
    while i < len(held):
        i += data.draw(st.integers(0, 3), label="skip")
        if i >= len(held) or not data.draw(st.booleans(), label="more"):
            break
        j = i
        size = data.draw(st.integers(1, 4), label="len")
        while j + 1 < len(held) and held[j + 1] == held[j] + 1 and j - i + 1 < size:
            j += 1
        batches.append((held[i], held[j], draw_types(data, held[j] - held[i] + 1)))
        i = j + 1
    return batches


def draw_any_ack(data: st.DataObject, start: int, end: int) -> list[tuple[int, int, list[int]]]:
    """Ranges anywhere near the window; sometimes malformed."""
    batches: list[tuple[int, int, list[int]]] = []
    pos = max(-1, start - 2)
    for _ in range(data.draw(st.integers(1, 3), label="ranges")):
        first = pos + data.draw(st.integers(-1, max(1, end - start + 1)), label="at")
        last = first + data.draw(st.integers(-1, 4), label="len")
        shape = data.draw(st.sampled_from(["ok", "ok", "ok", "count", "unknown"]), label="shape")
        types = draw_types(data, max(1, last - first + 1))
        if shape == "count":
            types = [*types, ACCEPT] if last >= first else []
        elif shape == "unknown":
            types[data.draw(st.integers(0, len(types) - 1))] = data.draw(
                st.sampled_from([4, 5, -1])
            )
        batches.append((first, last, types))
        pos = last + 1
    return batches


OPS = [
    "acquire_available",
    "acquire_available",
    "acquire_new",
    "acquire_new",
    "ack_valid",
    "ack_valid",
    "ack_valid_then_bad",
    "ack_any",
    "ack_undone",
    "release_undone",
    "expire",
    "expire",
    "release_member",
    "move_start",
    "skip_to",
    "restart",
    "persisted",
    "unacquire",
    "unacquire",
]


@settings(
    max_examples=250,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_model(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, 3), label="start")
    limit = data.draw(st.integers(1, 4), label="delivery_count_limit")
    locks = data.draw(st.integers(1, 20), label="max_record_locks")
    sp = SharePartition(start, delivery_count_limit=limit, max_record_locks=locks)
    model = Model(start, limit, locks)
    now = 0
    finished: dict[int, int] = {}  # offset -> the done state it reached
    dirty = False
    last_acquisition: tuple[str, list[tuple[int, int, int]], int] = ("", [], 0)
    for _ in range(data.draw(st.integers(1, 40), label="steps")):
        before = per_offset(sp)
        old_start, old_end = sp.start_offset, sp.end_offset
        now += data.draw(st.integers(0, 40), label="tick")
        op = data.draw(st.sampled_from(OPS), label="op")
        member = data.draw(st.sampled_from(MEMBERS), label="member")
        handed: list[tuple[int, int, int]] | None = None
        must_dirty = False
        quiet = op != "acquire_new"  # no state change the rules make durable
        if op == "acquire_available":
            mx = data.draw(st.integers(0, 8), label="max_records")
            lock = data.draw(st.integers(1, 60), label="lock")
            handed = ranges(sp.acquire_available(member, mx, now_ms=now, lock_ms=lock))
            assert handed == model.acquire_available(member, mx, now, lock)
            last_acquisition = (member, handed, now + lock)
            for first, last, _ in handed:
                assert all(before[o][0] == AVAILABLE for o in range(first, last + 1))
        elif op == "acquire_new":
            batches = draw_batches(data, model.end)
            mx = data.draw(st.integers(0, 12), label="max_records")
            lock = data.draw(st.integers(1, 60), label="lock")
            handed = ranges(sp.acquire_new(member, batches, mx, now_ms=now, lock_ms=lock))
            assert handed == model.acquire_new(member, batches, mx, now, lock)
            last_acquisition = (member, handed, now + lock)
            for first, _, _ in handed:
                assert first >= old_end
            must_dirty = model.archived_batch
            quiet = not model.archived_gap and not model.archived_batch
        elif op == "ack_undone":
            # Its write failed: Kafka's rollbackOrProcessStateUpdates puts every
            # record back as it was (state, holder, lock; delivery count as it was).
            batches_ack = draw_valid_ack(data, model.held(member))
            assert Transitions.acknowledge(sp, member, batches_ack) == ErrorCode.NONE
            sp.settle((0,), written=False)
            assert per_offset(sp) == before
            assert (sp.start_offset, sp.end_offset) == (old_start, old_end)
            must_dirty = bool(batches_ack)  # (stays to be written with the next write)
        elif op == "release_undone":
            # A closed session's release whose write failed: Kafka's
            # releaseAcquiredRecords goes through rollbackOrProcessStateUpdates too.
            must_dirty = Transitions.release_member(sp, member)
            sp.settle((0,), written=False)
            assert per_offset(sp) == before
            assert (sp.start_offset, sp.end_offset) == (old_start, old_end)
        elif op.startswith("ack"):
            if op == "ack_any":
                batches_ack = draw_any_ack(data, model.start, model.end)
            else:
                batches_ack = draw_valid_ack(data, model.held(member))
                if op == "ack_valid_then_bad":
                    bad_at = (batches_ack[-1][1] if batches_ack else model.start) + 1
                    batches_ack.append((bad_at, bad_at, [ACCEPT]))
            err = sp.acknowledge(member, batches_ack)
            assert err == model.acknowledge(member, batches_ack), batches_ack
            if op == "ack_valid":
                assert err == ErrorCode.NONE
            must_dirty = err == ErrorCode.NONE and model.changed
        elif op == "expire":
            must_dirty = sp.expire_locks(now)
            assert must_dirty == model.expire(now)
        elif op == "release_member":
            must_dirty = sp.release_member(member)
            assert must_dirty == model.release_member(member)
        elif op == "move_start":
            lso = model.start + data.draw(st.integers(-2, max(2, model.end - model.start + 3)))
            lso = max(0, lso)
            must_dirty = sp.move_start(lso)
            assert must_dirty == model.move_start(lso)
        elif op == "skip_to":
            offset = model.end + data.draw(st.integers(-1, 3), label="skip")
            must_dirty = offset > model.end
            sp.skip_to(offset)
            model.skip_to(offset)
        elif op == "restart":
            snap = sp.snapshot()
            sp = SharePartition.from_snapshot(
                json.loads(json.dumps(snap)), delivery_count_limit=limit, max_record_locks=locks
            )
            assert not sp.dirty
            model.restart()
            dirty = False
        elif op == "persisted":
            sp.dirty = False
            dirty = False
        elif op == "unacquire":  # the last acquisition's answer was refused (or a near miss)
            holder, handed_then, deadline = last_acquisition
            if data.draw(st.booleans(), label="near miss"):
                holder = member
                deadline += data.draw(st.sampled_from([0, 1]), label="deadline off")
            for first, last, count in handed_then:
                got = sp.unacquire(holder, first, last, count, deadline)
                assert got == model.unacquire(holder, first, last, count, deadline)

        compare(sp, model)

        # dirty: set by every state change the rules name, never by acquiring alone
        # or by calls that change nothing
        if must_dirty:
            assert sp.dirty
            dirty = True
        elif quiet and op not in ("restart", "persisted"):
            assert sp.dirty == dirty, op
        dirty = sp.dirty

        # invariants over the step
        after = per_offset(sp)
        assert sp.start_offset >= old_start
        assert sp.end_offset >= old_end
        for o, (state, count, _, _) in after.items():
            if o in before:
                was = before[o]
                if op == "unacquire" and was[0] == ACQUIRED and state == AVAILABLE:
                    assert count == was[1] - 1, (o, was, after[o])  # the only way down
                else:
                    assert count >= was[1], (o, was, after[o])
                if was[0] == ACQUIRED and state == ACQUIRED:
                    # never taken from its holder (nor re-acquired) while held
                    assert after[o] == was, (o, was, after[o])
            if o in finished:
                assert state == finished[o], (o, finished[o], after[o])
            if state in DONE:
                finished.setdefault(o, state)
            assert count <= limit, (o, after[o], limit)
        for first, last, count in handed or ():
            assert count <= limit, (handed, limit)
            for o in range(first, last + 1):
                assert o not in finished
                if o >= old_end:  # new: inside a deliverable batch of the log
                    assert op == "acquire_new"
                    assert any(b.deliverable and b.first <= o <= b.last for b in batches)
                else:  # in flight: only when AVAILABLE
                    assert before.get(o, (None,))[0] == AVAILABLE, (o, before.get(o))
                assert after[o][0] == ACQUIRED and after[o][2] == member


TRANSITION_OPS = [
    "acquire_new",
    "acquire_available",
    "acknowledge",
    "acknowledge",
    "release_member",
    "expire",
    "move_start",
    "begin_write",
    "settle",
    "settle",
]


@settings(
    max_examples=200,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_transitions_model(data: st.DataObject) -> None:
    """Transitions on their way across any operations (Kafka 4.4's InFlightState
    rollback state): never acquired, never passed by the start offset, left alone
    by lock expiry; a settled write keeps them, a failed one puts back exactly the
    offsets it carried (state, holder, lock; count unchanged) and nothing else."""
    sp = Transitions(0, delivery_count_limit=3, max_record_locks=30)
    now = 0
    # offset -> (the write carrying it, 0 for none yet; its state before)
    pending: dict[int, tuple[int, tuple[int, int, str | None, int]]] = {}
    issued: list[int] = []
    for _ in range(data.draw(st.integers(1, 30), label="steps")):
        before = per_offset(sp)
        now += data.draw(st.integers(0, 30), label="tick")
        op = data.draw(st.sampled_from(TRANSITION_OPS), label="op")
        member = data.draw(st.sampled_from(MEMBERS), label="member")
        settled: set[int] = set()
        if op == "acquire_new":
            size = data.draw(st.integers(1, 4), label="size")
            end = sp.end_offset
            sp.acquire_new(member, [BatchSpan(end, end + size - 1)], 10, now_ms=now, lock_ms=50)
        elif op == "acquire_available":
            got = sp.acquire_available(member, 10, now_ms=now, lock_ms=50)
            for r in got:
                assert all(o not in pending for o in range(r.first, r.last + 1)), (r, pending)
        elif op == "acknowledge":
            held = [o for o, v in sorted(before.items()) if v[0] == ACQUIRED and v[2] == member]
            batches = draw_valid_ack(data, held)
            assert sp.acknowledge(member, batches) == ErrorCode.NONE
            for first, last, _ in batches:
                pending.update((o, (0, before[o])) for o in range(first, last + 1))
        elif op == "release_member":
            sp.release_member(member)
            pending.update(
                (o, (0, v)) for o, v in before.items() if v[0] == ACQUIRED and v[2] == member
            )
        elif op == "expire":
            sp.expire_locks(now)
        elif op == "move_start":
            lso = sp.start_offset + data.draw(st.integers(0, 3), label="forward")
            sp.move_start(lso)
            pending = {o: p for o, p in pending.items() if o >= lso}
        elif op == "begin_write":
            ticket = len(issued) + 1
            issued.append(ticket)
            sp.begin_write(ticket)
            pending = {o: (ticket if t == 0 else t, v) for o, (t, v) in pending.items()}
        else:  # settle
            tickets = data.draw(st.sets(st.sampled_from([0, *issued])), label="tickets")
            written = data.draw(st.booleans(), label="written")
            sp.settle(tickets, written=written, now_ms=now)
            settled = {o for o, (t, _) in pending.items() if t in tickets}
        after = per_offset(sp)
        for o in settled:
            ticket, was = pending.pop(o)
            count = before[o][1]
            if not written and was[0] == ACQUIRED and was[3] <= now:  # (its lock ended)
                released = (AVAILABLE if count < 3 else ARCHIVED, count, None, 0)
                assert after.get(o, (ARCHIVED, count, None, 0)) == released, (o, after.get(o))
                assert o in after or released[0] == ARCHIVED  # (the start passed it)
            elif not written:
                assert after[o] == (was[0], count, was[2], was[3]), (o, was, after[o])
            elif o in after:
                assert after[o] == before[o]
        if op in ("settle", "begin_write"):
            # Only the offsets settled changed (and done ones the start passed).
            for o, v in before.items():
                if o not in settled:
                    assert after.get(o, v) == v or v[0] in DONE, (o, v, after.get(o))
        for o, (_ticket, _was) in pending.items():
            assert o >= sp.start_offset and o in after, (o, sp.start_offset)
            if op == "expire":
                assert after[o] == before[o]
        in_transition = {
            o for r in sp.runs() if r.undo is not None for o in range(r.first, r.last + 1)
        }
        assert in_transition == set(pending)
        assert sp.writing() == bool(pending)
