"""Client calls with one deadline each, retrying what passes (Kafka's AdminClient model).

Used by the admin client and by the consumer's offset lookups.

Rules:

* A call is ``attempt(deadline)`` run until it returns or raises a final error,
  within ``timeout_ms`` (default: the client's ``default.api.timeout.ms``).
* Another attempt follows, after ``retry.backoff.ms`` doubling up to
  ``retry.backoff.max.ms``, when the attempt raises :class:`Again` (it judged
  an answer transient, and may ask for a metadata refresh first), or a
  connection failure or request timeout.
* The deadline bounds every wait of an attempt (connecting included), not only
  its requests. When it passes the call raises
  :class:`~trafka.sdk.errors.ApiTimeoutError` from the last error retried.
* A nested call's ApiTimeoutError is final: the outer call's deadline is never
  earlier than the inner one's.
* An answer of NOT_CONTROLLER says the metadata names a broker that no longer
  is the controller: metadata is refreshed before the next attempt, whichever
  call it answered (Java's AdminClient forgets the controller and asks for
  metadata again). Without it a client kept the old controller for the whole
  call: a Kafka 3.9 controller that stopped, with its node still named by the
  first metadata answer, was tried, the fallback broker answered
  NOT_CONTROLLER, and so on until the deadline.
* Leader-routed calls (:meth:`Calls.per_leader`) keep the partitions already
  answered and ask again only for those a leader refused with a retriable code;
  a topic the brokers do not have, or a partition it does not have, is an
  answer at once. Every attempt asks every leader it can: a partition without
  a leader, or a leader out of reach, holds back only its own partitions.
* A partial call (``partial=True``) answers what it can: at the deadline, each
  partition still open gets the error that kept it open as its result instead
  of the call failing; and a partition that metadata refreshed during the call
  still shows offline (no leader, its replicas offline: a Metadata answer's
  LEADER_NOT_AVAILABLE is data) gets LEADER_NOT_AVAILABLE at once, since no
  retry within a call's bound brings its brokers back.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

import anyio

from trafka.codec import ErrorCode, KafkaError, TrafkaError

from ._validate import check_timeout
from .consumer_types import TopicPartition
from .errors import ApiTimeoutError, KafkaConnectionError, RequestTimeoutError
from .transport import BrokerConnection, Cluster, backoff_delay

__all__ = ["RETRIABLE", "TRANSIENT", "Again", "Calls", "again_if_transient", "check"]

_T = TypeVar("_T")

#: Codes Kafka classes as retriable: a state that passes (a coordinator
#: loading, a leader moving, a request timing out at the broker).
RETRIABLE = frozenset(code for code in ErrorCode if code.retriable)
#: The retriable codes that are states, not answers: a topic that does not
#: exist (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID) is not waited out
#: where the broker asked owns the topic's metadata.
TRANSIENT = RETRIABLE - {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID}


#: How many times a topic or partition missing from the metadata is looked up
#: again before it is said not to exist (see :meth:`Calls.by_leader`).
_LOOKUPS = 4


def _stale_controller(cause: BaseException) -> bool:
    """Whether ``cause`` is a broker saying it is not the controller."""
    return isinstance(cause, KafkaError) and cause.code == ErrorCode.NOT_CONTROLLER


class Again(Exception):
    """Raised by an attempt: the call should be tried again (after a backoff,
    within its deadline), refreshing metadata first when ``refresh`` (for
    ``topics``, or the tracked ones), as always for NOT_CONTROLLER."""

    def __init__(
        self, cause: BaseException, topics: Iterable[str] | None = None, *, refresh: bool = False
    ) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.topics = sorted(set(topics)) if topics is not None else None
        # A broker that is not the controller: the metadata names an old one.
        self.refresh = refresh or topics is not None or _stale_controller(cause)


def check(
    code: int,
    what: str,
    message: str | None = None,
    *,
    again: frozenset[ErrorCode] = frozenset(),
    topics: Iterable[str] | None = None,
    refresh: bool = False,
) -> None:
    """Nothing for code 0; else :class:`Again` for a code in ``again``, else the error."""
    if code:
        error = KafkaError(code, f"{what}: {message}" if message else what)
        if code in again:
            raise Again(error, topics, refresh=refresh)
        raise error


@contextlib.contextmanager
def again_if_transient() -> Iterator[None]:
    """A :class:`KafkaError` with a :data:`TRANSIENT` code raised inside becomes :class:`Again`."""
    try:
        yield
    except KafkaError as exc:
        if exc.code in TRANSIENT:
            raise Again(exc) from None
        raise


class Calls:
    """Runs calls over one client's :class:`~trafka.sdk.transport.Cluster`.

    Args:
        cluster: the client's connections and metadata.
        backoff_ms, backoff_max_ms: the retry backoff and its cap.
        default_timeout_ms: a call's bound when it passes none.
    """

    def __init__(
        self, cluster: Cluster, backoff_ms: int, backoff_max_ms: int, default_timeout_ms: int
    ) -> None:
        self.cluster = cluster
        self._backoff = backoff_ms / 1000
        self._backoff_max = backoff_max_ms / 1000
        self.default_timeout_ms = default_timeout_ms
        self._rng = random.Random()

    async def run(
        self, what: str, timeout_ms: int | None, attempt: Callable[[float], Awaitable[_T]]
    ) -> _T:
        """``attempt(deadline)`` until it returns or raises a final error (see the rules).

        Raises:
            TypeError, ValueError: ``timeout_ms`` is not None or a number >= 0.
        """
        check_timeout("timeout_ms", timeout_ms)
        ms = self.default_timeout_ms if timeout_ms is None else timeout_ms
        deadline = anyio.current_time() + ms / 1000
        attempts = 0
        last: BaseException | None = None
        cut = False  # the deadline cut the last attempt short (it was waiting)
        while attempts == 0 or anyio.current_time() < deadline:
            attempts += 1
            with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                try:
                    return await attempt(deadline)
                except ApiTimeoutError:
                    raise  # a nested call's deadline: ours has passed too
                except Again as again:
                    last = again.cause
                    if again.refresh:
                        with contextlib.suppress(TrafkaError):
                            await self.cluster.refresh_metadata(again.topics)
                except (KafkaConnectionError, RequestTimeoutError) as exc:
                    last = exc
                await anyio.sleep(
                    backoff_delay(self._backoff, self._backoff_max, attempts, self._rng)
                )
            cut = scope.cancelled_caught
        if last is not None:
            detail = f"; last error: {last}"
        elif cut:
            # A broker that accepts and never answers, say: nothing failed, nothing came.
            detail = "; the last attempt was still waiting for an answer (or a connection)"
        else:
            detail = ""
        raise ApiTimeoutError(
            f"{what}: no result within {ms} ms ({attempts} attempt(s)){detail}"
        ) from last

    async def by_leader(
        self, tps: Iterable[TopicPartition], deadline: float
    ) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
        """``tps`` grouped by their leaders' node ids, and those without a known leader.

        A topic or partition the metadata does not have is looked up again a few
        times first (:data:`_LOOKUPS`, with the retry backoff, within the
        deadline: about 1.5 s with the default backoff): a broker may answer
        Metadata from a view older than a CreateTopics or CreatePartitions
        another broker has taken. (Kafka's admin client asks again until the
        call's deadline for a partition, its PartitionLeaderStrategy, and fails
        a topic at once; here both fail within those lookups.)

        Raises:
            KafkaError: a topic the brokers do not have, or a partition it does not have.
        """
        md = self.cluster.metadata
        tps = list(tps)
        topics = {tp.topic for tp in tps}
        for lookups in range(_LOOKUPS + 1):
            # a topic no answer had yet, or one with fewer partitions than asked
            missing = sorted(
                {tp.topic for tp in tps if tp.partition >= (md.partition_count(tp.topic) or 0)}
            )
            if not missing or anyio.current_time() >= deadline:
                break
            if lookups:
                await anyio.sleep(backoff_delay(self._backoff, self._backoff_max, lookups))
            await self.cluster.refresh_metadata(missing)
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for topic in sorted(topics):
            if md.partition_count(topic) is None and md.topic_errors.get(topic) == unknown:
                md.forget_topic(topic)
                raise KafkaError(unknown, f"topic {topic!r} does not exist")
        for topic in sorted(topics):
            await self.cluster.partitions_for(topic, max(0.0, deadline - anyio.current_time()) + 1)
        out: dict[int, list[TopicPartition]] = {}
        leaderless: list[TopicPartition] = []
        for tp in tps:
            count = md.partition_count(tp.topic)
            if count is not None and not 0 <= tp.partition < count:
                raise KafkaError(
                    unknown, f"topic {tp.topic!r} has no partition {tp.partition} (it has {count})"
                )
            leader = md.leader_for(tp.topic, tp.partition)
            if leader is None:
                leaderless.append(tp)
            else:
                out.setdefault(leader, []).append(tp)
        return out, leaderless

    def _offline(self, tp: TopicPartition) -> str:
        """The offline replicas of ``tp`` ("2,3") when metadata shows it offline
        (no leader, replicas offline), else ""."""
        info = self.cluster.metadata.topics.get(tp.topic)
        if info is None or tp.partition >= len(info.partitions):
            return ""
        p = info.partitions[tp.partition]
        if p.leader >= 0 or not p.offline_replicas:
            return ""
        return ",".join(map(str, p.offline_replicas))

    async def per_leader(
        self,
        what: str,
        tps: Iterable[TopicPartition],
        ask: Callable[
            [BrokerConnection, list[TopicPartition]], Awaitable[dict[TopicPartition, Any]]
        ],
        timeout_ms: int | None,
        *,
        partial: bool = False,
    ) -> dict[TopicPartition, Any]:
        """Results of a per-partition operation sent to each partition's leader.

        ``ask(conn, tps)`` returns each partition's result, or a
        :class:`KafkaError` for a partition the leader refused: a retriable one
        (a leader that moved, a topic the leader does not know yet) is asked
        again, after a metadata refresh, within the deadline; another is raised.
        Partitions done stay done across attempts. With ``partial``, see the
        module's rules: the partitions that could not be answered have the
        :class:`~trafka.codec.TrafkaError` that kept them open as their result.
        """
        pending = list(dict.fromkeys(tps))
        done: dict[TopicPartition, Any] = {}
        why: dict[TopicPartition, TrafkaError] = {}  # what keeps each open partition open
        attempts = 0

        async def attempt(deadline: float) -> dict[TopicPartition, Any]:
            nonlocal attempts
            attempts += 1
            retry: TrafkaError | None = None
            groups, leaderless = await self.by_leader(pending, deadline)
            for tp in leaderless:
                offline = self._offline(tp)
                error = KafkaError(
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    f"{tp.topic}-{tp.partition} has no leader"
                    + (f" (offline: replicas {offline} down)" if offline else ""),
                )
                why[tp] = error
                if partial and attempts > 1 and offline:
                    done[tp] = error  # offline in metadata refreshed for this call
                else:
                    retry = retry or error
            for leader, group in groups.items():
                try:
                    conn = await self.cluster.connection(leader)
                    answers = await ask(conn, group)
                except (KafkaConnectionError, RequestTimeoutError) as exc:
                    # This leader's partitions wait; the other leaders are asked.
                    for tp in group:
                        why[tp] = exc
                    retry = retry or exc
                    continue
                for tp, result in answers.items():
                    if tp not in group or tp in done:
                        continue
                    if isinstance(result, KafkaError):
                        if result.code in RETRIABLE:
                            why[tp] = result
                            retry = retry or result
                            continue
                        raise result
                    done[tp] = result
            pending[:] = [tp for tp in pending if tp not in done]
            if retry is not None:
                raise Again(retry, {tp.topic for tp in pending})
            if pending:
                names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in pending)
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: no answer for {names}")
            return done

        if not partial:
            return await self.run(what, timeout_ms, attempt)
        try:
            return await self.run(what, timeout_ms, attempt)
        except ApiTimeoutError as exc:
            return {**done, **{tp: why.get(tp, exc) for tp in pending}}
