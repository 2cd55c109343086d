"""brokerlite's two clocks (:mod:`trafka.brokerlite.clock`): a step of the wall clock
moves no wait, and moves what Kafka decides on the wall clock.

The sans-IO broker is driven with :class:`Clocks`, the two readings a driver
takes at each wake-up, moved by hand: ``advance`` is time passing (both clocks),
``step_wall`` an NTP or operator step (the wall clock only), as
tests/faults/clockshift.c does to a whole process in test_clock_steps.py. No
test reads the machine's clock or sleeps.

What Kafka decides, and on which clock (the classes that decide it):

* waits are on a monotonic clock (``Time.hiResClockMs``, ``System.nanoTime``):
  a parked Fetch is a ``DelayedFetch`` in a ``DelayedOperationPurgatory`` whose
  ``SystemTimer`` reads ``hiResClockMs``; a classic group member's session is a
  timer of the group coordinator's ``CoordinatorTimer`` (the same kind of
  timer); a share-record acquisition lock is an ``AcquisitionLockTimerTask``
  (expiry ``hiResClockMs() + delay``); a SASL session's end is
  ``SaslServerAuthenticator``'s ``Time.nanoseconds()`` plus the session lifetime
  (KIP-368). A step either way neither ends them early nor stretches them;
* a transaction's timeout is on the wall clock: ``TransactionStateManager``'s
  periodic abort compares ``txnLastUpdateTimestamp + txnTimeoutMs`` with
  ``time.milliseconds()``, so a step forward past the timeout aborts the
  transaction and a step back delays the abort. brokerlite follows Kafka.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from brokerlite_wire import batch, create, fetch_body, markers, read, send
from test_consumer_groups import Member, World
from test_eos_core import add, end, init
from test_sasl_reauth import authenticate_once
from test_security import SASL, USERS, metadata_works

from trafka.brokerlite.clock import Now, mono_ms
from trafka.brokerlite.groups.consumer_groups import ConsumerGroups
from trafka.brokerlite.outcomes import Close, Parked
from trafka.brokerlite.shares.partition import ACQUIRED, AVAILABLE, BatchSpan, SharePartition
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k12_heartbeat as hb
from trafka.codec.messages import k14_sync_group as sg
from trafka.codec.messages import k15_describe_groups as dg

START_MS = 1_700_000_000_000
STEP_MS = 600_000  # ten minutes, as test_clock_steps.py
SESSION = 10_000


class Clocks:
    """The wall and the monotonic clock, as a driver reads them at one wake-up."""

    def __init__(self) -> None:
        self.wall = START_MS
        self.mono = 5_000  # any origin: the monotonic clock is no date

    def now(self) -> Now:
        return Now(self.wall, self.mono)

    def advance(self, ms: int) -> None:
        """Time passes: both clocks move."""
        self.wall += ms
        self.mono += ms

    def step_wall(self, ms: int) -> None:
        """The machine's clock is set: only the wall clock moves."""
        self.wall += ms


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


def at(core: Any, clocks: Clocks) -> Any:
    """``core`` with its next requests and polls at the clocks' time."""
    core.now = clocks.now()
    return core


def poll(core: Any, clocks: Clocks) -> list[Any]:
    return list(at(core, clocks).broker.poll(core.now))


def test_now_is_the_wall_clock_carrying_the_monotonic_one() -> None:
    now = Now(START_MS, 7)
    assert now == START_MS and mono_ms(now) == 7
    assert mono_ms(START_MS) == START_MS  # a plain int stands for both clocks
    assert type(now + 1) is int  # arithmetic is on the wall clock only


# -- a classic group member ------------------------------------------------------------------


def _member(core: Any, clocks: Clocks) -> tuple[str, int]:
    """One consumer joined and synced into group ``g`` (session ``SESSION``)."""
    join = jg.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=SESSION,
        member_id="",
        protocol_type="consumer",
        protocols=[jg.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    first = at(core, clocks).call(11, 7, join)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    outcome = core.send(11, 7, dataclasses.replace(join, member_id=first.member_id))
    if isinstance(outcome, Parked):
        [done] = poll(core, clocks)
        outcome = done.reply
    joined = core.decode(outcome)
    assert joined.error_code == ErrorCode.NONE, joined
    assignment = sg.SyncGroupRequest.SyncGroupRequestAssignment(
        member_id=joined.member_id, assignment=b"all"
    )
    sync = sg.SyncGroupRequest(
        group_id="g",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[assignment],
    )
    assert core.call(14, 5, sync).error_code == ErrorCode.NONE
    return joined.member_id, joined.generation_id


def _heartbeat(core: Any, clocks: Clocks, member: tuple[str, int]) -> ErrorCode:
    request = hb.HeartbeatRequest(group_id="g", generation_id=member[1], member_id=member[0])
    return ErrorCode(at(core, clocks).call(12, 4, request).error_code)


def _members(core: Any, clocks: Clocks) -> list[str]:
    request = dg.DescribeGroupsRequest(groups=["g"])
    [group] = at(core, clocks).call(15, 5, request).groups
    return [m.member_id for m in group.members]


@pytest.mark.parametrize("step", [STEP_MS, -STEP_MS])
def test_a_wall_clock_step_neither_ends_a_members_session_nor_stretches_it(
    open_core: Any, clocks: Clocks, step: int
) -> None:
    """Kafka's group coordinator times a classic member's session on its
    CoordinatorTimer (monotonic): a step of the wall clock changes nothing, the
    session ends ``session.timeout.ms`` after the last heartbeat."""
    core = open_core(now_ms=clocks.now())
    member = _member(core, clocks)
    clocks.advance(SESSION // 2)
    assert _heartbeat(core, clocks, member) == ErrorCode.NONE
    clocks.step_wall(step)
    clocks.advance(SESSION - 1)
    poll(core, clocks)
    assert _members(core, clocks) == [member[0]]  # (described: a heartbeat would renew it)
    clocks.advance(1)
    poll(core, clocks)
    assert _members(core, clocks) == []
    assert _heartbeat(core, clocks, member) == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("step", [STEP_MS, -STEP_MS])
def test_a_wall_clock_step_neither_ends_a_kip_848_members_session_nor_stretches_it(
    clocks: Clocks, step: int
) -> None:
    """A consumer group (KIP-848) member's session is a timer of the same
    CoordinatorTimer (GroupMetadataManager schedules its session timeout there)."""
    world = World(orders=2)
    groups = ConsumerGroups(world, session_timeout_ms=SESSION)
    member = Member(groups, world)
    world.now = clocks.now()
    assert member.join().error_code == ErrorCode.NONE
    clocks.step_wall(step)
    clocks.advance(SESSION - 1)
    groups.tick(clocks.now())
    assert member.member_id in groups.groups["g"].members
    clocks.advance(1)
    groups.tick(clocks.now())
    assert member.member_id not in groups.groups["g"].members


# -- a parked Fetch --------------------------------------------------------------------------


@pytest.mark.parametrize("step", [STEP_MS, -STEP_MS])
def test_a_wall_clock_step_neither_ends_a_parked_fetch_early_nor_late(
    open_core: Any, clocks: Clocks, step: int
) -> None:
    """A Fetch long poll waits ``max_wait_ms`` on the purgatory's monotonic timer
    (Kafka's DelayedFetch on SystemTimer): not answered at a step forward, and not
    ten minutes late after a step back."""
    core = open_core(now_ms=clocks.now())
    create(core, "t")
    parked = at(core, clocks).send(1, 12, fetch_body("t", max_wait_ms=500), conn_id=7)
    assert isinstance(parked, Parked)
    clocks.step_wall(step)
    clocks.advance(499)
    assert poll(core, clocks) == []
    assert core.broker.next_deadline() == clocks.mono + 1  # what the driver sleeps until
    clocks.advance(1)
    [done] = poll(core, clocks)
    assert done.conn_id == 7 and done.ticket == parked.ticket
    assert core.decode(done.reply).responses[0].partitions[0].error_code == ErrorCode.NONE


# -- a share-record acquisition lock ---------------------------------------------------------


@pytest.mark.parametrize("step", [STEP_MS, -STEP_MS])
def test_a_wall_clock_step_neither_releases_acquired_records_early_nor_late(
    clocks: Clocks, step: int
) -> None:
    """KIP-932's acquisition lock (``share.record.lock.duration.ms``) is an
    AcquisitionLockTimerTask on ``hiResClockMs``: the records stay ACQUIRED across a
    step and become AVAILABLE when the lock's duration has passed."""
    sp = SharePartition(0)
    got = sp.acquire_new("m", [BatchSpan(0, 4)], 10, now_ms=clocks.now(), lock_ms=30_000)
    assert [(r.first, r.last) for r in got] == [(0, 4)]
    clocks.step_wall(step)
    clocks.advance(29_999)
    assert not sp.expire_locks(clocks.now())
    assert sp.state_of(0) == (ACQUIRED, 1, "m")
    clocks.advance(1)
    assert sp.expire_locks(clocks.now())
    assert sp.state_of(0) == (AVAILABLE, 1, None)


# -- a SASL session ----------------------------------------------------------------------------

LIFETIME = 60_000


@pytest.mark.parametrize("step", [STEP_MS, -STEP_MS])
def test_a_wall_clock_step_neither_ends_a_sasl_session_early_nor_late(
    open_core: Any, clocks: Clocks, step: int
) -> None:
    """KIP-368: the session ends ``connections.max.reauth.ms`` after authentication,
    measured by SaslServerAuthenticator on ``Time.nanoseconds`` (monotonic); the
    first request after that closes the connection."""
    core = open_core(now_ms=clocks.now(), **SASL, connections_max_reauth_ms=LIFETIME)
    assert authenticate_once(at(core, clocks), "PLAIN", "alice", USERS["alice"]) == LIFETIME
    clocks.step_wall(step)
    clocks.advance(LIFETIME)
    metadata_works(at(core, clocks))  # at the expiry: still served
    clocks.advance(1)
    assert isinstance(at(core, clocks).send(3, 12, metadata.MetadataRequest(topics=[])), Close)
    assert core.broker.connections.sasl_sessions_expired == 1


# -- a transaction's timeout: the wall clock, as Kafka ------------------------------------------


def test_a_wall_clock_step_forward_past_a_transactions_timeout_aborts_it(
    open_core: Any, clocks: Clocks
) -> None:
    """Kafka's TransactionStateManager aborts a transaction whose
    ``txnLastUpdateTimestamp + transaction.timeout.ms`` is before
    ``time.milliseconds()``, the wall clock: a step forward past the timeout aborts
    it (its producer fenced), though only a moment passed."""
    core = open_core(now_ms=clocks.now())
    create(core, "t")
    pid, epoch = init(at(core, clocks), "tx", timeout_ms=60_000)
    add(core, "tx", pid, epoch, "t", 0)
    send(core, "t", batch(core, [b"v"], pid, epoch, 0, txn=True), tid="tx")
    clocks.step_wall(STEP_MS)
    clocks.advance(1)
    poll(core, clocks)
    view = read(at(core, clocks), "t", isolation=1)
    assert view.last_stable_offset == view.high_watermark == 2
    assert markers(view.records) == [(1, False)]  # the abort marker
    assert end(core, "tx", pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED


def test_time_passing_while_the_wall_clock_steps_back_leaves_a_transaction_open(
    open_core: Any, clocks: Clocks
) -> None:
    """The converse, on the same rule: ten minutes pass on the monotonic clock
    while the wall clock is stepped back as far, so by the wall clock the
    transaction is as old as it was; Kafka leaves it open, and so does brokerlite."""
    core = open_core(now_ms=clocks.now())
    create(core, "t")
    pid, epoch = init(at(core, clocks), "tx", timeout_ms=60_000)
    add(core, "tx", pid, epoch, "t", 0)
    send(core, "t", batch(core, [b"v"], pid, epoch, 0, txn=True), tid="tx")
    for _ in range(10):
        clocks.advance(STEP_MS // 10)
        clocks.step_wall(-STEP_MS // 10)
        poll(core, clocks)
    assert read(at(core, clocks), "t", isolation=1).last_stable_offset == 0
    assert end(core, "tx", pid, epoch, commit=True) == ErrorCode.NONE
