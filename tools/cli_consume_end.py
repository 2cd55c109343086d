"""What ``trafka consume -e`` reads: each partition up to the end it has when
the command gets it (:class:`ReadToEnd`), or, with ``-X
enable.partition.eof=true``, to the end its fetch answers report (:func:`at_end`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import anyio.abc

log = logging.getLogger("trafka.tools.cli")


class ReadToEnd:
    """What ``-e`` reads: each partition up to the end it has when the command
    gets it (the end offset: the high watermark, the last stable offset under
    read_committed), found with ListOffsets, never fetching at or past it
    (``Consumer.seek``'s ``until``).

    A fetch at a partition's end would wait ``fetch.max.wait.ms`` at the broker
    for records the command would not print, and the consumer's close (the
    fetch session's end, and with ``-G`` the commit and LeaveGroup) would wait
    for it on the same connection: every ``consume -e`` ended that much after
    its last record, and each partition already at its end (an empty one, or a
    group's committed at the end) cost one such wait to find out.

    A partition is held (paused) from its assignment until its end and position
    are known. One whose end cannot be found (its leader out of reach) is read
    as without this, to the end a fetch answer reports. One whose position is
    past that end (``-o 1000`` on a shorter partition) starts where its fetch,
    out of range, would reset it to (``auto.offset.reset``), found here too
    (under read_committed it is read as without this). It is the group's
    rebalance listener with ``-G``: a partition assigned later is read to its
    end at that time.
    """

    def __init__(self, consumer: Any, tg: anyio.abc.TaskGroup) -> None:
        self._consumer = consumer
        self._tg = tg
        self.ends: dict[Any, int] = {}
        self._pending: set[Any] = set()
        self._poll = anyio.CancelScope()

    def hold(self, tps: Iterable[Any]) -> None:
        """Fetch none of ``tps`` until :meth:`bound` has found its end."""
        self._consumer.pause(*tps)
        self._pending.update(tps)

    def bound(self, tps: Iterable[Any]) -> None:
        for tp in tps:
            self._tg.start_soon(self._bound_one, tp)

    def polling(self) -> anyio.CancelScope:
        """The scope of one poll, cancelled once the last held partition's end is
        known: every partition may be at its end, with no fetch to answer."""
        self._poll = anyio.CancelScope()
        return self._poll

    async def _bound_one(self, tp: Any) -> None:
        from trafka.codec import TrafkaError

        consumer = self._consumer
        try:
            end = (await consumer.end_offsets([tp]))[tp]
            position = await consumer.position(tp)
            if position > end:
                position = await self._reset(tp, end)
            if position is not None:
                consumer.seek(tp, position, until=end)
                self.ends[tp] = end
        except (TrafkaError, KeyError) as exc:  # KeyError: revoked meanwhile
            log.debug("consume -e: no end for %s: %s", tp, exc)
        finally:
            if tp in consumer.assignment():
                consumer.resume(tp)
            self._pending.discard(tp)
            if not self._pending:
                self._poll.cancel()

    async def _reset(self, tp: Any, end: int) -> int | None:
        """Where ``tp`` is read from when its position is past the end found:
        where its fetch, out of range, would put it (``auto.offset.reset``); or
        None, read as without ``-e``: with ``none`` (the fetch raises), and under
        read_committed, whose end (the last stable offset) a position may pass
        without being out of range."""
        config = self._consumer.config
        policy = "none" if config.isolation_level == "read_committed" else config.auto_offset_reset
        if policy == "latest":
            return end
        if policy == "earliest":
            return int((await self._consumer.beginning_offsets([tp]))[tp])
        return None

    async def on_partitions_assigned(self, tps: set[Any]) -> None:
        self.hold(tps)  # before the fetcher runs: the listener is called as it assigns them
        self.bound(tps)

    async def on_partitions_revoked(self, tps: set[Any]) -> None:
        for tp in tps:
            self.ends.pop(tp, None)

    async def at_end(self, given_up: Mapping[Any, str]) -> bool:
        """Whether every assigned partition is read to its end, or given up."""
        consumer = self._consumer
        tps = consumer.assignment()
        for tp in tps:
            end = self.ends.get(tp)
            if tp in given_up:
                continue
            if end is None:
                if consumer.lag(tp) != 0:
                    return False
            elif (position := await _position_now(consumer, tp)) is None or position < end:
                return False
        return bool(tps)


async def _position_now(consumer: Any, tp: Any) -> int | None:
    """``tp``'s position, or None while it is being looked up (an offset reset)."""
    with anyio.move_on_after(0):  # position() returns at once when it knows it
        return int(await consumer.position(tp))
    return None


def at_end(consumer: Any, given_up: Mapping[Any, str]) -> bool:
    """Whether every assigned partition is read to the end its last fetch
    answer gave, or given up (``-e`` with ``-X enable.partition.eof=true``,
    whose notes need those answers)."""
    tps = consumer.assignment()
    return bool(tps) and all(tp in given_up or consumer.lag(tp) == 0 for tp in tps)
