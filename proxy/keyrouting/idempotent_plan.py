"""Key routing's idempotent plan, I/O-free: the batches of one idempotent
producer placed by key, numbered with the proxy's own sequences, and the
client's answer made from what became of them.

Rules (key routing as a whole is in :mod:`.plan`'s doc):

* A request qualifies (:func:`idempotent_producer`) when every batch is a
  magic 2 batch of one producer id and epoch, transactional or not; the
  filter asks :func:`read_batches`, which reads the headers once for the
  plan too.
* :func:`prepare_idempotent` recognises the batches a client re-sends (its
  retry gets the same upstream batches again) and places the new ones as the
  plain plan does; what it cannot place (an unknown topic, targets without a
  known leader) is refused with an error per partition. Usually one C call
  per topic places them (:func:`~trafka.codec.batch_split.place_sections`,
  no Python object per piece, see :func:`_prepare_placed`); the batch-by-batch
  Python is the reference and takes what that declines (a batch the C pass
  refuses, a target without a known leader, a batch the journal placed
  before a restart, origin headers, DEBUG logging).
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
from operator import itemgetter
from typing import Any, NamedTuple, cast

from trafka.codec import batch_split
from trafka.codec.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce_msgs
from trafka.codec.produce_response import ProduceAnswer, ProduceResponseWriter
from trafka.codec.records import RecordBatchHeader, batches_of, set_base_sequence

from ..topics import Topics
from .answers import Endpoints, finish_answer
from .plan import (
    _CONTROL,
    HASHES,
    _by_target,
    _cap,
    _chunks,
    _encode,
    _part_body,
    _Split,
    _split,
    add_slots,
    count_placed,
    unknown_base_offset,
)
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
    new: Sequence[tuple[_Split | _Batch, int]]  # (placed batch, its record count)
    refused: dict[tuple[str, int], ErrorCode]
    targets: set[tuple[str, int]]
    stale: set[str]  # topics whose leaders the proxy must ask again
    chunks: list[_Chunk] = field(default_factory=list)
    # id(split) -> its upstream batches the journal says were written before a restart
    written: dict[int, list[Upstream]] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _Batch:
    """A client batch placed by the C pass (:func:`_prepare_placed`): what
    numbering reads of it (a :class:`_Split` without its pieces)."""

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
    splits: Sequence[_Split | _Batch]  # whose records it holds, the first first
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
    hash_name: str,
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
    if (
        not origin_headers
        and batch_split.placing(hash_name)
        and not log.isEnabledFor(logging.DEBUG)
    ):
        placed = _prepare_placed(
            body, batches, session, topics, hash_name, stats, max_size, recovered
        )
        if placed is not None:
            return placed
    hash_of = HASHES[hash_name]
    retried: list[ClientBatch] = []
    new: list[tuple[_Split, int]] = []
    written: dict[int, list[Upstream]] = {}
    refused: dict[tuple[str, int], ErrorCode] = {}
    targets: set[tuple[str, int]] = set()
    sizes = []
    stale: set[str] = set()
    for i, t in enumerate(body.topic_data):
        # Never unrouted: a batch of this producer written as the client numbered
        # it would clash with the proxy's numbers. Where the proxy cannot place
        # records, the client hears an error that makes it ask for metadata
        # (through the proxy, which learns with it) and retry.
        count = topics.partitions.get(t.name)
        for p, one in zip(t.partition_data, batches[i], strict=True):
            verdict = _session_verdict(session, topics, t.name, count, p.index, one)
            if isinstance(verdict, ClientBatch):
                stats.batches_retried += 1
                retried.append(verdict)
                continue
            if isinstance(verdict, ErrorCode):
                stats.batches_out_of_order += _refuse(refused, stale, t.name, p.index, verdict)
                continue
            header, raw = verdict
            assert count  # (the verdict checked it)
            data = bytes(raw)
            sizes.append(len(data))
            split = _split(
                header, data, t.name, p.index, count, hash_of, stats, max_size, origin_headers
            )
            if not all(topics.leader(t.name, x) >= 0 for x in split.pieces):
                refused[(t.name, p.index)] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                stale.add(t.name)
                continue
            placement = (
                None if recovered is None else recovered(t.name, p.index, header.base_sequence)
            )
            if placement is not None and placement.count == header.records_count:
                written[id(split)] = _already_written(split, placement, session, stats)
            new.append((split, header.records_count))
            targets.update((t.name, x) for x in split.pieces)
    stats.requests_idempotent += 1
    prepared = Prepared(session.producer_id, session.epoch, retried, new, refused, targets, stale)
    prepared.written = written
    prepared.chunks = _chunked([s for s, _ in new], _cap(sizes), session)
    return prepared


def _refuse(
    refused: dict[tuple[str, int], ErrorCode],
    stale: set[str],
    topic: str,
    index: int,
    code: ErrorCode,
) -> bool:
    """A client batch the session's verdict refused, noted for the answer (and
    its topic's metadata marked stale when the error asks for it): whether it
    was out of order (each path counts that in its own way)."""
    refused[(topic, index)] = code
    if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
        stale.add(topic)
    return code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# Per target partition, the pieces placed there: the client's own batches' first,
# then those moved in (batch_split.Piece: owner, estimated bytes, the batch's
# bytes when it stays whole, spans, header).
_Targets = dict[tuple[str, int], tuple[list[batch_split.Piece], list[batch_split.Piece]]]


def _prepare_placed(
    body: Any,
    batches: list[list[_One]],
    session: Session,
    topics: Topics,
    hash_name: str,
    stats: RouteStats,
    max_size: int,
    recovered: Callable[[str, int, int], Placement | None] | None,
) -> Prepared | None:
    """:func:`prepare_idempotent` with one C call per topic placing the new
    batches (:func:`~trafka.codec.batch_split.place_sections`), no Python
    object per piece: the same prepared request, byte for byte, and the same
    counts (tests/proxy/test_proxy_idempotent_placed.py). Python decides per
    client batch (a retry, out of order, refused) and per upstream batch (its
    pieces chunked and built). None: the reference decides (the C pass
    declines a batch, a target's leader is unknown, the journal placed a batch
    before a restart); nothing is counted then, nothing is changed."""
    retried: list[ClientBatch] = []
    new: list[tuple[_Split | _Batch, int]] = []
    refused: dict[tuple[str, int], ErrorCode] = {}
    stale: set[str] = set()
    targets: _Targets = {}
    placed: list[tuple[str, int, int]] = []  # per batch: topic, records moved, kept
    sizes = []
    out_of_order = 0
    for i, t in enumerate(body.topic_data):
        count = topics.partitions.get(t.name)
        # A moved record's target without a known leader refuses its batch:
        # the reference decides that, before anything is placed here (placed
        # here first, the request would be placed twice).
        known_leaders = bytes(topics.leader(t.name, x) >= 0 for x in range(count or 0))
        if 0 in known_leaders:
            return None
        sections: list[batch_split.Section] = []
        for p, one in zip(t.partition_data, batches[i], strict=True):
            verdict = _session_verdict(session, topics, t.name, count, p.index, one)
            if isinstance(verdict, ClientBatch):
                retried.append(verdict)
                continue
            if isinstance(verdict, ErrorCode):
                out_of_order += _refuse(refused, stale, t.name, p.index, verdict)
                continue
            header, raw = verdict
            assert count  # (the verdict checked it)
            if recovered is not None:
                placement = recovered(t.name, p.index, header.base_sequence)
                if placement is not None and placement.count == header.records_count:
                    return None  # what was written before a restart is taken out there
            if header.records_count < 1:
                return None
            data = bytes(raw)
            found = batch_split.lazy_section(
                data, header, own=p.index, partitions=count, max_size=max_size
            )
            if found is None:
                return None
            sizes.append(len(data))
            batch = _Batch(t.name, p.index, header)
            new.append((batch, header.records_count))
            section, log_append = found
            sections.append(
                (section, header.records_count, header.base_timestamp, log_append, p.index,
                 len(data), data, batch, header)
            )  # fmt: skip
        if not sections:
            continue
        assert count
        done = batch_split.place_sections(
            sections, partitions=count, hash_name=hash_name, known=known_leaders, max_size=max_size
        )
        if done is None:
            return None
        order, slots, per_batch = done
        add_slots(targets, t.name, order, slots)
        placed.extend((t.name, moved_n, kept_n) for moved_n, kept_n, _ in per_batch)
    chunks = _chunked_placed(targets, _cap(sizes), session)
    if chunks is None:
        return None
    stats.batches_retried += len(retried)
    stats.batches_out_of_order += out_of_order
    count_placed(stats, placed)
    stats.requests_idempotent += 1
    prepared = Prepared(
        session.producer_id, session.epoch, retried, new, refused, set(targets), stale
    )
    prepared.chunks = chunks
    return prepared


# A piece's (batch_split.Piece) owner, estimated bytes and spans.
_OWNER, _SIZE, _SPANS = itemgetter(0), itemgetter(1), itemgetter(3)


def _chunked_placed(targets: _Targets, cap: int, session: Session) -> list[_Chunk] | None:
    """:func:`_chunked` of :func:`_prepare_placed`'s pieces (None: the C pass
    declines to build one). The upstream batches that are not a client batch
    kept whole are built together, in one C call
    (:func:`~trafka.codec.batch_split.build_batches`)."""
    chunks: list[_Chunk] = []
    jobs: list[batch_split.Job] = []
    built_for: list[_Chunk] = []  # the chunks of the jobs, in order
    for (topic, target), (own, moved) in targets.items():
        pieces = own + moved
        # Each run's pieces and record count (counted only when the target's
        # records are cut in several batches: the next one's sequence follows).
        runs: list[tuple[list[batch_split.Piece], int]] = []
        if sum(map(_SIZE, pieces)) <= cap:
            runs.append((pieces, 0))  # the usual case, with no Python code per piece
        else:
            size = 0
            for piece in pieces:
                if not runs or size + piece[1] > cap:
                    runs.append(([], 0))
                    size = 0
                run, n = runs[-1]
                run.append(piece)
                runs[-1] = (run, n + len(piece[3][1]) // batch_split.SPAN_SIZE)
                size += piece[1]
        sequence = session.next_for(topic, target)
        for run, n in runs:
            first = run[0]
            holders = list(dict.fromkeys(map(_OWNER, run)))
            # Its first records lead it when they are a client batch kept whole.
            chunk = _Chunk(topic, target, b"", n, holders, first[2] is not None, sequence or 0)
            if len(run) == 1 and first[2] is not None:
                chunk.data, chunk.sequence = _at(first[2], first[4].base_sequence, sequence)
                chunk.count = first[4].records_count
            else:
                # Built below, at its sequence (unknown: 0, renumbered on commit).
                spans = list(map(_SPANS, run))
                jobs.append(
                    (spans, first[4].attributes, session.producer_id, session.epoch, chunk.sequence)
                )
                built_for.append(chunk)
            chunks.append(chunk)
            sequence = None if sequence is None else next_sequence(sequence, chunk.count)
    for chunk, made in zip(built_for, batch_split.build_batches(jobs), strict=True):
        if made is None:
            return None
        chunk.data, chunk.count = made
    return chunks


def _at(data: bytes, built: int, sequence: int | None) -> tuple[bytes, int]:
    """``data`` (a batch built at base sequence ``built``) at ``sequence``
    (None: as it is, renumbered on commit), and the base sequence it carries."""
    if sequence is None or sequence == built:
        return data, built
    return set_base_sequence(data, sequence), sequence


def _chunked(splits: list[_Split], cap: int, session: Session) -> list[_Chunk]:
    """The upstream batches of the placed ``splits``, per target partition, each
    at most about ``cap`` bytes, encoded at the sequence they will likely be
    numbered at (:class:`_Chunk`)."""
    owner = {id(piece): split for split in splits for piece in split.pieces.values()}
    chunks = []
    for (topic, target), (own, moved) in _by_target(splits).items():
        sequence = session.next_for(topic, target)
        for chunk in _chunks(own, [m for _, m in moved], cap):
            data, n = _encode(chunk, producer_id=session.producer_id, producer_epoch=session.epoch)
            whole = len(chunk) == 1 and chunk[0].raw is not None
            data, carried = _at(data, chunk[0].header.base_sequence if whole else 0, sequence)
            holders = list(dict.fromkeys(owner[id(piece)] for piece in chunk))
            first = owner[id(chunk[0])]
            leads = not first.moved and chunk[0] is first.pieces[first.partition]
            chunks.append(_Chunk(topic, target, data, n, holders, leads, carried))
            sequence = None if sequence is None else next_sequence(sequence, n)
    return chunks


def _already_written(
    split: _Split, placement: Placement, session: Session, stats: RouteStats
) -> list[Upstream]:
    """The pieces of a journaled batch whose upstream batches were written
    before a restart: taken out of ``split``, as acknowledged stand-ins."""
    targets = dict(placement.targets)
    if set(targets) != set(split.pieces):
        log.warning(
            "%r-%d: a retried batch (sequence %d) splits otherwise than the journal "
            "says: placed afresh (its records may be written twice)",
            split.topic,
            split.partition,
            split.header.base_sequence,
        )
        return []
    stats.batches_recovered += 1
    out = []
    for target, last in targets.items():
        if session.written_upstream(split.topic, target, last):
            split.partial = True
            n = len(split.pieces.pop(target).decoded())
            first = (last - (n - 1)) % 0x80000000  # wrapping as sequences do
            out.append(Upstream(split.topic, target, first, n, None, State.ACKED))
            stats.records_not_rewritten += n
    # Only batches in flight at a restart come here: a line each.
    log.info(
        "%r-%d: a batch (sequence %d) placed before a restart (or by another proxy): %d of "
        "its records had been written, the rest (%d) are written now",
        split.topic,
        split.partition,
        split.header.base_sequence,
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
