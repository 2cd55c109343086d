"""Waiting at the brokers for a stream's next record, instead of asking again and again.

Spark's ``trigger(processingTime="0 seconds")`` asks the source for its latest
offsets in a loop, 10 ms apart (``spark.sql.streaming.pollingDelay``) while
nothing is new: without a wait, an idle stream sends a ListOffsets to every
leader about a hundred times a second, and that work takes cores from the
micro-batches. :func:`wait_for_records` instead holds a Fetch at each leader,
from the offsets the stream has read to, for up to ``latestOffsetWaitMs``: a
broker answers it as soon as a record arrives (``fetch.min.bytes`` 1), so the
trigger that follows finds the record within a round trip of its arrival, and
an idle stream asks a few times a second.

Rules:

* The fetches go over a client of their own (:class:`Watcher`): a broker
  answers a connection's requests in order, so a Fetch held on the planner's
  connection would hold back its next ListOffsets.
* Each fetch asks for at most one byte per partition (a broker still sends one
  record batch, KIP-74): what it carries is not used, only that it came.
* The wait ends at the first answer from any leader (a record, or an error:
  the lookup that follows meets the error and refreshes), or after the wait;
  a partition whose leader is unknown after one metadata refresh ends it at
  once. Nothing is waited for that the planner would not ask about next.
* The offsets that count are still the ListOffsets answers: the wait decides
  only when to ask. When every leader waited its time out and answered that
  its partitions end where the stream is, the trigger returns without asking
  again (Spark asks at its next trigger); any other end of the wait asks.
* Under ``read_committed`` a partition's high watermark may pass the stream's
  offsets before its last stable offset does: that ends the wait early, and
  the ListOffsets that follows decides.

No pyspark here.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import anyio

from trafka.codec import ApiKey

from ..sdk.errors import TrafkaError
from ..sdk.fetch_requests import build_full_fetch, request_fields
from ..sdk.fetcher import TopicPartition

if TYPE_CHECKING:
    from ..sdk.consumer import Consumer

__all__ = ["wait_for_records"]

_FETCH = ApiKey.FETCH
# The newest Fetch that names topics (v13 and later name them by id).
_BY_NAME = 12


async def wait_for_records(
    watcher: Consumer, at: dict[TopicPartition, int], wait_ms: int, read_committed: bool
) -> bool:
    """Wait up to ``wait_ms`` for a record at or after ``at`` in any of its
    partitions (see the module doc). Whether the offsets are worth asking for
    now: False only when every leader answered, within the wait, that its
    partitions end where ``at`` says."""
    if not at or wait_ms <= 0:
        return True
    cluster = watcher.cluster
    leaders = _leaders(watcher, at)
    if leaders is None:
        with contextlib.suppress(TrafkaError):
            await cluster.refresh_metadata({tp.topic for tp in at})
        leaders = _leaders(watcher, at)
        if leaders is None:
            return True  # a partition without a known leader: the lookup says why
    quiet: set[int] = set()

    async def hold(node: int, offsets: dict[TopicPartition, int], scope: Any) -> None:
        try:
            conn = await cluster.connection(node)
            version = min(conn.version_for(_FETCH), _BY_NAME)
            fields = request_fields(
                version,
                max_wait_ms=wait_ms,
                min_bytes=1,
                max_bytes=1,
                read_committed=read_committed,
            )
            body = build_full_fetch(offsets, version, cluster.metadata, 1, fields, {})
            timeout = watcher.config.request_timeout_ms / 1000 + wait_ms / 1000
            answer = await conn.request(_FETCH, body, version=version, timeout=timeout)
        except TrafkaError:
            answer = None
        if answer is not None and not _news(answer, offsets):
            quiet.add(node)  # the broker waited it out: nothing came
            return
        if answer is None or _failed(answer):
            cluster.metadata.request_update()  # a leader moved, a topic went...
            cluster.nudge()
        scope.cancel()

    # The brokers' empty answers end it at the wait; the margin covers a
    # connection to open (the first wait) and a slow answer, and bounds a
    # broker that keeps none of its promises.
    with anyio.move_on_after(wait_ms / 1000 + 1.0):
        async with anyio.create_task_group() as tg:
            for node, offsets in leaders.items():
                tg.start_soon(hold, node, offsets, tg.cancel_scope)
    return quiet != set(leaders)


def _failed(answer: Any) -> bool:
    """Whether a Fetch answer carries an error (its own or a partition's)."""
    if getattr(answer, "error_code", 0):
        return True
    return any(p.error_code for t in answer.responses for p in t.partitions)


def _news(answer: Any, offsets: dict[TopicPartition, int]) -> bool:
    """Whether a Fetch answer says more than that nothing came: an error, or a
    partition whose end (its high watermark) is past the offset asked for."""
    if _failed(answer):
        return True
    asked = {(tp.topic, tp.partition): o for tp, o in offsets.items()}
    return any(
        p.high_watermark > asked.get((t.topic, p.partition_index), p.high_watermark)
        for t in answer.responses
        for p in t.partitions
    )


def _leaders(
    watcher: Consumer, at: dict[TopicPartition, int]
) -> dict[int, dict[TopicPartition, int]] | None:
    """``at`` by leader, or None when a partition's leader is unknown."""
    metadata = watcher.cluster.metadata
    out: dict[int, dict[TopicPartition, int]] = {}
    for tp, offset in at.items():
        leader = metadata.leader_for(tp.topic, tp.partition)
        if leader is None:
            return None
        out.setdefault(leader, {})[tp] = offset
    return out
