"""A topic's messages, read and written for the console's pages: the
browser's page, a search's page, and the produce form's message.

Rules:

* Reading never joins a group or commits: a consumer of its own per page,
  assigned the partitions it reads, with no group id, reading up to each
  partition's high watermark as it was when the page was asked for, within
  :data:`BROWSE_SECONDS` (a search's page within :data:`SEARCH_SECONDS`).
* A partition that cannot be read now (no leader, or its leader out of
  reach) does not take the page down: the others are read, and the page says
  which could not be.
* A produced message needs its topic to exist: a producer's metadata request
  would have a broker that creates topics on demand create it. The one
  producer is opened by :meth:`Messages.run_producer`, which the server runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from trafka.sdk import ConsumerConfig, ProducerConfig, open_consumer, open_producer
from trafka.sdk.fetcher import TopicPartition

from . import model, search
from .reads import ClusterReads, client_settings, gather
from .schemas import SchemaRegistryView

__all__ = ["BROWSE_SECONDS", "SEARCH_SECONDS", "Messages"]

#: How long reading messages for one browser page may take.
BROWSE_SECONDS = 5.0
#: How long one page of a search may read.
SEARCH_SECONDS = 10.0


def _row(r: Any, mode: model.DecodeMode, schemas: SchemaRegistryView | None) -> model.MessageRow:
    """A record a consumer read, as the pages show it (framed keys and values
    decoded when the console knows a registry and the mode lets it)."""
    row = model.message_row(r.partition, r.offset, r.timestamp, r.key, r.value, r.headers, mode)
    if schemas is not None and mode in ("auto", "json"):
        row = schemas.decoded_row(row, r)
    return row


class Messages:
    """Reading and writing a cluster's messages.

    Args:
        reads: the lookups of offsets and partitions.
        client_config: Kafka-style client settings for the consumers and the
            producer (the settings an admin client alone takes are left out).
        schemas: the cluster's Schema Registry, which decodes framed records.
    """

    def __init__(
        self,
        reads: ClusterReads,
        client_config: Mapping[str, Any],
        schemas: SchemaRegistryView | None = None,
    ) -> None:
        self.reads = reads
        self.client_config = client_config
        self.schemas = schemas
        self._producer: Any = None

    async def browse(self, q: model.BrowseQuery) -> dict[str, Any]:
        """The messages of one browser page, the partitions' offsets and notes."""
        tps = await self.reads.partitions(q.topic, q.partition)
        begins, ends, found = await self._positions(tps, q)
        lows = {tp.partition: hit[0] if hit else 0 for tp, hit in begins.items()}
        highs = {tp.partition: hit[0] if hit else 0 for tp, hit in ends.items()}
        by_time = {tp.partition: None if hit is None else hit[0] for tp, hit in found.items()}
        readable = {p: h for p, h in highs.items() if p in lows}
        starts, notes = model.plan_reads(q, lows, readable, by_time)
        unreachable = sorted(tp.partition for tp in tps if tp.partition not in readable)
        if unreachable:
            notes.append(
                f"partition(s) {', '.join(map(str, unreachable))} cannot be read now: "
                "no leader (offline), or their leader is out of reach"
            )
        rows = await self._read(q, starts, highs) if starts else []
        shown_lows: dict[int, int | None] = {tp.partition: None for tp in tps}
        shown_highs: dict[int, int | None] = dict(shown_lows)
        shown_lows.update({p: lows[p] for p in readable})
        shown_highs.update(readable)
        return {
            "query": q,
            "lows": shown_lows,
            "highs": shown_highs,
            "rows": model.merge_messages(rows, q.start, q.count, partitions=len(tps)),
            "notes": notes,
        }

    async def _positions(
        self, tps: list[TopicPartition], q: model.BrowseQuery
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        def ask(spec: str | int) -> Callable[[], Awaitable[Any]]:
            return lambda: self.reads.offsets(tps, spec)

        if q.start != "timestamp":
            begins, ends = await gather(ask("earliest"), ask("latest"))
            return begins, ends, {}
        begins, ends, found = await gather(ask("earliest"), ask("latest"), ask(q.value))
        return begins, ends, found

    def _reader_settings(self) -> dict[str, Any]:
        """The settings of a consumer that reads for a page: no group, no commit."""
        settings = {
            **client_settings(ConsumerConfig, self.client_config),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "client.id": "trafka-console",
            # Leaving open_consumer waits for the fetch in flight, which a broker
            # holds up to this long when it has nothing new: 500 ms by default,
            # on every page. The reads stop at the high watermark, so a long
            # poll buys nothing here.
            "fetch.max.wait.ms": 50,
        }
        settings.pop("group.id", None)
        return settings

    @staticmethod
    async def _read_ranges(
        consumer: Any,
        topic: str,
        ranges: Mapping[int, tuple[int, int]],
        take: Callable[[Any], None],
        cap: int | None = None,
    ) -> None:
        """Hand each record of ``[start, stop)`` of each partition of ``ranges``
        to ``take`` (at most ``cap`` of each), in offset order per partition.
        The partitions must be assigned to ``consumer``."""
        open_tps = {TopicPartition(topic, p) for p in ranges}
        got = dict.fromkeys(ranges, 0)
        for tp in open_tps:
            consumer.seek(tp, ranges[tp.partition][0])
        consumer.resume(*open_tps)
        while open_tps:
            batch = await consumer.getmany(*open_tps, timeout_ms=500)
            for tp, records in batch.items():
                stop = ranges[tp.partition][1]
                for r in records:
                    if r.offset >= stop or (cap is not None and got[tp.partition] >= cap):
                        break
                    take(r)
                    got[tp.partition] += 1
            for tp in list(open_tps):
                full = cap is not None and got[tp.partition] >= cap
                if full or await consumer.position(tp) >= ranges[tp.partition][1]:
                    open_tps.discard(tp)
                    consumer.pause(tp)

    async def _read(
        self, q: model.BrowseQuery, starts: Mapping[int, int], highs: Mapping[int, int]
    ) -> list[model.MessageRow]:
        """Up to ``q.count`` messages of each partition from its start, stopping
        at its high watermark as it was when the page was asked for."""
        records: list[Any] = []
        async with open_consumer(config=self._reader_settings()) as consumer:
            consumer.assign({TopicPartition(q.topic, p) for p in starts})
            ranges = {p: (start, highs[p]) for p, start in starts.items()}
            with anyio.move_on_after(BROWSE_SECONDS):
                await self._read_ranges(consumer, q.topic, ranges, records.append, q.count)
        return await self._rows(records, q.decode)

    async def _rows(self, records: list[Any], mode: model.DecodeMode) -> list[model.MessageRow]:
        """Records as the pages show them. Decoding asks the registry (once per
        schema) through the SDK's blocking client: on a thread, so that the
        loop, which may serve that registry too (brokerlite), goes on."""
        schemas = self.schemas
        if schemas is None or mode not in ("auto", "json"):
            return [_row(r, mode, None) for r in records]
        return await anyio.to_thread.run_sync(lambda: [_row(r, mode, schemas) for r in records])

    async def search(self, q: search.SearchQuery) -> dict[str, Any]:
        """The matches of a search, newest first, and how far it got (see
        :mod:`.search`): every partition read backwards from its high
        watermark (or ``q.before``) in turns, within ``q.scan_limit`` records,
        ``q.max_results`` matches and :data:`SEARCH_SECONDS`."""
        tps = await self.reads.partitions(q.topic, q.partition)
        begins, ends = await gather(
            lambda: self.reads.offsets(tps, "earliest"), lambda: self.reads.offsets(tps, "latest")
        )
        lows = {tp.partition: hit[0] for tp, hit in begins.items() if hit is not None}
        highs = {tp.partition: hit[0] for tp, hit in ends.items() if hit is not None}
        readable = sorted(set(lows) & set(highs))
        uppers = {p: max(lows[p], min(q.before.get(p, highs[p]), highs[p])) for p in readable}
        match = search.matcher(q)
        found: list[model.MessageRow] = []
        scanned = 0
        timed_out = False
        if readable:
            async with open_consumer(config=self._reader_settings()) as consumer:
                consumer.assign({TopicPartition(q.topic, p) for p in readable})
                with anyio.move_on_after(SEARCH_SECONDS) as budget:
                    while scanned < q.scan_limit and len(found) < q.max_results:
                        ranges = search.next_chunks(uppers, lows, q.scan_limit - scanned)
                        if not ranges:
                            break
                        turn: list[Any] = []
                        await self._read_ranges(consumer, q.topic, ranges, turn.append)
                        # A turn counts whole (one cut short by the time limit
                        # is read again by the next page), or up to the matches
                        # wanted: the older ones are left for the next page.
                        if self.schemas is None:
                            hits = [r for r in turn if self._matches(q, match, r)]
                        else:  # decoding: on a thread, as _rows says
                            hits = await anyio.to_thread.run_sync(
                                lambda: [r for r in turn if self._matches(q, match, r)]  # noqa: B023
                            )
                        news = {p: start for p, (start, _) in ranges.items()}
                        kept, dropped = search.keep_newest(hits, q.max_results - len(found))
                        for r in dropped:
                            news[r.partition] = max(news[r.partition], r.offset + 1)
                        scanned += sum(1 for r in turn if r.offset >= news[r.partition])
                        found.extend(await self._rows(kept, "auto"))
                        uppers.update(news)
                timed_out = budget.cancelled_caught
        return {
            "query": q,
            "rows": search.sort_newest_first(found),
            "scanned": scanned,
            "total": sum(highs[p] - lows[p] for p in readable),
            "left": sum(uppers[p] - lows[p] for p in readable),
            "uppers": uppers,
            "lows": lows,
            "timed_out": timed_out,
            "unreachable": sorted(tp.partition for tp in tps if tp.partition not in readable),
            "before": search.format_before(uppers),
        }

    def _matches(self, q: Any, match: Callable[[bytes | None], bool], r: Any) -> bool:
        """Whether a record matches (a framed key or value by its decoded JSON)."""
        key, value, schemas = r.key, r.value, self.schemas
        if schemas is not None and q.target != "header":
            key = schemas.searchable(key, r, True) if q.target == "key" else key
            value = schemas.searchable(value, r, False) if q.target == "value" else value
        return search.record_matches(q, match, key, value, r.headers)

    async def produce(self, form: model.ProduceForm) -> Any:
        """Write the form's message. The topic must exist: a producer's metadata
        request would have a broker that creates topics on demand create it."""
        await self.reads.partition_count(form.topic, form.partition)
        producer = self._producer
        if producer is None:
            raise RuntimeError("the console's producer runs only inside run_producer()")
        return await producer.send_and_wait(
            form.topic, form.value, key=form.key, partition=form.partition, headers=form.headers
        )

    async def run_producer(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep a producer open for the produce form until cancelled (run by the server)."""
        settings = {
            **client_settings(ProducerConfig, self.client_config),
            "client.id": "trafka-console",
        }
        settings.pop("group.id", None)
        async with open_producer(config=settings) as producer:
            self._producer = producer
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._producer = None
