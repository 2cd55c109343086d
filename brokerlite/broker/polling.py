"""Parked requests and periodic work: what the broker does between requests.

Rules: :meth:`poll` returns the completions due and runs the periodic work
(retention, coordinator timers, transaction timeouts and marker retries,
producer-id expiry, flushes); :meth:`next_deadline` says when it is next due;
polling early or often is harmless. A parked request completes exactly once,
its reply throttled as its request's quotas say.

Clocks (:mod:`trafka.brokerlite.clock`): :meth:`next_deadline` is monotonic
milliseconds. The periodic work is scheduled on the monotonic clock, as Kafka's
scheduler runs it; what each task decides (which segments, which producers are
old) is on the wall clock. The transaction coordinator's timers and the markers'
checks are on the wall clock (Kafka's ``TransactionStateManager`` compares
``time.milliseconds()``): :meth:`next_deadline` gives them as far ahead on the
monotonic clock as they are on the wall clock at the latest time the broker was
given, and after a step of the wall clock the periodic work (at most
``FLUSH_CHECK_MS`` apart) polls them again.
"""

from __future__ import annotations

import logging

from trafka.codec.errors import ErrorCode
from trafka.codec.protocol import api

from ..clock import mono_ms, to_mono
from ..handlers import HANDLERS
from ..outcomes import ParkAgain, Reply
from ..purgatory import Completion, ParkedRequest
from .dispatch import FETCH_KEY, Dispatch

__all__ = ["FLUSH_CHECK_MS", "Polling"]

log = logging.getLogger("trafka.brokerlite")
# How often the logs are checked for a flush their flush.ms asks for.
FLUSH_CHECK_MS = 1000


class Polling(Dispatch):
    """Parked requests and periodic work (a mixin of :class:`Broker`)."""

    def parked_by_api(self) -> dict[int, int]:
        """How many requests wait parked (Kafka's purgatories), per API key."""
        return self.purgatory.by_api()

    def _notify_available(self, topic: str, partition: int) -> None:
        """Records of a share-partition became available again: wake its share fetches."""
        self.purgatory.notify_append(topic, partition, 0)

    def notify_topic_changed(self, topic: str, *, deleted: bool) -> None:
        """A topic was deleted or resized: complete the requests watching it now.

        A deleted topic's committed offsets are dropped from every group.
        """
        self.purgatory.wake_topic(topic)
        if deleted:
            self.producers.drop_topic(topic)
            self.shares.topic_deleted(topic)
            # A topic recreated under the name must never get the old one's markers.
            gone = {tp: None for tp in self.txn.unsynced_markers() if tp[0] == topic}
            if gone:
                self.txn.markers_synced(gone)
            try:
                self.groups.delete_topic_offsets(topic)
            except Exception:
                log.exception("cannot drop the committed offsets of deleted topic %r", topic)

    def has_ready(self) -> bool:
        """True when :meth:`poll` has completions to return without waiting.

        Markers waiting to be written (``markers.defer``) do not count:
        :meth:`next_deadline` asks for a poll at once instead, so that a driver
        polls after it has sent the answer that comes before them.
        """
        return self.purgatory.has_ready()

    def poll(self, now_ms: int) -> list[Completion]:
        """Completions due at ``now_ms``, and periodic work (retention, timers)."""
        self._now_ms = now_ms
        markers = self.markers
        if markers.pending:
            # First: the markers may wake parked fetches answered below.
            markers.run_deferred(now_ms)
        purgatory = self.purgatory
        done = purgatory.take_ready(now_ms)
        purgatory.release(self.groups.tick(now_ms))
        markers.complete(self.txn.tick(now_ms), now_ms)
        mono = mono_ms(now_ms)
        share_deadline = self.shares.next_deadline()
        if share_deadline is not None and share_deadline <= mono:
            self.shares.tick(now_ms)
        markers.check(now_ms)
        done.extend(purgatory.take_group_done())
        if mono >= self._next_retention_ms:
            self._next_retention_ms = mono + self.config.log_retention_check_interval_ms
            self._run_retention(now_ms)
        if mono >= self._next_producer_expiry_ms:
            self._next_producer_expiry_ms = (
                mono + self.config.producer_id_expiration_check_interval_ms
            )
            expired = self.producers.expire(now_ms)
            if expired:
                log.info("forgot %d idle producer(s)", expired)
        if mono >= self._next_flush_ms:
            self._next_flush_ms = mono + FLUSH_CHECK_MS
            try:
                self.logs.maybe_flush_all(now_ms)
            except Exception:
                log.exception("periodic flush failed")
        return done

    def _complete(self, entry: ParkedRequest, now_ms: int) -> Reply | ParkAgain:
        """A waiter's reply, throttled as its request's quotas say (the purgatory's
        ``finish``)."""
        header = entry.header
        key, version = header.request_api_key, header.request_api_version
        try:
            body = entry.waiter.complete(now_ms)
        except Exception:
            log.exception("internal error completing %s v%d", api(key).name, version)
            spec = HANDLERS[key]
            assert spec.error_response is not None
            body = spec.error_response(None, version, ErrorCode.UNKNOWN_SERVER_ERROR)
        if isinstance(body, ParkAgain):
            return body
        reply = Reply(header.correlation_id, key, version, body)
        if entry.throttle_ms or (self.quotas.active and key == FETCH_KEY):
            return self._throttled(
                entry.session, header.client_id or "", reply, entry.throttle_ms, now_ms
            )
        return reply

    def next_deadline(self) -> int | None:
        """The monotonic time (ms) at which :meth:`poll` has work, or None."""
        periodic = (self._next_retention_ms, self._next_flush_ms, self._next_producer_expiry_ms)
        waits = (self.purgatory, self.groups, self.shares)
        on_wall = (self.txn, self.markers)  # (see the module's docstring)
        return min(
            *periodic,
            *(d for part in waits if (d := part.next_deadline()) is not None),
            *(
                to_mono(d, self._now_ms)
                for part in on_wall
                if (d := part.next_deadline()) is not None
            ),
        )

    # -- periodic work ----------------------------------------------------------

    def _run_retention(self, now_ms: int) -> None:
        try:
            deleted = self.logs.apply_retention(now_ms)
        except Exception:
            log.exception("retention failed")
            return
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
        # Moving log start offsets drop aborted-transaction entries below them.
        self.producers.truncate_heads()
