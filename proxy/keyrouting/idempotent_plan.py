"""Key routing's idempotent plan, I/O-free: the batches of one idempotent
producer placed by key, numbered with the proxy's own sequences, and the
client's answer made from what became of them.

Rules (key routing as a whole is in :mod:`.plan`'s doc):

* A request qualifies (:func:`idempotent_producer`) when every batch is a
  magic 2 batch of one producer id and epoch, transactional or not; the
  filter asks :func:`read_batches`, which reads the headers once for the
  plan too.
* :func:`prepare_idempotent` recognises the batches a client re-sends (its
  retry gets the same upstream batches again) and places the new ones as
  every plan does (:mod:`.placement`); what it cannot place (an unknown
  topic, targets without a known leader) is refused with an error per
  partition. Of a batch the journal placed before a restart, the pieces whose
  upstream batches were written are taken out.
* :func:`commit_idempotent` numbers the placed batches with the proxy's
  sequences (:mod:`.sequences`) under the producer's lock, in rounds of at
  most one batch per partition; batches the journal says were written before
  a restart are not written again.
* :func:`idempotent_answer_bytes` answers the client's partitions in its order
  from their upstream batches, written on bytes, with the first part's answer's
  throttle time, tagged fields and node endpoints; :func:`idempotent_answer`
  is the same on decoded messages (the reference).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from trafka.codec.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce_msgs
from trafka.codec.produce_response import ProduceAnswer, ProduceResponseWriter
from trafka.codec.records import RecordBatchHeader, batches_of

from ..topics import Topics
from .answers import Endpoints, finish_answer
from .placement import (
    _CONTROL,
    OWNER,
    Batch,
    Hashing,
    Piece,
    Placed,
    build,
    cap_of,
    chunked,
    piece_count,
    place_topic,
)
from .plan import _part_body, count_placed, unknown_base_offset
from .sequences import (
    ClientBatch,
    Placement,
    Session,
    State,
    Upstream,
    Walked,
    next_sequence,
)
from .stats import RouteStats

__all__ = [
    "IdempotentPlan",
    "Prepared",
    "commit_idempotent",
    "idempotent_answer",
    "idempotent_answer_bytes",
    "Headers",
    "idempotent_producer",
    "prepare_idempotent",
    "read_batches",
    "upstream_body",
]

log = logging.getLogger("trafka.proxy")


# A client's batch: its header and bytes.
_One = tuple[RecordBatchHeader, memoryview]


@dataclass(slots=True)
class Prepared:
    """An idempotent request, its batches recognised or placed, before numbering."""

    producer_id: int
    epoch: int
    retried: list[ClientBatch]
    new: Sequence[tuple[_Batch, int]]  # (placed batch, its record count)
    refused: dict[tuple[str, int], ErrorCode]
    targets: set[tuple[str, int]]
    stale: set[str]  # topics whose leaders the proxy must ask again
    chunks: list[_Chunk] = field(default_factory=list)
    # id(batch) -> its upstream batches the journal says were written before a restart
    written: dict[int, list[Upstream]] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _Batch:
    """A client batch placed (the owner of its pieces, :mod:`.placement`): what
    numbering reads of it."""

    topic: str
    partition: int
    header: Any


@dataclass(slots=True)
class _Chunk:
    """One upstream batch to be, encoded at the base sequence it will likely be
    numbered at (:meth:`.Session.next_for`; renumbered on commit otherwise)."""

    topic: str
    partition: int
    data: bytes
    count: int
    splits: Sequence[_Batch]  # whose records it holds, the first first
    leads: bool  # its first records are the first split's own (none moved)
    sequence: int  # the base sequence ``data`` carries


@dataclass(slots=True)
class IdempotentPlan:
    """What to write for an idempotent request, and how to answer it.

    ``rounds``: the upstream batches to write, round by round (a round has at
    most one batch per partition; the driver groups it by leader). ``waits``: batches written by an earlier request whose answers
    this one's depend on. ``answers``: per client partition (in its order),
    its :class:`ClientBatch` or the error the proxy answers itself.
    """

    producer_id: int
    rounds: list[list[Upstream]]
    waits: list[Upstream]
    answers: list[tuple[str, list[tuple[int, ClientBatch | ErrorCode]]]]


class Headers(NamedTuple):
    """A Produce request's batch headers, read once (:func:`read_batches`):
    what :func:`idempotent_producer` and :func:`prepare_idempotent` ask of them."""

    producer: tuple[int, int] | None  # :func:`idempotent_producer`'s answer
    # Per topic, per partition its one magic 2 batch (header, bytes); None
    # unless every partition holds exactly one (or ``producer`` is None).
    batches: list[list[_One]] | None


def read_batches(body: Any) -> Headers:
    """The request's batch headers read in one walk, for the filter to ask
    which producer sends it and the plan to place it (passed to
    :func:`prepare_idempotent` as ``headers``): ``producer`` is
    :func:`idempotent_producer`'s answer, raising what it raises; ``batches``
    is what :func:`prepare_idempotent` reads of the request when not given
    it, or None when ``producer`` is (the walk stops where
    :func:`idempotent_producer` does)."""
    found: tuple[int, int] | None = None
    out: list[list[_One]] | None = []
    for t in body.topic_data:
        one: list[_One] = []
        for p in t.partition_data:
            batches = batches_of(p.records)
            for header, _ in batches:
                if not isinstance(header, RecordBatchHeader):
                    return Headers(None, None)  # a legacy message set
                if header.producer_id < 0 or header.attributes & _CONTROL:
                    return Headers(None, None)
                if found is None:
                    found = (header.producer_id, header.producer_epoch)
                elif found[0] != header.producer_id or found[1] != header.producer_epoch:
                    return Headers(None, None)
            if out is not None:
                if len(batches) == 1:
                    one.append(cast("_One", batches[0]))
                else:
                    out = None
        if out is not None:
            out.append(one)
    return Headers(found, out if found is not None else None)


def idempotent_producer(body: Any) -> tuple[int, int] | None:
    """(producer id, epoch) when every batch of the request is a magic 2 batch of
    one idempotent producer; else None. (The reference of
    :func:`read_batches`, which reads the headers once for the plan too.)"""
    found: tuple[int, int] | None = None
    for t in body.topic_data:
        for p in t.partition_data:
            for header, _ in batches_of(p.records):
                if not isinstance(header, RecordBatchHeader):
                    return None  # a legacy message set
                if header.producer_id < 0 or header.attributes & _CONTROL:
                    return None
                if found is None:
                    found = (header.producer_id, header.producer_epoch)
                elif found != (header.producer_id, header.producer_epoch):
                    return None
    return found


def _session_verdict(
    session: Session, topics: Topics, topic: str, count: int | None, index: int, batch: _One
) -> ClientBatch | ErrorCode | _One:
    """What a client batch (``batch`` of partition ``index`` of ``topic``,
    ``count`` partitions known) is to the producer's session, for both placing
    paths: the batch it already placed (a retry), the error it is refused with
    (unknown topic, no leader, out of order), or ``batch``, to place."""
    if not count:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if topics.leader(topic, index) < 0:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    header = batch[0]
    known = session.known(topic, index, header.base_sequence)
    if known is not None and known.count == header.records_count:
        return known
    error = session.check_new(topic, index, header.base_sequence)
    return error if error else batch


def prepare_idempotent(
    body: Any,
    *,
    session: Session,
    topics: Topics,
    hash_name: Hashing,
    stats: RouteStats,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    recovered: Callable[[str, int, int], Placement | None] | None = None,
    origin_headers: bool = False,
    headers: Headers | None = None,
) -> Prepared | None:
    """Recognise an idempotent producer's retried batches and place its new ones.

    Changes nothing in ``session``; :func:`commit_idempotent` does, once the
    driver has learnt the sequences :meth:`Sequences.unsynced` names.

    ``recovered`` (topic, partition, base sequence) gives a batch's placement
    from the journal (:mod:`.journal`) when the session does not know it: the
    upstream batches of it that its targets' leaders (asked by the driver
    first) say were written are not written again. ``origin_headers``: as for
    :func:`plan_produce`. ``headers``: the request's batch headers as
    :func:`read_batches` read them (None: read here, by it).

    Returns:
        The prepared request, or None when it is not for this plan (a
        partition's records are not one magic 2 batch: the broker refuses it).
        A partition whose topic or leaders the proxy does not know is refused
        (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER), never forwarded
        as the client numbered it.

    Raises:
        DecodeError: a batch is malformed.
    """
    batches = (read_batches(body) if headers is None else headers).batches
    if batches is None:
        return None  # the broker judges it (INVALID_RECORD)
    retried: list[ClientBatch] = []
    refused: dict[tuple[str, int], ErrorCode] = {}
    stale: set[str] = set()
    placed = Placed()
    for i, t in enumerate(body.topic_data):
        # Never unrouted: a batch of this producer written as the client numbered
        # it would clash with the proxy's numbers. Where the proxy cannot place
        # records, the client hears an error that makes it ask for metadata
        # (through the proxy, which learns with it) and retry.
        count = topics.partitions.get(t.name)
        to_place: list[Batch] = []
        for p, one in zip(t.partition_data, batches[i], strict=True):
            verdict = _session_verdict(session, topics, t.name, count, p.index, one)
            if isinstance(verdict, ClientBatch):
                stats.batches_retried += 1
                retried.append(verdict)
            elif isinstance(verdict, ErrorCode):
                stats.batches_out_of_order += _refuse(refused, stale, t.name, p.index, verdict)
            else:
                header, raw = verdict
                batch = _Batch(t.name, p.index, header)
                to_place.append((batch, p.index, header, bytes(raw), True))
        if to_place:
            assert count  # (the verdicts checked it)
            known = bytes(topics.leaders.get((t.name, x), -1) >= 0 for x in range(count))
            place_topic(
                placed, t.name, count, to_place, hash_name=hash_name, can_take=known,
                max_size=max_size, origin_headers=origin_headers, hold_out=True,
            )  # fmt: skip
    count_placed(stats, placed.counted)
    for batch in placed.held:
        _refuse(refused, stale, batch.topic, batch.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    held = set(map(id, placed.held))
    new: list[tuple[_Batch, int]] = []
    written: dict[int, list[Upstream]] = {}
    sizes = []
    for batch, _, header, data, _ in placed.batches:
        sizes.append(len(data))
        if held and id(batch) in held:
            continue
        if recovered is not None:
            placement = recovered(batch.topic, batch.partition, header.base_sequence)
            if placement is not None and placement.count == header.records_count:
                written[id(batch)] = _already_written(batch, placed, placement, session, stats)
        new.append((batch, header.records_count))
    stats.requests_idempotent += 1
    # (A target all of whose pieces were written before a restart is none.)
    targets = (
        {k for k, (own, moved) in placed.targets.items() if own or moved}
        if written
        else set(placed.targets)
    )
    prepared = Prepared(session.producer_id, session.epoch, retried, new, refused, targets, stale)
    prepared.written = written
    prepared.chunks = _chunked(placed, cap_of(sizes), session)
    return prepared


def _refuse(
    refused: dict[tuple[str, int], ErrorCode],
    stale: set[str],
    topic: str,
    index: int,
    code: ErrorCode,
) -> bool:
    """A client batch refused, noted for the answer (and its topic's metadata
    marked stale when the error asks for it): whether it was out of order."""
    refused[(topic, index)] = code
    if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
        stale.add(topic)
    return code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def _chunked(placed: Placed, cap: int, session: Session) -> list[_Chunk]:
    """The upstream batches of the placed batches, per target partition, each at
    most about ``cap`` bytes, built at the sequence they will likely be numbered
    at (:meth:`.Session.next_for`; renumbered on commit otherwise), in one C
    call for those the C pass located (see :func:`.placement.build`)."""
    chunks: list[_Chunk] = []
    runs: list[list[Piece]] = []
    for (topic, target), (own, moved) in placed.targets.items():
        if not own and not moved:
            continue  # (its pieces were written before a restart)
        sequence = session.next_for(topic, target)
        cut = chunked(own, moved, cap)
        for run in cut:
            first = run[0]
            # Its first records lead it when they are a client batch kept whole.
            leads = first[2] is not None
            at = sequence
            if at is None:  # unknown yet: built as the client's, else at 0
                at = first[4].base_sequence if len(run) == 1 and leads else 0
            holders = list(dict.fromkeys(map(OWNER, run)))
            # The count is needed now only when the next batch's sequence follows.
            n = sum(map(piece_count, run)) if len(cut) > 1 else 0
            chunks.append(_Chunk(topic, target, b"", n, holders, leads, at))
            runs.append(run)
            sequence = None if sequence is None else next_sequence(sequence, n)
    made = build(
        runs,
        producer_id=session.producer_id,
        producer_epoch=session.epoch,
        sequences=[c.sequence for c in chunks],
        located=placed.located,
    )
    for chunk, (data, n) in zip(chunks, made, strict=True):
        chunk.data, chunk.count = data, n
    return chunks


def _already_written(
    batch: _Batch, placed: Placed, placement: Placement, session: Session, stats: RouteStats
) -> list[Upstream]:
    """The pieces of a journaled batch whose upstream batches were written
    before a restart: taken out of ``placed``, as acknowledged stand-ins."""
    targets = dict(placement.targets)
    if set(targets) != {target for _, target in placed.owned(batch)}:
        log.warning(
            "%r-%d: a retried batch (sequence %d) splits otherwise than the journal "
            "says: placed afresh (its records may be written twice)",
            batch.topic,
            batch.partition,
            batch.header.base_sequence,
        )
        return []
    stats.batches_recovered += 1
    out = []
    for target, last in targets.items():
        if session.written_upstream(batch.topic, target, last):
            n = piece_count(placed.take_out(batch, (batch.topic, target)))
            first = (last - (n - 1)) % 0x80000000  # wrapping as sequences do
            out.append(Upstream(batch.topic, target, first, n, None, State.ACKED))
            stats.records_not_rewritten += n
    # Only batches in flight at a restart come here: a line each.
    log.info(
        "%r-%d: a batch (sequence %d) placed before a restart (or by another proxy): %d of "
        "its records had been written, the rest (%d) are written now",
        batch.topic,
        batch.partition,
        batch.header.base_sequence,
        sum(u.count for u in out),
        placement.count - sum(u.count for u in out),
    )
    return out


def commit_idempotent(body: Any, prepared: Prepared, session: Session) -> IdempotentPlan:
    """Number the prepared upstream batches and list what to write, in order.

    Every target partition's next sequence must be known (see
    :meth:`Sequences.unsynced`). Cheap: the records were placed and encoded by
    :func:`prepare_idempotent`, at the sequences they are numbered at unless
    those changed since (then numbering rewrites a sequence and a checksum).
    """
    upstream_of: dict[int, list[Upstream]] = {}  # id(split) -> its upstream batches
    leading: dict[int, Upstream] = {}  # id(split) -> the batch its records lead
    fresh: list[Upstream] = []
    # Usually every upstream batch holds records of every client batch (keyed
    # batches spread over all partitions): then they share one tuple of them,
    # linked, journaled and answered once per request x target partition.
    every = not prepared.written and all(
        len(c.splits) == len(prepared.new) for c in prepared.chunks
    )
    if not every:  # (a list each made once, not one per link)
        upstream_of = {id(split): [] for split, _ in prepared.new}
    for chunk in prepared.chunks:
        u = session.number(chunk.topic, chunk.partition, chunk.count, chunk.data, chunk.sequence)
        fresh.append(u)
        if not every:
            for split in chunk.splits:
                upstream_of[id(split)].append(u)
        if chunk.leads:
            leading[id(chunk.splits[0])] = u
    shared = tuple(fresh)
    placed: dict[tuple[str, int], ClientBatch] = {}
    for split, count in prepared.new:
        batch = ClientBatch(
            split.topic,
            split.partition,
            split.header.base_sequence,
            count,
            shared
            if every
            else tuple(prepared.written.get(id(split), []) + upstream_of.get(id(split), [])),
            leading.get(id(split)),
        )
        session.remember(batch)  # (after the partition's last batch)
        placed[(split.topic, split.partition)] = batch
    # What to write: every failed earlier batch of a target first, then the new.
    writes: list[Upstream] = []
    waits: list[Upstream] = []
    for batch in prepared.retried:
        batch.told = None  # the client's retry: answered afresh
        for u in batch.upstream:
            if u.state in (State.SENT, State.PLANNED):
                # (PLANNED: an earlier request's, waiting for its journal
                # write; written before this one, see :mod:`.journal_pipeline`.)
                waits.append(u)
            elif u.state is State.FAILED:
                writes.extend(session.resend_before(u))
    for u in fresh:
        writes.extend(session.resend_before(u))
        writes.append(u)
    rounds: list[list[Upstream]] = []
    depth: dict[tuple[str, int], int] = {}
    for u in dict.fromkeys(writes):
        key = (u.topic, u.partition)
        rnd = depth[key] = depth.get(key, -1) + 1
        if len(rounds) <= rnd:
            rounds.append([])
        rounds[rnd].append(u)
    retried = {(b.topic, b.partition): b for b in prepared.retried}
    answers: list[tuple[str, list[tuple[int, ClientBatch | ErrorCode]]]] = []
    for t in body.topic_data:
        entries: list[tuple[int, ClientBatch | ErrorCode]] = []
        for p in t.partition_data:
            key = (t.name, p.index)
            entry = prepared.refused.get(key) or retried.get(key) or placed[key]
            entries.append((p.index, entry))
        answers.append((t.name, entries))
    return IdempotentPlan(session.producer_id, rounds, waits, answers)


def upstream_body(body: Any, batches: Sequence[Upstream]) -> Any:
    """The Produce request writing ``batches`` (one per partition), with the
    client's acks, timeout and transactional id."""
    topics: dict[str, dict[int, bytes]] = {}
    for u in batches:
        assert u.data is not None
        topics.setdefault(u.topic, {})[u.partition] = u.data
    return _part_body(body, topics)


def idempotent_answer(
    plan: IdempotentPlan, template: Any, client_software: str | None = None
) -> Any:
    """The client's answer once every batch it depends on is settled
    (``client_software``: see :func:`unknown_base_offset`), as a decoded
    message: the reference of :func:`idempotent_answer_bytes`."""
    resp = produce_msgs.ProduceResponse
    responses = []
    walked: Walked = {}
    for name, entries in plan.answers:
        merged = []
        for index, entry in entries:
            error, message, base, append_time, start = _outcome(entry, client_software, walked)
            merged.append(
                resp.PartitionProduceResponse(
                    index=index,
                    error_code=error,
                    error_message=message,
                    base_offset=base,
                    log_append_time_ms=append_time,
                    log_start_offset=start,
                )
            )
        responses.append(resp.TopicProduceResponse(name=name, partition_responses=merged))
    return dataclasses.replace(template, responses=responses)


def idempotent_answer_bytes(
    plan: IdempotentPlan,
    template: ProduceAnswer | None,
    version: int,
    client_software: str | None = None,
    endpoints: Endpoints | None = None,
) -> bytes:
    """The client's answer once every batch it depends on is settled: its
    ProduceResponse body at ``version``, its top-level fields those of
    ``template`` (a part's answer; None: none), its node endpoints rewritten by
    ``endpoints``."""
    w = ProduceResponseWriter(version, len(plan.answers))
    walked: Walked = {}
    for name, entries in plan.answers:
        w.topic(name, len(entries))
        for index, entry in entries:
            error, message, base, append_time, start = _outcome(entry, client_software, walked)
            w.add(index, error, base, append_time, start, message)
    if template is None:
        return w.finish(0)
    return finish_answer(w, [template], template.node_endpoints, endpoints)


def _outcome(
    entry: ClientBatch | ErrorCode, client_software: str | None, walked: Walked
) -> tuple[int, str | None, int, int, int]:
    """What the client hears for a partition: (error, message, base offset,
    log append time, log start offset); ``walked``: what each tuple of
    upstream batches came to (:meth:`.ClientBatch.own_outcome`), one answer's."""
    if isinstance(entry, ErrorCode):
        return entry, entry.message, -1, -1, -1
    error, message, base, append_time, start = entry.outcome(walked) or (
        ErrorCode.REQUEST_TIMED_OUT,
        "no answer in time",
        -1,
        -1,
        -1,
    )
    entry.told = error
    if error == ErrorCode.NONE and base < 0:
        base = unknown_base_offset(entry.count, client_software)
    return error, message, base, append_time, start
