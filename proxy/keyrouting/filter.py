"""Key routing, written as a proxy filter (see :mod:`..filters`).

The protocol logic is :mod:`.plan` (placing records, merging answers) and
:mod:`.sequences`; idempotent and transactional producers are driven by
:mod:`.exactly_once`. This filter chooses the path of each Produce:

* An idempotent or transactional producer's request: planned, numbered and
  written by :class:`~.exactly_once.ExactlyOnce` over the proxy's pooled
  connections, answered later (:class:`~..filters.RespondLater`).
* A plain producer's request: split by the leader of each record's target
  partition, its parts written over the pooled connections, their answers
  merged into one (:func:`~.plan.plan_produce`, :func:`~.answers.merge_produce`).
  With ``coalesce`` (the default), a request whose records the codec's C pass
  places (acks 1 or -1) joins its leaders' accumulators instead, and shares
  upstream requests with other requests to the same leaders (:mod:`.coalesce`).
* A client that authenticated on its own connection (SASL) as a principal the
  proxy holds a login for (:mod:`..principals`): routed as any other, over
  pooled connections that log in as that principal (``ctx.pool``), so the
  brokers authorize its records as the client.
* A client that authenticated otherwise: the shared pool's connections are
  not the client's, so its Produce stays on its connection,
  with only the records whose target the same broker leads moved
  (:func:`~.plan.route_produce`); the answer is merged back in
  :meth:`KeyRouting.on_response`.
* A batch that would inflate past ``max_decompressed_bytes``: the request is
  answered MESSAGE_TOO_LARGE for its partitions and nothing is forwarded (a
  Produce with acks=0 closes the connection, as Kafka tells such a producer).
* A malformed batch is forwarded unrouted: the broker judges it and the client
  hears the broker's error.

Decompressing, splitting and compressing run on worker threads, so no
client's batches hold up the others, unless the codec's C pass makes them
cheaper than the hop to a thread and back (:func:`~.plan.cheap_to_plan`). The transaction requests (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and InitProducerId answers pass
through unchanged; they teach the exactly-once driver which producers and
transactions exist.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

import trio

from trafka.codec import ApiKey
from trafka.codec.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from trafka.codec.errors import DecodeError, DecompressionLimitError, ErrorCode
from trafka.codec.messages import k00_produce as produce_msgs
from trafka.codec.produce_response import ProduceAnswer

from ..filters import (
    CLIENT_KEYS,
    CloseConnection,
    EncodedBody,
    Filter,
    FilterContext,
    ProxyServices,
    Respond,
    RespondLater,
    Sample,
)
from ..pool import UpstreamError, UpstreamPool, Waiter, produce_answer
from .answers import (
    Endpoints,
    failed_answer,
    failed_part,
    learn_leaders,
    merge_answers,
    merge_produce,
    patch_answer,
    sub_request,
    unwritten,
)
from .coalesce import Coalescer, Share
from .coalesce import answer as coalesced_answer
from .exactly_once import ExactlyOnce
from .idempotent_plan import read_batches
from .journal import DirectoryJournal, PlacementJournal
from .journal_peers import PeersJournal
from .place import place
from .placement import ClientKeys, Hashing
from .plan import (
    HASHES,
    ProducePlan,
    ProduceRoute,
    SpansPlaced,
    count_placed,
    place_spans,
    plain_request,
    plan_produce,
    route_produce,
)
from .stats import RouteStats
from .stats import samples as route_samples
from .worker_lives import Siblings, this_worker

__all__ = ["KeyRouting"]

log = logging.getLogger("trafka.proxy")

#: The longest an EndTxn waits for the producer's routed writes: past any
#: Produce's own deadline (its timeout, at most Kafka's default
#: ``request.timeout.ms`` for the clients that set it, plus the connect
#: timeout), after which every write is answered or failed.
END_TXN_WAIT_S = 30.0
# Transaction requests whose bodies teach the routing of transactional producers.
_TXN_APIS = frozenset(
    {
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN,
    }
)
# A client's AddPartitionsToTxn request (ctx.notes), read with its answer.
_ADDED = "trafka.key_routing.added"
_ROUTE = "trafka.key_routing.route"
# The connection's last coalesced request (ctx.state): what a later one must not overtake.
_LAST_SHARE = "trafka.key_routing.share"
# How many times a partition a former leader refused follows its new leader.
_FOLLOW_ATTEMPTS = 3


class KeyRouting(Filter):
    """Places each keyed record on the partition its key hashes to.

    Args:
        hash_name: a key of :data:`~.plan.HASHES` (``murmur2``, ``crc32``,
            ``fnv1a``).
        max_decompressed_bytes: the most one batch may inflate to.
        connect_timeout: added to a request's own timeout for its deadline.
        stats: the counters to update (a fresh :class:`~.stats.RouteStats`
            if not given).
        journal_dir: where idempotent producers' placements are journaled
            (see :mod:`.journal`); None: not at all.
        journal_peers: with ``journal_dir``, other workers' journal
            directories, read for the placements of producers that come from
            them (:mod:`.journal_peers`).
        journal: a journal to use instead (a
            :class:`~.journal_topic.TopicJournal`, shared by every proxy
            instance: attaching starts it in the proxy's nursery).
        origin_headers: give each record of a batch the proxy splits a
            ``trafka-origin`` header saying where the client put it
            (:func:`~.plan.origin_header`).
        restart_grace: seconds from attaching before the proxy asks a leader
            about a producer it did not see born (see :mod:`.exactly_once`).
        siblings: with ``trafka proxy --workers``, the worker's link to its
            supervisor (see :mod:`.worker_lives`); None: this process's, if
            it is a worker's.
        coalesce: plain producers' requests to one leader share upstream
            requests (:mod:`.coalesce`).
    """

    api_keys = frozenset({ApiKey.PRODUCE}) | _TXN_APIS

    def __init__(
        self,
        hash_name: str = "murmur2",
        *,
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
        connect_timeout: float = 10.0,
        stats: RouteStats | None = None,
        journal_dir: str | None = None,
        journal_peers: tuple[str, ...] = (),
        journal: PlacementJournal | None = None,
        origin_headers: bool = False,
        restart_grace: float = 0.0,
        siblings: Siblings | None = None,
        coalesce: bool = True,
    ) -> None:
        if hash_name not in HASHES:
            raise ValueError(f"hash_name must be one of {', '.join(HASHES)}; not {hash_name!r}")
        self.hash_name = hash_name
        self.max_size = max_decompressed_bytes
        self.connect_timeout = connect_timeout
        self.stats = stats if stats is not None else RouteStats()
        self.journal_dir = journal_dir
        self.journal_peers = journal_peers
        self.origin_headers = origin_headers
        self.restart_grace = restart_grace
        self.siblings = siblings
        self.coalesce = coalesce
        self.coalescer: Coalescer | None = None
        self._journal: PlacementJournal | None = journal
        self._services: ProxyServices | None = None
        self._eos: ExactlyOnce | None = None

    def attach(self, services: ProxyServices) -> None:
        """Raises: JournalError: the journal cannot be read or opened."""
        self._services = services
        if self._journal is not None:
            # Imported with a journal only: it loads the SDK's clients.
            from .journal_topic import TopicJournal

            if isinstance(self._journal, TopicJournal):
                services.nursery.start_soon(self._journal.run)
        elif self.journal_dir is not None:
            directory = (
                PeersJournal(self.journal_dir, self.journal_peers)
                if self.journal_peers
                else DirectoryJournal(self.journal_dir)
            )
            read = directory.open()
            log.info("journal %s: %d placements read", directory.path, read)
            self._journal = directory
        self._eos = ExactlyOnce(
            services.pool,
            services.topics,
            self.stats,
            services.refresh,
            services.nodes,
            self.max_size,
            self._journal,
            origin_headers=self.origin_headers,
            restart_grace=self.restart_grace,
            siblings=self.siblings or this_worker(),
        )

        if self.coalesce:
            self.coalescer = Coalescer(services.nursery, self._settle, self.stats)

    def detach(self) -> None:
        if self._journal is not None:
            self._journal.close()

    def statistics(self) -> Mapping[str, Any]:
        return {"routing": self.stats}

    def samples(self) -> Iterable[Sample]:
        return route_samples(self.stats)

    @property
    def _proxy(self) -> tuple[ProxyServices, ExactlyOnce]:
        if self._services is None or self._eos is None:
            raise RuntimeError("KeyRouting is used by a proxy that did not attach it")
        return self._services, self._eos

    # -- requests ----------------------------------------------------------------------------

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        services, eos = self._proxy
        if ctx.api_key != ApiKey.PRODUCE:
            if ctx.api_key == ApiKey.END_TXN:
                # As long as a routed Produce may still be written (its own deadline).
                wait = self.connect_timeout + END_TXN_WAIT_S
                await eos.before_end(body, trio.current_time() + wait)
            eos.client_request(ctx.api_key, ctx.api_version, body, ctx.node_id)
            if ctx.api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
                ctx.notes[_ADDED] = body  # its answer says what was added
            return body
        deadline = trio.current_time() + body.timeout_ms / 1000 + self.connect_timeout
        # Keys a filter before this one rewrote (record encryption) are placed by the client's.
        client_keys = ctx.notes.get(CLIENT_KEYS)
        hashing: Hashing = (
            self.hash_name if not client_keys else ClientKeys(self.hash_name, client_keys)
        )
        try:
            # A SASL client is routed only over connections that log in as it.
            unpooled = ctx.authenticated and ctx.pool is None
            # The batch headers are read once, for the plan too.
            headers = None if unpooled or body.acks == 0 else read_batches(body)
            producer = None if headers is None else headers.producer
            if producer is not None:
                result = await eos.plan(ctx, body, producer, hashing, deadline, headers=headers)
                if result is not None:
                    return self._answer_exactly_once(ctx, body, result, deadline)
            elif not unpooled:
                # Keys hashed in Python (ClientKeys) are never the C pass's spans:
                # such a request goes to the plain plan at once, placed once.
                if self.coalescer is not None and body.acks != 0 and isinstance(hashing, str):
                    placed = await place(
                        body, hashing, self.origin_headers, partial(self._place, body, hashing)
                    )
                    if placed is not None:
                        return self._coalesced(ctx, body, placed, deadline)
                await _flushed(ctx)
                plan = await place(
                    body,
                    hashing,
                    self.origin_headers,
                    partial(
                        plan_produce,
                        body,
                        topics=services.topics,
                        hash_name=hashing,
                        stats=self.stats,
                        max_size=self.max_size,
                        origin_headers=self.origin_headers,
                    ),
                )
                if plan is not None:
                    return await self._send_plan(ctx, body, plan, deadline)
            routed_body, route = await place(
                body,
                hashing,
                self.origin_headers,
                partial(
                    route_produce,
                    body,
                    node_id=ctx.node_id,
                    topics=services.topics,
                    hash_name=hashing,
                    stats=self.stats,
                    max_size=self.max_size,
                    origin_headers=self.origin_headers,
                ),
            )
        except DecompressionLimitError as exc:
            return self._refuse(body, exc)
        except DecodeError as exc:
            # The broker judges the batch (CORRUPT_MESSAGE...) and the client
            # hears it in the usual way; the proxy only declines to route it.
            services.quiet.log(logging.INFO, "unrouted", "forwarding a Produce unrouted: %s", exc)
            self.stats.batches_untouched_malformed += 1
            return body
        if route is not None:
            ctx.notes[_ROUTE] = route
        return routed_body

    def _place(self, body: Any, hashing: Hashing) -> SpansPlaced | None:
        """The pieces of a request that coalesces (see :mod:`.coalesce`), counted;
        None: it takes the plain plan."""
        topics = self._proxy[0].topics
        if self.origin_headers or not plain_request(body, topics, batches=False):
            return None
        if any(not p.records for t in body.topic_data for p in t.partition_data):
            return None
        placed = place_spans(body, topics, hashing, self.max_size)
        if placed is not None:
            count_placed(self.stats, placed[3])
            self.stats.requests_pooled += 1
            if len({topics.leader(t, x) for t, x in placed[0]}) > 1:
                self.stats.requests_split += 1
        return placed

    def _coalesced(
        self, ctx: FilterContext, body: Any, placed: SpansPlaced, deadline: float
    ) -> RespondLater:
        services = self._proxy[0]
        assert self.coalescer is not None
        share = self.coalescer.add(
            ctx.pool or services.pool,
            services.topics.leader,
            ctx.client_id,
            ctx.api_version,
            body.acks,
            body.timeout_ms,
            deadline,
            placed,
        )
        ctx.state[_LAST_SHARE] = share
        endpoints = _endpoints(services, ctx.api_version)
        version, software = ctx.api_version, ctx.client_software

        async def respond() -> EncodedBody:
            return EncodedBody(await coalesced_answer(share, body, version, software, endpoints))

        return RespondLater(respond)

    async def _settle(
        self,
        pool: UpstreamPool,
        client_id: str | None,
        version: int,
        leader: int,
        part: Any,
        waiter: Waiter | UpstreamError,
        deadline: float,
    ) -> ProduceAnswer:
        """The answer to a coalesced request (:data:`.coalesce.Settle`)."""
        answers = [await self._read_part(pool, part, waiter, deadline, version)]
        plan = ProducePlan(((leader, part),), ProduceRoute(()))
        await self._follow_leaders(plan, answers, pool, client_id, version, deadline)
        return answers[0]

    async def _read_part(
        self,
        pool: UpstreamPool,
        part: Any,
        waiter: Waiter | UpstreamError,
        deadline: float,
        version: int,
    ) -> ProduceAnswer:
        """A part's answer (a stand-in failing its partitions if none came),
        its leader hints taken and stale topics asked again."""
        services = self._proxy[0]
        answer, error = await produce_answer(
            pool, waiter, deadline, version, partial(failed_part, part, version)
        )
        if error is not None:
            services.quiet.warning("part", "a part of a Produce failed: %s", error)
            self.stats.parts_failed += 1
        stale = learn_leaders(services.topics, answer)
        if stale:
            services.refresh(stale)
        return answer

    def _refuse(self, body: Any, exc: DecodeError) -> Respond:
        """MESSAGE_TOO_LARGE for the request's partitions; nothing forwarded."""
        self.stats.requests_too_large += 1
        if body.acks == 0:
            raise CloseConnection(f"refusing a Produce with acks=0: {exc}")
        self._proxy[0].quiet.warning("too-large", "refusing a Produce: %s", exc)
        message = f"a batch inflates beyond the proxy's max_decompressed_bytes: {exc}"
        return Respond(failed_answer(body, ErrorCode.MESSAGE_TOO_LARGE, message))

    async def _send_plan(
        self, ctx: FilterContext, body: Any, plan: ProducePlan, deadline: float
    ) -> Respond | RespondLater:
        # Every part is written before the client's next request is read: the
        # order of one client's requests to one broker is kept (see .pool).
        services = self._proxy[0]
        pool = ctx.pool or services.pool
        answered = body.acks != 0
        sent: list[tuple[Any, Waiter | UpstreamError]] = []
        for node_id, part in plan.parts:
            try:
                waiter: Waiter | UpstreamError = await pool.send(
                    node_id, ctx.client_id, ApiKey.PRODUCE, ctx.api_version, part, answered=answered
                )
            except UpstreamError as exc:
                waiter = exc
            sent.append((part, waiter))
        if not answered:
            return Respond(None)
        return RespondLater(partial(self._gather, ctx, plan, sent, deadline))

    async def _gather(
        self,
        ctx: FilterContext,
        plan: ProducePlan,
        sent: list[tuple[Any, Waiter | UpstreamError]],
        deadline: float,
    ) -> EncodedBody:
        services = self._proxy[0]
        client_id, version = ctx.client_id, ctx.api_version
        pool = ctx.pool or services.pool
        answers = [await self._read_part(pool, part, w, deadline, version) for part, w in sent]
        await self._follow_leaders(plan, answers, pool, client_id, version, deadline)
        return EncodedBody(
            merge_answers(
                plan.route, answers, version, ctx.client_software, _endpoints(services, version)
            )
        )

    async def _follow_leaders(
        self,
        plan: ProducePlan,
        answers: list[ProduceAnswer],
        pool: UpstreamPool,
        client_id: str | None,
        version: int,
        deadline: float,
    ) -> None:
        """Partitions a former leader refused unwritten (NOT_LEADER_OR_FOLLOWER...)
        are sent to the new leader, learnt from the answer's hint (KIP-951) or
        by asking the cluster again, so that a plain producer does not write
        the rest of its batch twice by retrying it whole."""
        services = self._proxy[0]
        topics = services.topics
        for attempt in range(_FOLLOW_ATTEMPTS):
            todo = {i: moved for i, a in enumerate(answers) if (moved := unwritten(a))}
            if not todo or trio.current_time() >= deadline:
                return
            # The leaders the answers named, else the cluster's, once known.
            with trio.move_on_at(min(deadline, trio.current_time() + 0.05 * 2**attempt)):
                while any(
                    topics.leader(t, p) in (-1, plan.parts[i][0])
                    for i, moved in todo.items()
                    for t, p in moved
                ):
                    await trio.sleep(0.02)
            sent: list[tuple[int, Any, Waiter | UpstreamError]] = []
            for i, moved in todo.items():  # in the parts' order: rounds stay in order
                by_leader: dict[int, set[tuple[str, int]]] = {}
                for t, p in moved:
                    by_leader.setdefault(topics.leader(t, p), set()).add((t, p))
                for leader, group in by_leader.items():
                    if leader < 0 or leader == plan.parts[i][0]:
                        continue  # no new leader yet: the next attempt, or the client
                    body = sub_request(plan.parts[i][1], group)
                    try:
                        waiter: Waiter | UpstreamError = await pool.send(
                            leader, client_id, ApiKey.PRODUCE, version, body
                        )
                    except UpstreamError as exc:
                        waiter = exc
                    sent.append((i, body, waiter))
            for i, body, waiter in sent:
                answer, _ = await produce_answer(
                    pool, waiter, deadline, version, partial(failed_part, body, version)
                )
                learn_leaders(topics, answer)
                self.stats.partitions_rerouted += len(set(answer.partitions) - unwritten(answer))
                answers[i] = patch_answer(answers[i], answer)

    def _answer_exactly_once(
        self, ctx: FilterContext, body: Any, result: Any, deadline: float
    ) -> Respond | RespondLater:
        services, eos = self._proxy
        if not isinstance(result, tuple):  # the proxy answers at once
            return Respond(services.from_upstream(ApiKey.PRODUCE, ctx.api_version, result))
        plan, written = result
        endpoints = _endpoints(services, ctx.api_version)

        async def settle() -> EncodedBody:
            return EncodedBody(await eos.settle(ctx, body, plan, written, deadline, endpoints))

        return RespondLater(settle)

    # -- answers -----------------------------------------------------------------------------

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        if ctx.api_key == ApiKey.INIT_PRODUCER_ID:
            self._proxy[1].init_answered(body)
        elif ctx.api_key == ApiKey.ADD_PARTITIONS_TO_TXN and ctx.api_version <= 3:
            request = ctx.notes.get(_ADDED)
            if request is not None:
                self._proxy[1].client_added(request, body)
        elif ctx.api_key == ApiKey.PRODUCE:
            route = ctx.notes.get(_ROUTE)
            if route is not None:
                return merge_produce(route, [body], ctx.client_software)
        return body


async def _flushed(ctx: FilterContext) -> None:
    """Wait until the connection's coalesced pieces are written upstream (or
    dropped): a request sent otherwise must not overtake them."""
    share: Share | None = ctx.state.get(_LAST_SHARE)
    if share is not None and not share.flushed.is_set():
        with trio.move_on_at(share.deadline):
            await share.flushed.wait()


def _endpoints(services: ProxyServices, version: int) -> Endpoints:
    """KIP-951 node endpoints as the proxy tells them to clients: its own
    listeners' addresses (the rewriting of every answer from a broker)."""

    def rewrite(nodes: list[Any]) -> list[Any]:
        body = produce_msgs.ProduceResponse(node_endpoints=nodes)
        return list(services.from_upstream(ApiKey.PRODUCE, version, body).node_endpoints)

    return rewrite
