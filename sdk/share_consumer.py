"""The share consumer (KIP-932 share groups, "queues"): the user's calls around
the I/O-free :mod:`.share_membership` and :mod:`.share_fetcher`, which their
drivers run: :class:`~trafka.sdk.share_group.ShareGroupDriver` (the group
task) and :class:`~trafka.sdk.share_fetching.ShareFetchDriver` (ShareFetch and
ShareAcknowledge on the connections).

Rules:

* ``async with ShareConsumer(...)`` (or :func:`open_share_consumer`) owns its
  tasks: the membership task (FindCoordinator, ShareGroupHeartbeat), the
  network task (timers and wake-ups of the share fetcher) and the metadata
  refresher. Leaving the block closes the consumer (below) and cancels them;
  errors leave as themselves, never as an ExceptionGroup.
* ShareFetch and ShareAcknowledge requests (at most one per broker) are sent
  as :mod:`.share_fetching` says; a poll that wants records sends the
  ShareFetch itself.
* Every protocol decision is the state machines'; this module only hands the
  application's calls to them, deserializes records and wakes waiting callers.
* Acknowledgement modes, as Kafka's KafkaShareConsumer: ``implicit`` (the
  default) accepts the records of a poll when the next poll, commit or close
  starts; ``explicit`` wants every record acknowledged
  (:meth:`ShareConsumer.acknowledge`), and a poll that finds records of the
  previous one unacknowledged raises :class:`~trafka.sdk.errors.UsageError`
  (the acknowledged ones are sent all the same).
* The acknowledgement commit callback runs, as in Kafka's client, inside
  ``poll``, ``commit``, ``commit_async`` and ``close``: once per partition
  answered, with the offsets and None or the error. An exception it raises
  comes out of that call (of ``close``: it is logged).
* A record that cannot be deserialized is released (it may be delivered
  again) and its error raised by the poll that reached it; records before it
  in the same poll are returned first, the error comes at the next poll.
* Closing (the end of a ``async with`` block, or :meth:`ShareConsumer.close`):
  with implicit acknowledgement the records of the last poll are accepted
  (the records an ``async for`` had not reached yet are released), with
  explicit acknowledgement unacknowledged records are released; then every
  share session is closed with a last ShareAcknowledge at epoch -1 carrying
  the acknowledgements still pending, and the member leaves the group
  (ShareGroupHeartbeat at epoch -1), each within ``request.timeout.ms``. A
  block left by an exception releases the records of the last poll instead
  of accepting them.
* Client metrics (KIP-714, :mod:`.telemetry`), as Java's KafkaShareConsumer:
  with ``enable.metrics.push`` the push runs in a task of its own from the
  opening, with Java's resource attributes (``group_id``, ``group_member_id``
  from the start since the member id is the client's own, ``client_rack``) and
  the metrics of :func:`~.telemetry.share_consumer_samples`. A graceful close
  sends the terminating push last, once the acknowledgements are answered and
  the member left, so that it carries the final counts (Java starts it at the
  beginning of close, concurrently with them).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from ._util import owned_task_group
from ._validate import (
    check_callable,
    check_offset,
    check_partition,
    check_timeout,
    check_topic,
    check_topics,
    describe,
)
from .client_hooks import start_client_hooks
from .config import ShareConsumerConfig, make_config
from .consumer_types import TopicPartition
from .coordinator_lookup import coordinator_problem
from .errors import (
    ArgumentTypeError,
    ArgumentValueError,
    ClientClosedError,
    UsageError,
)
from .lifecycle import Hostable
from .share_fetcher import AcknowledgeType, ShareCommit, ShareFetcher, ShareRecord
from .share_fetching import ShareFetchDriver
from .share_group import ShareGroupDriver
from .share_polls import PollRecords
from .statistics import ShareConsumerStatistics
from .telemetry import (
    IntervalAverages,
    MetricSample,
    MetricsPush,
    Peaks,
    PollTimes,
    disabled_error,
    share_consumer_samples,
)
from .tracing import consumer_tracing
from .transport import Cluster

__all__ = [
    "AcknowledgeType",
    "AcknowledgementCommitCallback",
    "ShareCommitResult",
    "ShareConsumer",
    "ShareRecord",
    "open_share_consumer",
]

log = logging.getLogger("trafka.sdk.share_consumer")

#: ``callback({partition: offsets}, error_or_None)``, once per partition answered.
AcknowledgementCommitCallback = Callable[
    [dict[TopicPartition, set[int]], BaseException | None], Any
]


def check_acknowledge_type(value: Any) -> AcknowledgeType:
    """An acknowledgement type: an :class:`AcknowledgeType` (or its int)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"type must be an AcknowledgeType, got {describe(value)}")
    try:
        return AcknowledgeType(value)
    except ValueError:
        known = ", ".join(f"{t.name} ({t.value})" for t in AcknowledgeType)
        raise ArgumentValueError(f"type must be one of {known}, got {value}") from None


class ShareCommitResult:
    """What :meth:`ShareConsumer.commit_async` returns: await it for the per-partition
    outcome (``{partition: None or the error}``)."""

    __slots__ = ("_commit", "_event")

    def __init__(self, commit: ShareCommit, event: anyio.Event) -> None:
        self._commit = commit
        self._event = event

    def done(self) -> bool:
        return self._commit.done

    def result(self) -> dict[TopicPartition, BaseException | None]:
        """The outcome (raises UsageError before it is known)."""
        if not self._commit.done:
            raise UsageError("the acknowledgements are not answered yet")
        return dict(self._commit.results)

    def __await__(self) -> Any:
        return self.wait().__await__()

    async def wait(self) -> dict[TopicPartition, BaseException | None]:
        """Wait for the outcome (as ``await`` does), then :meth:`result`."""
        await self._event.wait()
        return self.result()


class ShareConsumer(Hostable):
    """A share group member (KIP-932): records are shared among the group's
    members and acknowledged one by one.

    Use it as ``async with ShareConsumer(bootstrap_servers=..., group_id=...) as
    consumer:`` (or :func:`open_share_consumer`).

    Args:
        config: a :class:`~trafka.sdk.config.ShareConsumerConfig` or a mapping of
            Kafka-style keys (``share.acknowledgement.mode`` ...).
        **kwargs: settings in Python spelling; they override ``config``.

    Raises:
        ConfigError: invalid configuration (no ``group.id``, a consumer setting
            share groups do not use, ...).
    """

    def __init__(
        self, config: ShareConsumerConfig | Mapping[str, Any] | None = None, **kwargs: Any
    ) -> None:
        self.config = make_config(ShareConsumerConfig, config, kwargs)
        self._records = PollRecords(self.config)
        self._tracing = consumer_tracing(self.config)
        self._callback: AcknowledgementCommitCallback | None = None
        self._subscription: tuple[str, ...] = ()
        self._fatal: BaseException | None = None
        self._opened = False
        self._closed = False
        self._closing_done = False
        self._cm: AbstractAsyncContextManager[None] | None = None
        # Made in _start (an anyio.Event needs the event loop, the constructor may
        # run without), the cluster first: the consumer is open once it is there.
        self._data: anyio.Event
        self._cluster: Cluster | None = None
        self._group: ShareGroupDriver
        self._fetcher: ShareFetcher
        self._network: ShareFetchDriver
        self._telemetry: MetricsPush[ShareConsumerStatistics]  # KIP-714's push
        self._polls = PollTimes()  # the application's polls, for the push

    # -- opening and closing ----------------------------------------------------------------

    async def __aenter__(self) -> ShareConsumer:
        if self._opened or self._closed:
            raise UsageError("a ShareConsumer is opened once")
        self._opened = True
        self._cm = self._run()
        await self._cm.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool | None:
        cm, self._cm = self._cm, None
        assert cm is not None
        return await cm.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[None]:
        cfg = self.config
        async with owned_task_group() as tg:
            try:
                self._start(tg)
            except BaseException:
                # Half made, never open: its calls say so (not AttributeError).
                self._cluster, self._closed = None, True
                raise
            await start_client_hooks(tg, self, "share_consumer", cfg)
            try:
                yield
            except BaseException:
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(cfg.request_timeout_ms / 1000),
                ):
                    await self._close(graceful=False)
                raise
            else:
                await self._close(graceful=True)
            finally:
                self._closed = True
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self.cluster.aclose()

    def _start(self, tg: anyio.abc.TaskGroup) -> None:
        cfg = self.config
        assert cfg.group_id is not None
        self._data = anyio.Event()
        self._cluster = Cluster(cfg, tg)
        self._group = ShareGroupDriver(
            cfg,
            self._cluster,
            tg,
            assignment_changed=self._assignment_changed,
            set_fatal=self._set_fatal,
        )
        member_id = self._group.membership.member_id
        self._fetcher = ShareFetcher(
            self._cluster.metadata,
            group_id=cfg.group_id,
            member_id=member_id,
            max_poll_records=cfg.max_poll_records,
            fetch_min_bytes=cfg.fetch_min_bytes,
            fetch_max_wait_ms=cfg.fetch_max_wait_ms,
            fetch_max_bytes=cfg.fetch_max_bytes,
            check_crcs=cfg.check_crcs,
            ack_timeout=cfg.default_api_timeout_ms / 1000,
            retry_backoff=cfg.retry_backoff_ms / 1000,
            retry_backoff_max=cfg.retry_backoff_max_ms / 1000,
            record_limit=cfg.share_acquire_mode == "record_limit",
        )
        self._network = ShareFetchDriver(
            cfg,
            self._fetcher,
            self._cluster,
            tg,
            data_arrived=self._data_arrived,
            set_fatal=self._set_fatal,
            closed=lambda: self._closed,
        )
        self._cluster.on_change.append(self._metadata_changed)
        # Java's resource: group.id from the config, the member id (KIP-1082:
        # generated by the client, known from the start) and client.rack.
        resource = {"group_id": cfg.group_id, "group_member_id": member_id}
        self._telemetry = MetricsPush(
            cfg, self._cluster, "share consumer", resource, self.statistics, self._telemetry_samples
        )
        self._cluster.start()
        tg.start_soon(self._group.run, name="trafka share group")
        tg.start_soon(self._network.run, name="trafka share fetcher")
        self._telemetry.start(tg)
        if self._subscription:
            self._apply_subscription()

    async def close(self) -> None:
        """Acknowledge (implicit mode) or release what the last poll delivered,
        close the share sessions and leave the group. Idempotent; leaving the
        ``async with`` block does it too."""
        if self._cluster is None:
            self._closed = True
            return
        await self._close(graceful=True)

    aclose = close

    async def _close(self, *, graceful: bool) -> None:
        if self._closing_done or self._cluster is None:
            return
        self._closing_done = True
        fetcher, group, cfg = self._fetcher, self._group, self.config
        now = anyio.current_time()
        if graceful and not cfg.explicit_acknowledgement:
            self._records.accept_seen(fetcher)
        self._records.not_iterated.clear()
        fetcher.acknowledge_all(AcknowledgeType.RELEASE)
        fetcher.take_acknowledged()
        fetcher.close(now)
        self._wake_network()
        with anyio.move_on_after(cfg.request_timeout_ms / 1000):
            while not fetcher.close_done:
                await self._wait_data(math.inf)
        with anyio.move_on_after(cfg.request_timeout_ms / 1000):
            await group.heartbeat_answered()
        request = group.membership.leave(anyio.current_time())
        self._closed = True
        self._data_arrived()
        if request is not None:
            with anyio.move_on_after(cfg.request_timeout_ms / 1000):
                await group.send(request)
        try:
            self._dispatch_callbacks()
        except Exception:
            log.exception("the acknowledgement commit callback failed while closing")
        if graceful:
            await self._telemetry.close()  # the terminating push (Java's initiateClose), last

    # -- subscription ---------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group for these topics (an empty list: :meth:`unsubscribe`).

        Raises:
            TypeError, ValueError: ``topics`` is not an iterable of topic names
                (a single string is not).
            ClientClosedError: the consumer is closed.
        """
        names = tuple(sorted(set(check_topics("topics", topics))))
        if self._closed:
            raise ClientClosedError("the share consumer is closed")
        self._subscription = names
        if self._cluster is not None:
            self._apply_subscription()

    def unsubscribe(self) -> None:
        """Leave the share group (acknowledgements still pending are still sent)."""
        self.subscribe(())

    def subscription(self) -> set[str]:
        """The topics subscribed to."""
        return set(self._subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions the share group coordinator assigns this member now
        (other members may be assigned the same partitions)."""
        return set(self._group.membership.assignment) if self._cluster is not None else set()

    @property
    def member_id(self) -> str | None:
        """This member's id (None before the consumer is opened)."""
        return self._group.membership.member_id if self._cluster is not None else None

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        """The acquisition lock timeout from the last ShareFetch answer: how long
        delivered records stay locked to this member (None before the first)."""
        return self._fetcher.acquisition_lock_timeout_ms if self._cluster is not None else None

    def statistics(self) -> ShareConsumerStatistics:
        """A snapshot of what the share consumer has done so far (it never changes
        afterwards); see :class:`~trafka.sdk.statistics.ShareConsumerStatistics`."""
        cluster = self.cluster  # (UsageError before the consumer is open)
        membership, fetcher = self._group.membership, self._fetcher
        names = {0: "GAP", **{t.value: t.name for t in AcknowledgeType}}
        return ShareConsumerStatistics(
            group_id=membership.config.group_id,
            member_id=membership.member_id,
            member_epoch=membership.epoch,
            joins=membership.joins,
            assignment=membership.assignment,
            records_delivered=fetcher.records_taken,
            acknowledged={names.get(k, str(k)): n for k, n in sorted(fetcher.acknowledged.items())},
            acknowledgements_failed=dict(fetcher.acknowledgements_failed),
            share_sessions={n: s.epoch for n, s in sorted(fetcher.sessions.items())},
            acquisition_lock_timeout_ms=fetcher.acquisition_lock_timeout_ms,
            brokers=cluster.broker_statistics(),
            telemetry=self._telemetry.statistics(),
            bytes_fetched=int(fetcher.fetch_bytes.total),
            coordinator_problem=coordinator_problem(membership.lookup, membership.coordinator),
        )

    async def client_instance_id(self, timeout_ms: float = 0) -> uuid.UUID | None:
        """The id the cluster gave this client for its metrics (KIP-714), as Java's
        ``KafkaShareConsumer.clientInstanceId(Duration)``: waits up to
        ``timeout_ms`` for the first subscription when there is none yet.

        Returns:
            The client instance id, or None when no subscription arrived in time
            (or the cluster does not take client metrics).

        Raises:
            UsageError: ``enable.metrics.push`` is false, or the consumer is not open.
            TypeError, ValueError: ``timeout_ms`` is not a number >= 0.
        """
        if self._cluster is not None:  # open: the push is made with the cluster
            return await self._telemetry.instance_id(timeout_ms)
        check_timeout("timeout_ms", timeout_ms, none=False)
        if not self.config.enable_metrics_push:
            raise disabled_error()
        raise UsageError("the share consumer is not open: use it in `async with`")

    def _telemetry_samples(
        self, averages: IntervalAverages, stats: ShareConsumerStatistics, peaks: Peaks, now: float
    ) -> list[MetricSample]:
        fetcher, heartbeat = self._fetcher, self._group.last_heartbeat
        return share_consumer_samples(
            averages,
            stats,
            peaks,
            self._polls,
            heartbeat,
            now,
            fetch_bytes=fetcher.fetch_bytes,
            fetch_records=fetcher.fetch_records,
        )

    @property
    def cluster(self) -> Cluster:
        """The connections and metadata cache this consumer uses."""
        if self._cluster is None:
            raise UsageError("the share consumer is not open: use it in `async with`")
        return self._cluster

    def _apply_subscription(self) -> None:
        md = self.cluster.metadata
        md.set_topics(self._subscription)
        self.cluster.nudge()
        self._group.membership.set_subscription(self._subscription, anyio.current_time())
        self._wake_group()

    # -- records --------------------------------------------------------------------------

    async def poll(self, timeout_ms: float | None = None) -> list[ShareRecord]:
        """Records delivered to this member, waiting up to ``timeout_ms`` for some.

        With implicit acknowledgement, starting a poll accepts the records of the
        previous one; with explicit acknowledgement the previous poll's records
        must all have been acknowledged.

        Args:
            timeout_ms: how long to wait when none are ready (None: until some come).

        Returns:
            Up to ``max.poll.records`` records (empty when the time ran out).

        Raises:
            TypeError, ValueError: ``timeout_ms`` is not None or a number >= 0.
            UsageError: not subscribed; or, with explicit acknowledgement,
                records of the previous poll are not acknowledged.
            ClientClosedError: the consumer is closed.
            SerializationError: a record could not be deserialized (it was released).
            KafkaError: an error no retry can fix (group authorization, a corrupt
                batch, ...).
        """
        check_timeout("timeout_ms", timeout_ms)
        self._check_open()
        if self._records.not_iterated:
            return self._records.take_not_iterated()
        membership = self._group.membership
        now = anyio.current_time()
        membership.poll_started(now)
        self._polls.started(now)
        self._wake_group()
        try:
            return await self._poll(timeout_ms)
        finally:
            now = anyio.current_time()
            membership.poll_ended(now)
            self._polls.ended(now)

    async def _poll(self, timeout_ms: float | None) -> list[ShareRecord]:
        fetcher = self._fetcher
        self._dispatch_callbacks()
        left = self._prepare_acknowledgements()
        if left and self.config.explicit_acknowledgement:
            self._wake_network()
            raise UsageError(
                f"{left} record(s) of the previous poll are not acknowledged: with "
                "share.acknowledgement.mode=explicit every record must be acknowledged "
                "before the next poll"
            )
        error = self._records.error_next
        if error is not None:
            self._records.error_next = None
            self._wake_network()
            raise error
        if not self._subscription:
            raise UsageError("the share consumer is not subscribed to any topic")
        deadline = None if timeout_ms is None else anyio.current_time() + timeout_ms / 1000
        while True:
            self._check_open()
            if fetcher.errors:
                raise fetcher.errors.popleft()
            if fetcher.has_records():
                fetcher.send_pending_now(anyio.current_time())
                # This wake-up covers a record hand_out releases too: nothing runs between.
                self._wake_network()
                records = self._records.hand_out(fetcher)
                if records:
                    if self._tracing is not None:
                        self._tracing.polled(records)
                    return records
                await self._records.schema_loads.run()
                continue
            fetcher.want_records()
            self._network.send_requests()
            self._wake_network()
            left_s = math.inf if deadline is None else deadline - anyio.current_time()
            if left_s <= 0:
                return []
            await self._wait_data(left_s)

    def unseen(self, records: Iterable[ShareRecord]) -> None:
        """Records of the last poll a caller took but did not hand on (the blocking
        consumer's): they count as not yet iterated (not accepted, released on close)."""
        self._records.not_iterated.extendleft(reversed(list(records)))

    def __aiter__(self) -> ShareConsumer:
        return self

    async def __anext__(self) -> ShareRecord:
        """The next record; a new poll starts once the last poll's records are all iterated."""
        if self._closed:
            raise StopAsyncIteration
        pending = self._records.not_iterated
        while not pending:
            pending.extend(await self.poll())
        return pending.popleft()

    # -- acknowledgements -----------------------------------------------------------------

    def acknowledge(
        self, record: ShareRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge a record of the last poll (explicit acknowledgement mode):
        ``acknowledge(record)`` accepts it, ``acknowledge(record,
        AcknowledgeType.RELEASE)`` gives it back for another delivery,
        ``AcknowledgeType.REJECT`` discards it. Acknowledging a record again
        before the acknowledgements are sent changes its type.

        Raises:
            UsageError: implicit acknowledgement mode; or the record was not
                delivered by the last poll, or its acknowledgement was already sent.
            TypeError: ``record`` is not a record (see :meth:`acknowledge_offset`).
            ValueError: an unknown acknowledgement type.
        """
        if not isinstance(record, ShareRecord):
            raise ArgumentTypeError(
                f"record must be a ShareRecord, not {record.__class__.__name__}; "
                "use acknowledge_offset(topic, partition, offset, type) for coordinates"
            )
        self._acknowledge(TopicPartition(record.topic, record.partition), record.offset, type)

    def acknowledge_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        type: AcknowledgeType | int = AcknowledgeType.ACCEPT,
    ) -> None:
        """:meth:`acknowledge` a record of the last poll by its coordinates.

        Raises:
            TypeError, ValueError: ``topic``, ``partition``, ``offset`` or
                ``type`` is not what it must be.
            UsageError: as :meth:`acknowledge`.
        """
        tp = TopicPartition(check_topic("topic", topic), check_partition("partition", partition))
        check_offset("offset", offset)
        self._acknowledge(tp, offset, type)

    def _acknowledge(self, tp: TopicPartition, offset: int, type: AcknowledgeType | int) -> None:
        kind = check_acknowledge_type(type)
        if not self.config.explicit_acknowledgement:
            raise UsageError(
                "share.acknowledgement.mode is implicit: records are accepted by the next "
                "poll; set share.acknowledgement.mode=explicit to acknowledge them yourself"
            )
        self._check_open()
        self._fetcher.acknowledge(tp, offset, kind)

    def set_acknowledgement_commit_callback(
        self, callback: AcknowledgementCommitCallback | None
    ) -> None:
        """Call ``callback({partition: offsets}, error_or_None)`` for every
        partition's acknowledgements once the broker answered them (inside
        ``poll``, ``commit``, ``commit_async`` and ``close``); None removes it.

        Raises:
            TypeError: ``callback`` is neither callable nor None.
        """
        self._callback = check_callable("callback", callback)

    async def commit(
        self, timeout_ms: int | None = None
    ) -> dict[TopicPartition, BaseException | None]:
        """Send the acknowledgements made so far and wait for the broker's answer.

        With implicit acknowledgement, the records of the last poll are accepted
        first. Retriable failures are sent again until ``timeout_ms`` (default
        ``default.api.timeout.ms``) passes.

        Returns:
            Per partition acknowledged: None, or the error (REQUEST_TIMED_OUT when
            the time ran out, INVALID_RECORD_STATE when the records' acquisition
            locks had expired, ...). Empty when there was nothing to send.

        Raises:
            TypeError, ValueError: ``timeout_ms`` is not None or a number >= 0.
            ClientClosedError: the consumer is closed.
            KafkaError: an error of the group no retry can fix.
        """
        check_timeout("timeout_ms", timeout_ms)
        result = await self._commit(timeout_ms).wait()
        self._dispatch_callbacks()
        return result

    def commit_async(self) -> ShareCommitResult:
        """Send the acknowledgements made so far without waiting; await the result
        for the per-partition outcome. The callback hears of it too."""
        return self._commit(None)

    def _commit(self, timeout_ms: int | None) -> ShareCommitResult:
        self._check_open()
        self._dispatch_callbacks()
        self._prepare_acknowledgements()
        ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        event = anyio.Event()
        commit = self._fetcher.commit(anyio.current_time(), ms / 1000, event)
        if commit.done:
            event.set()
        self._wake_network()
        return ShareCommitResult(commit, event)

    def _prepare_acknowledgements(self) -> int:
        """Implicit mode: accept the records handed out; then take every typed one.
        Returns how many delivered records stay unacknowledged."""
        fetcher = self._fetcher
        if not self.config.explicit_acknowledgement:
            self._records.accept_seen(fetcher)
        return fetcher.take_acknowledged() - len(self._records.not_iterated)

    def _dispatch_callbacks(self) -> None:
        if self._cluster is None:
            return
        fetcher = self._fetcher
        callback = self._callback
        first: Exception | None = None
        while fetcher.outcomes:
            outcome = fetcher.outcomes.popleft()
            if callback is None:
                continue
            try:
                callback({outcome.partition: set(outcome.offsets)}, outcome.error)
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    # -- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the share consumer is closed")
        if self._cluster is None:
            raise UsageError("the share consumer is not open: use it in `async with`")
        if self._fatal is not None:
            raise self._fatal
        refused = self.cluster.auth_error
        if refused is not None:
            raise refused.again()

    def _wake_network(self) -> None:
        self._network.wake()

    def _wake_group(self) -> None:
        self._group.wake()

    def _assignment_changed(self, partitions: frozenset[TopicPartition]) -> None:
        self._fetcher.set_assignment(partitions)
        self._wake_network()

    def _metadata_changed(self) -> None:
        self._wake_group()
        self._wake_network()
        if self.cluster.auth_error is not None:
            self._data_arrived()

    async def _wait_data(self, timeout: float) -> None:
        event = self._data
        with anyio.move_on_after(timeout):
            await event.wait()

    def _data_arrived(self) -> None:
        event, self._data = self._data, anyio.Event()
        event.set()

    def _set_fatal(self, error: BaseException) -> None:
        if self._fatal is None:
            log.error("share group %s: %s", self.config.group_id, error)
            self._fatal = error
        self._data_arrived()


@asynccontextmanager
async def open_share_consumer(
    *topics: str, config: ShareConsumerConfig | Mapping[str, Any] | None = None, **kwargs: Any
) -> AsyncIterator[ShareConsumer]:
    """Open a share consumer subscribed to ``topics``; leaving the block closes it
    (see :class:`ShareConsumer`).

    Raises:
        ConfigError: invalid configuration.
    """
    consumer = ShareConsumer(config, **kwargs)
    async with consumer:
        if topics:
            consumer.subscribe(topics)
        yield consumer
