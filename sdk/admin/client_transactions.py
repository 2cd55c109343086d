"""The admin client's transaction calls: producers' state on partitions,
listing, describing and aborting transactions, fencing producers and finding
hanging transactions (KIP-664).

A part of :class:`~trafka.sdk.admin.Admin` (see :mod:`.client_core`): what
goes on the wire and what an answer means is in :mod:`.transactions`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, overload

import anyio
import anyio.abc

from trafka.codec import ApiKey, ErrorCode, TrafkaError
from trafka.codec.messages import k26_end_txn as et

from .._validate import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    check_bool,
    check_int,
    check_names,
    check_str,
    check_timeout,
    check_timestamp_ms,
    check_topic_partition,
    check_topic_partitions,
    check_topics,
)
from ..calls import TRANSIENT, check
from ..consumer_types import TopicPartition
from ..errors import InvalidTxnStateError, ProducerFencedError
from ..transactions import TRANSACTION_KEY_TYPE
from ..transport import COORDINATOR_BASE, BrokerConnection
from ._common import answered, check_producer_id
from .client_core import AdminCore
from .topics import read_describe_topics, read_list_topics
from .transactions import (
    ProducerState,
    TransactionDescription,
    TransactionListing,
    abort_transaction_request,
    check_list_transactions,
    describe_producers_request,
    describe_transactions_request,
    fence_producer_request,
    hanging,
    list_transactions_request,
    read_abort_transaction,
    read_describe_producers,
    read_describe_transactions,
    read_fence_producer,
    read_list_transactions,
    suspects,
)

__all__ = ["TransactionCalls"]


class TransactionCalls(AdminCore):
    """The calls on producers and transactions."""

    @overload
    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        partial: Literal[False] = False,
    ) -> dict[TopicPartition, list[ProducerState]]: ...

    @overload
    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        partial: Literal[True],
    ) -> dict[TopicPartition, list[ProducerState] | TrafkaError]: ...

    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        partial: bool = False,
    ) -> dict[TopicPartition, Any]:
        """The producers each partition's leader keeps state for, with the first
        offset of the transaction each has open there (KIP-664).

        ``partial``: as :meth:`list_offsets`'s, an offline partition, or one
        whose leader cannot be reached, has the error as its result.
        """
        partitions = check_topic_partitions("partitions", partitions)
        check_bool("partial", partial)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            return read_describe_producers(
                await conn.request(ApiKey.DESCRIBE_PRODUCERS, describe_producers_request(tps))
            )

        wanted = [TopicPartition(*tp) for tp in partitions]
        return await self._calls.per_leader(
            "describe_producers", wanted, ask, timeout_ms, partial=partial
        )

    async def list_transactions(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> list[TransactionListing]:
        """The transactional ids every coordinator knows, optionally only those in
        one of ``states``, of one of ``producer_ids``, or (Kafka 3.8+, KIP-994)
        with a transaction open for at least ``min_duration_ms``.

        Raises:
            ValueError: a state the brokers do not know (they name it).
            UnsupportedVersionError: ``min_duration_ms`` and a broker without
                ListTransactions v1.
        """
        states = check_names("states", states, check_str, "transaction states")
        producer_ids = check_names("producer_ids", producer_ids, check_producer_id, "producer ids")
        if min_duration_ms is not None:
            check_int("min_duration_ms", min_duration_ms, minimum=0, maximum=INT64_MAX)
        state_filters, pid_filters = list(states), list(producer_ids)

        async def ask(conn: BrokerConnection) -> Any:
            version = conn.version_for(ApiKey.LIST_TRANSACTIONS)
            request = list_transactions_request(
                version, conn.node_id, state_filters, pid_filters, min_duration_ms
            )
            return check_list_transactions(
                await conn.request(ApiKey.LIST_TRANSACTIONS, request, version=version)
            )

        return read_list_transactions(await self._per_node("list_transactions", ask, timeout_ms))

    async def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TransactionDescription]:
        """The state of transactional ids at their coordinators.

        Raises:
            KafkaError: TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows.
        """
        transactional_ids = check_names(
            "transactional_ids", transactional_ids, check_str, "transactional ids"
        )
        ids = list(dict.fromkeys(transactional_ids))
        out: dict[str, TransactionDescription] = {}

        async def attempt(deadline: float) -> dict[str, TransactionDescription]:
            for tid in ids:
                if tid in out:
                    continue
                conn = await self._coordinator(tid, TRANSACTION_KEY_TYPE)
                resp = await conn.request(
                    ApiKey.DESCRIBE_TRANSACTIONS, describe_transactions_request(tid)
                )
                # The coordinator's own connection has an id of its own.
                found = read_describe_transactions(resp, tid, COORDINATOR_BASE - conn.node_id)
                if found is not None:
                    out[tid] = found
            return answered(ids, out, "describing transactional id")

        return await self._calls.run("describe_transactions", timeout_ms, attempt)

    async def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit or abort the open transaction of a producer, from any process
        (EndTxn with its transactional id, producer id and epoch): how a
        transaction prepared by one process is ended by another (see
        :mod:`trafka.sdk.txn_handoff`).

        Coordinators that move or load, and a transaction whose markers are
        still being written, are waited out within ``timeout_ms`` (default
        ``default.api.timeout.ms``). Ending a transaction the way it already
        ended succeeds again (a retry); EndTxn is sent at version 4 at most,
        Kafka's transaction version 1, whose epoch stays the producer's.

        Raises:
            ProducerFencedError: a newer producer of the transactional id, or the
                coordinator's timeout, ended the transaction first (fenced).
            InvalidTxnStateError: the transaction already ended the other way.
            KafkaError: any other refusal (INVALID_PRODUCER_ID_MAPPING: the
                coordinator no longer knows the id with that producer id;
                TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
            ApiTimeoutError: not done within ``timeout_ms``.
        """
        tid = transactional_id
        request = et.EndTxnRequest(
            transactional_id=tid,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            committed=commit,
        )
        what = f"{'committing' if commit else 'aborting'} the transaction of {tid!r}"

        async def attempt(deadline: float) -> None:
            conn = await self._coordinator(tid, TRANSACTION_KEY_TYPE)
            # At most v4: transaction version 1 (see the docstring).
            version = min(conn.version_for(ApiKey.END_TXN), 4)
            resp = await conn.request(ApiKey.END_TXN, request, version=version)
            code = resp.error_code
            if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                raise ProducerFencedError(
                    code,
                    f"{what}: fenced (producer id {producer_id}, epoch "
                    f"{producer_epoch}); a newer producer of the id, or "
                    "transaction.timeout.ms, ended it",
                )
            if code == ErrorCode.INVALID_TXN_STATE:
                raise InvalidTxnStateError(
                    f"{what}: the coordinator refused (INVALID_TXN_STATE): it already ended "
                    "the other way, or never started"
                )
            check(code, what, again=TRANSIENT | {ErrorCode.CONCURRENT_TRANSACTIONS})

        await self._calls.run("end_transaction", timeout_ms, attempt)

    async def fence_producers(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Fence the producers of transactional ids, as a new producer with the same
        id would (KIP-618): the coordinator bumps each id's epoch and aborts its
        open transaction; the old producer's next call fails with
        ProducerFencedError. An id the coordinator does not know yet gets a
        producer id, so a producer that starts later is not affected.

        Raises:
            KafkaError: the coordinator refused (CONCURRENT_TRANSACTIONS, an abort
                under way, is retried until the id has its next epoch, as in Kafka).
        """
        transactional_ids = check_names(
            "transactional_ids", transactional_ids, check_str, "transactional ids"
        )
        txn_timeout = self.config.request_timeout_ms
        pending = list(dict.fromkeys(transactional_ids))

        async def attempt(deadline: float) -> None:
            while pending:
                tid = pending[0]
                conn = await self._coordinator(tid, TRANSACTION_KEY_TYPE)
                version = conn.version_for(ApiKey.INIT_PRODUCER_ID)
                request = fence_producer_request(version, tid, txn_timeout)
                read_fence_producer(
                    await conn.request(ApiKey.INIT_PRODUCER_ID, request, version=version), tid
                )
                pending.pop(0)

        await self._calls.run("fence_producers", timeout_ms, attempt)

    async def find_hanging_transactions(
        self,
        topics: Iterable[str] | None = None,
        *,
        max_transaction_timeout_ms: int = 900_000,
        now_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> list[tuple[TopicPartition, ProducerState]]:
        """The open transactions of ``topics`` (default: every topic) that nothing
        will ever end, KIP-664's way: a producer's transaction open on a partition
        for longer than ``max_transaction_timeout_ms`` (Kafka's
        ``transaction.max.timeout.ms``, by the producer's last write) that no
        coordinator holds, for that producer and with that partition, in a state
        it completes by itself (:data:`LIVE_TRANSACTION_STATES`). Each one keeps
        read_committed consumers of its partition at its first offset;
        :meth:`abort_transaction` ends it. ``timeout_ms`` bounds all the calls
        this makes together.
        """
        if topics is not None:
            topics = check_topics("topics", topics)
        check_int(
            "max_transaction_timeout_ms", max_transaction_timeout_ms, minimum=0, maximum=INT32_MAX
        )
        check_timestamp_ms("now_ms", now_ms)
        check_timeout("timeout_ms", timeout_ms)
        deadline = anyio.current_time() + self._timeout_ms(timeout_ms) / 1000

        def left() -> int:
            return max(0, int((deadline - anyio.current_time()) * 1000))

        def metadata(topics: list[str] | None) -> Callable[[float], Awaitable[Any]]:
            return lambda _: self._controller_metadata(topics)

        if topics is None:
            answer = await self._calls.run("list_topics", left(), metadata(None))
            topics = sorted(read_list_topics(answer, include_internal=False))
        names = list(topics)
        if not names:
            return []
        answer = await self._calls.run("describe_topics", left(), metadata(names))
        infos = read_describe_topics(answer, names)
        tps = [TopicPartition(n, p.partition) for n in names for p in infos[n].partitions]
        states = await self.describe_producers(tps, timeout_ms=left()) if tps else {}
        now = int(time.time() * 1000) if now_ms is None else now_ms
        suspected = suspects(states, now, max_transaction_timeout_ms)
        if not suspected:
            return []
        listed = await self.list_transactions(
            producer_ids={s.producer_id for _, s in suspected}, timeout_ms=left()
        )
        ids = {t.producer_id: t.transactional_id for t in listed}
        described = (
            await self.describe_transactions(sorted(set(ids.values())), timeout_ms=left())
            if ids
            else {}
        )
        return hanging(suspected, ids, described)

    async def abort_transaction(
        self,
        partition: TopicPartition | tuple[str, int],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int = 0,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Abort a hanging transaction on one partition (KIP-664): its leader writes
        an ABORT marker for the producer, so read_committed consumers get past it.

        Only for a transaction no coordinator will complete (see
        :meth:`describe_producers` and :meth:`describe_transactions`): the broker
        cannot tell, and aborting a live transaction this way loses its records
        on this partition. ``producer_epoch`` and ``coordinator_epoch`` are the
        ones :meth:`describe_producers` shows (0 when it shows none).

        Raises:
            KafkaError: INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED
                (the partition has seen newer ones), UNKNOWN_TOPIC_OR_PARTITION, ...
        """
        partition = check_topic_partition("partition", partition)
        check_producer_id("producer_id", producer_id)
        # The protocol's ranges: which values are stale is the broker's to answer.
        check_int("producer_epoch", producer_epoch, minimum=-INT16_MAX - 1, maximum=INT16_MAX)
        check_int("coordinator_epoch", coordinator_epoch, minimum=-INT32_MAX - 1)
        tp = TopicPartition(*partition)
        body = abort_transaction_request(tp, producer_id, producer_epoch, coordinator_epoch)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            return read_abort_transaction(
                await conn.request(ApiKey.WRITE_TXN_MARKERS, body), tp, producer_id
            )

        await self._calls.per_leader("abort_transaction", [tp], ask, timeout_ms)
