"""The proxy's filter interface with real clients: a filter changing requests
(a header stamped on every produced record, before key routing), one answering
requests itself (DeleteTopics refused), one changing answers (internal topics
hidden from Metadata), one answering later from its own requests over the
proxy's pool, key routing placed by the user, the per-connection state, and
filters that raise or close the connection."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
import trio
from confluent_kafka.admin import AdminClient
from proxy_helpers import confluent_produce, create, fresh, placement

from trafka.brokerlite import RunningBroker
from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as mt
from trafka.codec.messages import k20_delete_topics as dt
from trafka.codec.records import decode_batch, encode_batch, iter_batches
from trafka.proxy import (
    CloseConnection,
    Filter,
    FilterContext,
    KeyRouting,
    ProxyServices,
    Respond,
    RespondLater,
    proxy_in_thread,
)
from trafka.proxy.filters import load_filter
from trafka.sdk import open_admin
from trafka.sdk.partitioners import crc32_partition, murmur2_partition

PRODUCE, METADATA, DELETE_TOPICS = 0, 3, 20


class StampRecords(Filter):
    """Adds a ``via`` header to every record of every Produce (magic 2, plain)."""

    api_keys = frozenset({PRODUCE})

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        ctx.state["produces"] = ctx.state.get("produces", 0) + 1
        topics = []
        for t in body.topic_data:
            parts = []
            for p in t.partition_data:
                out = []
                for header, raw in iter_batches(p.records or b""):
                    records = decode_batch(bytes(raw)).records
                    out.append(
                        encode_batch(
                            [
                                (r.timestamp, r.key, r.value, (*r.headers, ("via", b"proxy")))
                                for r in records
                            ],
                            compression=header.attributes & 0x07,
                        )
                    )
                parts.append(dataclasses.replace(p, records=b"".join(out)))
            topics.append(dataclasses.replace(t, partition_data=parts))
        return dataclasses.replace(body, topic_data=topics)

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        self.answered = getattr(self, "answered", 0) + 1
        return body


class NoDeletes(Filter):
    api_keys = frozenset({DELETE_TOPICS})

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        r = dt.DeleteTopicsResponse
        return Respond(
            r(
                responses=[
                    r.DeletableTopicResult(
                        name=t.name,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        error_message="deleting topics is not allowed through this proxy",
                    )
                    for t in body.topics
                ]
            )
        )


class HideInternal(Filter):
    api_keys = frozenset({METADATA})

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        return dataclasses.replace(
            body, topics=[t for t in body.topics if not (t.name or "").startswith("_")]
        )


class Broken(Filter):
    api_keys = frozenset({METADATA})

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        raise RuntimeError("boom")


class Closing(Filter):
    api_keys = frozenset({METADATA})

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        raise CloseConnection("no metadata for you")


class MetadataOverPool(Filter):
    """Answers Metadata itself, later, from its own request to a broker over the
    proxy's pooled connections (an ``async`` filter with :class:`RespondLater`)."""

    api_keys = frozenset({METADATA})

    def __init__(self) -> None:
        self.served = 0

    def attach(self, services: ProxyServices) -> None:
        self.services = services

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        nodes = self.services.nodes()
        if not nodes:
            return body  # no broker known yet: forwarded on the client's connection
        waiter = await self.services.pool.send(
            nodes[0], ctx.client_id, METADATA, ctx.api_version, body
        )

        async def answer() -> Any:
            frame = await self.services.pool.wait(waiter, trio.current_time() + 10)
            _, got = protocol.decode_response(frame, METADATA, ctx.api_version)
            self.served += 1
            return self.services.from_upstream(METADATA, ctx.api_version, got)

        return RespondLater(answer)


def test_a_filter_changes_records_before_they_are_routed(broker: RunningBroker) -> None:
    stamp = StampRecords()
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(stamp,)) as px:
        topic = fresh()
        create(px.bootstrap_servers, topic, 4)
        confluent_produce(px.bootstrap_servers, topic, 200)  # CRC32 keys: most move
        records = placement(broker.bootstrap_servers, topic, 4)
        assert len(records) == 200
        assert all(("via", b"proxy") in r.headers for r in records)
        assert all(r.partition == murmur2_partition(r.key, 4) for r in records)
        assert stamp.answered > 0  # the answers came back through it


def test_a_filter_answers_requests_itself(broker: RunningBroker) -> None:
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, filters=(NoDeletes(),)
    ) as px:
        topic = fresh()
        create(px.bootstrap_servers, topic, 1)

        async def delete() -> Any:
            async with open_admin(bootstrap_servers=px.bootstrap_servers) as admin:
                return await admin.delete_topics([topic])

        with pytest.raises(Exception) as refused:
            anyio.run(delete, backend="trio")
        assert getattr(refused.value, "code", None) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert "not allowed through this proxy" in str(refused.value)
        # The broker never saw it: the topic is still there.
        assert (
            topic
            in AdminClient({"bootstrap.servers": broker.bootstrap_servers})
            .list_topics(timeout=10)
            .topics
        )


def test_a_filter_changes_answers(broker: RunningBroker) -> None:
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, filters=(HideInternal(),)
    ) as px:
        create(px.bootstrap_servers, "_hidden-" + fresh(), 1)

        async def names(servers: str) -> set[str]:
            async with open_admin(bootstrap_servers=servers) as admin:
                return set(await admin.list_topics(include_internal=True))

        direct = anyio.run(names, broker.bootstrap_servers, backend="trio")
        through = anyio.run(names, px.bootstrap_servers, backend="trio")
        assert any(n.startswith("_hidden-") for n in direct)
        assert not any(n.startswith("_") for n in through)
        assert through == {n for n in direct if not n.startswith("_")}


@pytest.mark.parametrize("failing", [Broken, Closing])
def test_a_filter_that_raises_ends_only_its_clients_connection(
    broker: RunningBroker, failing: type[Filter]
) -> None:
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, filters=(failing(), HideInternal())
    ) as px:
        admin = AdminClient({"bootstrap.servers": px.bootstrap_servers})
        with pytest.raises(confluent_kafka.KafkaException):
            admin.list_topics(timeout=3)
    # This broker is unaffected.
    direct = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert direct.list_topics(timeout=10).topics is not None


def test_an_async_filter_answers_later_over_the_pool(broker: RunningBroker) -> None:
    """Metadata answered by a filter from the pool: clients still see the proxy's
    addresses, key routing still learns the partitions, and pipelined answers
    keep their order."""
    over_pool = MetadataOverPool()
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(over_pool,)) as px:
        topic = fresh()
        create(px.bootstrap_servers, topic, 4)
        metadata = AdminClient({"bootstrap.servers": px.bootstrap_servers}).list_topics(timeout=10)
        broker_port = int(broker.bootstrap_servers.rsplit(":", 1)[1])
        assert metadata.brokers and all(b.port != broker_port for b in metadata.brokers.values())
        confluent_produce(px.bootstrap_servers, topic, 300)  # CRC32 keys: most move
        records = placement(broker.bootstrap_servers, topic, 4)
        assert len(records) == 300
        assert all(r.partition == murmur2_partition(r.key, 4) for r in records)
        assert over_pool.served > 0
        assert px.statistics.routing.records_moved > 0


def test_key_routing_placed_by_the_user_sees_records_after_their_filter(
    broker: RunningBroker,
) -> None:
    """KeyRouting placed first in the chain: the proxy adds no second one, and
    the filter after it sees the records already placed by key."""

    class SeesPlaced(Filter):
        api_keys = frozenset({PRODUCE})
        partitions: set[int] = set()

        def on_request(self, ctx: FilterContext, body: Any) -> Any:
            for t in body.topic_data:
                for p in t.partition_data:
                    if p.records:
                        self.partitions.add(p.index)
            return body

    routing = KeyRouting("crc32")  # places keys as librdkafka's consistent partitioner
    seen = SeesPlaced()
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, filters=(routing, seen)
    ) as px:
        topic = fresh()
        create(px.bootstrap_servers, topic, 4)
        confluent_produce(px.bootstrap_servers, topic, 200, partitioner="murmur2_random")
        records = placement(broker.bootstrap_servers, topic, 4)
        assert len(records) == 200
        crc = [r for r in records if r.partition == crc32_partition(r.key, 4)]
        assert len(crc) == 200
        assert px.statistics.routing is routing.stats and routing.stats.records_moved > 0


def test_filters_load_from_module_and_attribute(tmp_path: Path) -> None:
    assert isinstance(load_filter("test_proxy_filters:HideInternal"), HideInternal)
    for bad in ("nocolon", "no_such_module_xyz:F", "test_proxy_filters:fresh"):
        with pytest.raises(ValueError):
            load_filter(bad)


class ShieldedThenLater(Filter):
    """Finishes its request's work whatever happens to the client (as key
    routing does once batches are numbered), then answers later. The first
    request is answered a moment later, while the second is held."""

    api_keys = frozenset({METADATA})

    def __init__(self) -> None:
        self.release = threading.Event()
        self.cancelled = threading.Event()
        self.answered_later: list[int] = []

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        if ctx.correlation_id == 2:
            while not self.release.is_set():
                with trio.CancelScope(shield=True):
                    await trio.sleep(0.01)
                try:
                    await trio.lowlevel.checkpoint_if_cancelled()
                except trio.Cancelled:
                    self.cancelled.set()  # the connection's tasks end; go on, shielded
                    with trio.CancelScope(shield=True):
                        while not self.release.is_set():
                            await trio.sleep(0.01)

        async def answer() -> Any:
            if ctx.correlation_id == 1:
                await trio.sleep(0.3)
            self.answered_later.append(ctx.correlation_id)
            return mt.MetadataResponse()

        return RespondLater(answer)


def test_an_answer_begun_is_made_though_the_client_left(broker: RunningBroker) -> None:
    """A RespondLater whose client's connection broke meanwhile (the proxy
    failed writing it an earlier answer) is still awaited: key routing's
    exactly-once settling depends on it."""
    later = ShieldedThenLater()
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(later,)) as px:
        sock = socket.create_connection(px.address, timeout=5)
        for correlation_id in (1, 2):
            header = protocol.RequestHeader(
                request_api_key=METADATA, request_api_version=12,
                correlation_id=correlation_id, client_id="t",
            )  # fmt: skip
            sock.sendall(protocol.encode_request(header, mt.MetadataRequest(topics=[])))
        # Closed with a reset: writing the first answer fails, which ends the
        # connection's tasks while the second request is still in the filter.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        # Not a fixed pause: the second request is let go once the connection's
        # tasks have ended around it (the first answer was made, and its write failed).
        assert later.cancelled.wait(30), "the connection's tasks did not end"
        assert later.answered_later == [1]
        later.release.set()
        deadline = time.monotonic() + 10
        while later.answered_later != [1, 2] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert later.answered_later == [1, 2]
