"""The proxy's filter interface with real clients: a filter changing requests
(a header stamped on every produced record, before key routing), one answering
requests itself (DeleteTopics refused), one changing answers (internal topics
hidden from Metadata), the per-connection state, and a filter that raises."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from proxy_helpers import confluent_produce, create, fresh, placement

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k20_delete_topics as dt
from trafka.codec.records import decode_batch, encode_batch, iter_batches
from trafka.proxy import Filter, FilterContext, Respond, proxy_in_thread
from trafka.proxy.filters import load_filter
from trafka.sdk import open_admin
from trafka.sdk.partitioners import murmur2_partition

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


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=tmp_path_factory.mktemp("filters")
    ) as running:
        yield running


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


def test_a_filter_that_raises_ends_only_its_clients_connection(broker: RunningBroker) -> None:
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(Broken(),)) as px:
        admin = AdminClient({"bootstrap.servers": px.bootstrap_servers})
        with pytest.raises(confluent_kafka.KafkaException):
            admin.list_topics(timeout=3)
    # Other proxies, and this broker, are unaffected.
    assert broker.bootstrap_servers


def test_filters_load_from_module_and_attribute(tmp_path: Path) -> None:
    assert isinstance(load_filter("test_proxy_filters:HideInternal"), HideInternal)
    for bad in ("nocolon", "no_such_module_xyz:F", "test_proxy_filters:fresh"):
        with pytest.raises(ValueError):
            load_filter(bad)
