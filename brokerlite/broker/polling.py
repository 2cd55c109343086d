"""Periodic work: what the broker does between requests.

Rules: :meth:`PeriodicWork.poll` returns the completions due and runs the
periodic work (retention, coordinator timers, transaction timeouts and marker
retries, producer-id expiry, flushes); :meth:`PeriodicWork.next_deadline` says
when it is next due; polling early or often is harmless. A parked request
completes exactly once, its reply throttled as its request's quotas say (the
purgatory's ``finish``, ``Dispatcher.complete``).

Clocks (:mod:`trafka.brokerlite.clock`): :meth:`PeriodicWork.next_deadline` is
monotonic milliseconds. The periodic work is scheduled on the monotonic clock,
as Kafka's scheduler runs it; what each task decides (which segments, which
producers are old) is on the wall clock. The transaction coordinator's timers
and the markers' checks are on the wall clock (Kafka's
``TransactionStateManager`` compares ``time.milliseconds()``):
:meth:`PeriodicWork.next_deadline` gives them as far ahead on the monotonic
clock as they are on the wall clock at the latest time the broker was given,
and after a step of the wall clock the periodic work (at most ``FLUSH_CHECK_MS``
apart) polls them again.
"""

from __future__ import annotations

import logging

from ..clock import mono_ms, to_mono
from ..config import BrokerConfig
from ..groups.coordinator import GroupCoordinator
from ..purgatory import Completion, Purgatory
from ..shares.fetcher import ShareFetcher
from ..storage.log_manager import LogManager
from ..transactions.coordinator import TransactionCoordinator
from ..transactions.eos import ProducerStates
from ..transactions.markers import TransactionMarkers

__all__ = ["FLUSH_CHECK_MS", "PeriodicWork"]

log = logging.getLogger("trafka.brokerlite")
# How often the logs are checked for a flush their flush.ms asks for.
FLUSH_CHECK_MS = 1000


class PeriodicWork:
    """The parked requests' completions and the broker's timers
    (``Broker.periodic``): it owns the schedule of retention, flushes and
    producer-id expiry, and asks the parts it is built with for their own
    timers."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        logs: LogManager,
        producers: ProducerStates,
        purgatory: Purgatory,
        groups: GroupCoordinator,
        shares: ShareFetcher,
        txn: TransactionCoordinator,
        markers: TransactionMarkers,
        now_ms: int,
    ) -> None:
        self._config = config
        self._logs = logs
        self._producers = producers
        self._purgatory = purgatory
        self._groups = groups
        self._shares = shares
        self._txn = txn
        self._markers = markers
        mono = mono_ms(now_ms)
        self._next_retention_ms = mono + config.log_retention_check_interval_ms
        self._next_flush_ms = mono + FLUSH_CHECK_MS
        self._next_producer_expiry_ms = mono + config.producer_id_expiration_check_interval_ms

    def poll(self, now_ms: int) -> list[Completion]:
        """Completions due at ``now_ms``, and periodic work (retention, timers)."""
        markers = self._markers
        if markers.pending:
            # First: the markers may wake parked fetches answered below.
            markers.run_deferred(now_ms)
        purgatory = self._purgatory
        done = purgatory.take_ready(now_ms)
        purgatory.release(self._groups.tick(now_ms))
        markers.complete(self._txn.tick(now_ms), now_ms)
        mono = mono_ms(now_ms)
        share_deadline = self._shares.next_deadline()
        if share_deadline is not None and share_deadline <= mono:
            self._shares.tick(now_ms)
        markers.check(now_ms)
        done.extend(purgatory.take_group_done())
        if mono >= self._next_retention_ms:
            self._next_retention_ms = mono + self._config.log_retention_check_interval_ms
            self._run_retention(now_ms)
        if mono >= self._next_producer_expiry_ms:
            self._next_producer_expiry_ms = (
                mono + self._config.producer_id_expiration_check_interval_ms
            )
            expired = self._producers.expire(now_ms)
            if expired:
                log.info("forgot %d idle producer(s)", expired)
        if mono >= self._next_flush_ms:
            self._next_flush_ms = mono + FLUSH_CHECK_MS
            try:
                self._logs.maybe_flush_all(now_ms)
            except Exception:
                log.exception("periodic flush failed")
        return done

    def next_deadline(self, now_ms: int) -> int:
        """The monotonic time (ms) at which :meth:`poll` has work; ``now_ms`` is
        the latest time the broker was given (see the module's docstring)."""
        periodic = (self._next_retention_ms, self._next_flush_ms, self._next_producer_expiry_ms)
        waits = (self._purgatory, self._groups, self._shares)
        on_wall = (self._txn, self._markers)
        return min(
            *periodic,
            *(d for part in waits if (d := part.next_deadline()) is not None),
            *(to_mono(d, now_ms) for part in on_wall if (d := part.next_deadline()) is not None),
        )

    def _run_retention(self, now_ms: int) -> None:
        try:
            deleted = self._logs.apply_retention(now_ms)
        except Exception:
            log.exception("retention failed")
            return
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
        # Moving log start offsets drop aborted-transaction entries below them.
        self._producers.truncate_heads()
