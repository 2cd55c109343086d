"""Requests parked in the broker core until they can be answered (Kafka's purgatories).

Two kinds of request wait here, without I/O:

* a request with a :class:`~.handlers._base.Waiter` (a Fetch long poll, an
  acks=all Produce, a coordinator's answer waiting for replication...), woken
  by appends to the partitions it watches, by its deadline, or by a change of
  a watched topic; its reply is built by the broker's ``finish`` callback;
* a request the group coordinator holds (JoinGroup, SyncGroup), identified by
  a ``(conn_id, ticket)`` token, answered when the coordinator releases that
  token with a response.

Rules and invariants:

* Tickets are unique for the broker's life and shared by both kinds.
* A connection has at most one parked request (the driver does not read the
  next request before the previous one is answered); its session's
  ``parked_ticket`` names it while it waits.
* A parked request completes exactly once: it leaves the tables when it is
  taken as ready (:meth:`Purgatory.take_ready`), released by the coordinator,
  or dropped with its connection (:meth:`Purgatory.connection_closed`), which
  never completes it. Woken twice before it is taken (an append and its
  deadline in one round), it is taken once: a request its first waiter parks
  again (:class:`~.outcomes.ParkAgain`) waits for its new waiter's own wake.
* The deadline heap may keep items of requests already gone; they are skipped,
  and the heap is rebuilt when they outnumber the live ones.
* Deadlines are monotonic milliseconds (``mono_ms(now_ms)``), as Kafka's
  purgatories time out on its ``SystemTimer`` (``Time.hiResClockMs``): a step of
  the wall clock neither ends a wait early nor stretches it.
"""

from __future__ import annotations

import dataclasses
import heapq
import typing
from collections.abc import Callable, Hashable
from typing import Any

from trafka.codec.messages.headers import RequestHeader

from .clock import mono_ms
from .outcomes import ParkAgain, Parked, Reply, Waiter
from .session import ConnectionSession

__all__ = ["Completion", "ParkedRequest", "Purgatory"]


@dataclasses.dataclass(frozen=True, slots=True)
class Completion:
    """A parked request's reply, ready to send on ``conn_id``."""

    conn_id: int
    ticket: int
    reply: Reply


@dataclasses.dataclass(slots=True)
class ParkedRequest:
    """A request parked with a waiter."""

    ticket: int
    session: ConnectionSession
    header: RequestHeader
    waiter: Waiter
    throttle_ms: int = 0  # from the request quota, when it was handled


class Purgatory:
    """The parked requests of one broker.

    Args:
        finish: builds a waiter's reply when it is taken as ready
            (``(request, now_ms) -> Reply``), or says it waits on (:class:`ParkAgain`).
    """

    def __init__(self, finish: Callable[[ParkedRequest, int], Reply | ParkAgain]) -> None:
        self._finish = finish
        self._entries: dict[int, ParkedRequest] = {}
        self._by_partition: dict[tuple[str, int], set[int]] = {}
        self._deadlines: list[tuple[int, int]] = []
        self._ready: list[int] = []
        self._ready_set: set[int] = set()  # the tickets in _ready: a wake counts once
        self._group_waits: dict[Hashable, tuple[RequestHeader, ConnectionSession]] = {}
        self._group_done: list[Completion] = []
        self._next_ticket = 1

    @property
    def waiting(self) -> int:
        """How many requests wait, of both kinds."""
        return len(self._entries) + len(self._group_waits)

    def _new_ticket(self) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        return ticket

    # -- requests with a waiter ------------------------------------------------------------

    def park(self, session: ConnectionSession, header: RequestHeader, waiter: Waiter) -> Parked:
        """Park a request until ``waiter`` completes."""
        ticket = self._new_ticket()
        self._enter(ParkedRequest(ticket, session, header, waiter))
        return Parked(ticket)

    def _enter(self, entry: ParkedRequest) -> None:
        ticket = entry.ticket
        waiter = entry.waiter
        self._entries[ticket] = entry
        entry.session.parked_ticket = ticket
        for tp in waiter.watches:
            self._by_partition.setdefault(tp, set()).add(ticket)
        heapq.heappush(self._deadlines, (waiter.deadline_ms, ticket))

    def get(self, ticket: int) -> ParkedRequest | None:
        """The parked request of ``ticket`` while it waits."""
        return self._entries.get(ticket)

    def by_api(self) -> dict[int, int]:
        """How many requests wait with a waiter, per API key."""
        out: dict[int, int] = {}
        for entry in self._entries.values():
            key = entry.header.request_api_key
            out[key] = out.get(key, 0) + 1
        return out

    def notify_append(self, topic: str, partition: int, nbytes: int) -> None:
        """Data was appended to a partition: wake the parked requests that wanted it."""
        tickets = self._by_partition.get((topic, partition))
        if not tickets:
            return
        for ticket in list(tickets):
            entry = self._entries.get(ticket)
            if entry is not None and entry.waiter.on_append(topic, partition, nbytes):
                self.wake(ticket)

    def wake_topic(self, topic: str) -> None:
        """Make every request watching a partition of ``topic`` ready."""
        for (name, _), tickets in list(self._by_partition.items()):
            if name == topic:
                for ticket in list(tickets):
                    self.wake(ticket)

    def wake(self, ticket: int) -> None:
        """Make a parked request ready: :meth:`take_ready` completes it."""
        entry = self._entries.get(ticket)
        if entry is None or ticket in self._ready_set:
            return
        self._unwatch(entry)
        self._ready.append(ticket)
        self._ready_set.add(ticket)

    def _unwatch(self, entry: ParkedRequest) -> None:
        for tp in entry.waiter.watches:
            tickets = self._by_partition.get(tp)
            if tickets is not None:
                tickets.discard(entry.ticket)
                if not tickets:
                    del self._by_partition[tp]

    def take_ready(self, now_ms: int) -> list[Completion]:
        """The replies of the requests ready, or whose deadline passed, at ``now_ms``."""
        deadlines = self._deadlines
        mono = mono_ms(now_ms)
        while deadlines and deadlines[0][0] <= mono:
            _, ticket = heapq.heappop(deadlines)
            entry = self._entries.get(ticket)
            # (a request parked again has its first waiter's deadline in the heap too)
            if entry is not None and entry.waiter.deadline_ms <= mono:
                self.wake(ticket)
        done: list[Completion] = []
        ready, self._ready = self._ready, []
        self._ready_set.clear()
        for ticket in ready:
            entry = self._entries.pop(ticket, None)
            if entry is None:
                continue
            if entry.session.parked_ticket == ticket:
                entry.session.parked_ticket = None
            reply = self._finish(entry, now_ms)
            if isinstance(reply, ParkAgain):
                # The same request waits on, for another waiter, under its ticket.
                entry.waiter = reply.waiter
                self._enter(entry)
                continue
            done.append(Completion(entry.session.conn_id, ticket, reply))
        if len(deadlines) > 64 and len(deadlines) > 4 * len(self._entries):
            # Completed entries leave stale heap items behind; rebuild now and then.
            self._deadlines = [(d, t) for d, t in deadlines if t in self._entries]
            heapq.heapify(self._deadlines)
        return done

    def next_deadline(self) -> int | None:
        """The earliest deadline of a request waiting (monotonic ms), or None."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][1] not in self._entries:
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else None

    # -- requests the group coordinator holds ----------------------------------------------

    def group_token(self, conn_id: int) -> tuple[int, int]:
        """A token for a request the coordinator may park (JoinGroup, SyncGroup)."""
        return (conn_id, self._new_ticket())

    def group_outcome(
        self,
        session: ConnectionSession,
        header: RequestHeader,
        token: tuple[int, int],
        released: Any,
    ) -> Any:
        """Sort the coordinator's ``(token, response)`` pairs for a request.

        Returns:
            The request's own response when the coordinator answered it at once,
            else :class:`Parked` (its response comes out of :meth:`take_group_done`).
        """
        own = None
        for tok, body in released:
            if tok == token:
                own = body
            else:
                self._release_one(tok, body)
        if own is not None:
            return own
        ticket = token[1]
        self._group_waits[token] = (header, session)
        session.parked_ticket = ticket
        return Parked(ticket)

    def release(self, released: Any) -> None:
        """Queue the coordinator's ``(token, response)`` pairs for their connections."""
        for tok, body in released:
            self._release_one(tok, body)

    def _release_one(self, token: Hashable, body: Any) -> None:
        wait = self._group_waits.pop(token, None)
        if wait is None:
            return  # its connection is gone
        header, session = wait
        conn_id, ticket = typing.cast(tuple[int, int], token)
        if session.parked_ticket == ticket:
            session.parked_ticket = None
        reply = Reply(
            header.correlation_id, header.request_api_key, header.request_api_version, body
        )
        self._group_done.append(Completion(conn_id, ticket, reply))

    def take_group_done(self) -> list[Completion]:
        """The replies of the coordinator's requests released since the last call."""
        done, self._group_done = self._group_done, []
        return done

    # -- both ------------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """True when replies are ready to take without waiting."""
        return bool(self._ready) or bool(self._group_done)

    def connection_closed(self, session: ConnectionSession) -> tuple[int, int] | None:
        """Drop the request parked on a closed connection, never completing it.

        Returns:
            Its token when the group coordinator held it (the coordinator must
            hear of the close), else None.
        """
        ticket, session.parked_ticket = session.parked_ticket, None
        if ticket is None:
            return None
        entry = self._entries.pop(ticket, None)
        if entry is not None:
            self._unwatch(entry)
        token = (session.conn_id, ticket)
        return token if self._group_waits.pop(token, None) is not None else None

    def clear(self) -> None:
        """Forget every parked request (the broker is closing)."""
        for entry in self._entries.values():
            entry.session.parked_ticket = None
        for _, session in self._group_waits.values():
            session.parked_ticket = None
        self._entries.clear()
        self._by_partition.clear()
        self._group_waits.clear()
