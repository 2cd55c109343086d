"""A schema serde never holds an async client's event loop for a registry
request: the first record of a subject is serialized, and a record whose
schema is not loaded yet is deserialized, after the registry's answer was
awaited on a worker thread. The registry here answers only once a task on the
client's own loop lets it (a relay with a gate): were the loop held by the
request, that task could not run and the request would time out. And a share consumer hands its records to a schema
deserializer with their topic, partition, offset and headers, as a consumer does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from schema_relay import Relay
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.interceptors import ProducerInterceptor
from trafka.sdk.producer import open_producer
from trafka.sdk.schemas import AvroDeserializer, AvroSerializer, SchemaRegistryClient

USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USERS = [{"name": f"u{i}", "age": i} for i in range(3)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory, "schemas-loop", schema_registry_listen="127.0.0.1:0", num_partitions=1
    )


def _gated(broker: RunningBroker) -> tuple[Relay, threading.Event, SchemaRegistryClient]:
    assert broker.schema_registry_address is not None
    gate = threading.Event()
    relay = Relay(broker.schema_registry_address, gate=gate)
    # A timeout long enough that only a held loop (never released) runs into it.
    client = SchemaRegistryClient(
        {"url": f"http://127.0.0.1:{relay.port}", "timeout": 30, "max.retries": 0}
    )
    return relay, gate, client


async def _release_when_asked(relay: Relay, gate: threading.Event, seen: list[str]) -> None:
    """On the client's loop: wait (yielding) for the registry request, then let
    it through. Runs only if the loop is free while the request waits."""
    while not relay.arrived.is_set():
        await trio.sleep(0.01)
    seen.append("the loop ran while the registry request waited")
    gate.set()


@pytest.mark.parametrize("intercepted", [False, True], ids=["plain", "interceptors"])
def test_the_first_record_of_a_subject_is_serialized_off_the_loop(
    broker: RunningBroker, intercepted: bool
) -> None:
    """With interceptors too: their send takes the same general path (the
    registry request was made on the loop there)."""
    topic = fresh("loop-ser")
    interceptors = [ProducerInterceptor()] if intercepted else []
    relay, gate, registry = _gated(broker)
    ser = AvroSerializer(registry, json.dumps(USER))
    seen: list[str] = []

    async def main() -> None:
        with trio.fail_after(120):
            async with (
                open_producer(
                    bootstrap_servers=broker.bootstrap_servers,
                    value_serializer=ser,
                    interceptor_classes=interceptors,
                ) as p,
                trio.open_nursery() as tasks,
            ):
                tasks.start_soon(_release_when_asked, relay, gate, seen)
                for user in USERS:
                    await (await p.send(topic, user))

    try:
        trio.run(main)
    finally:
        registry.close()
        relay.close()
    assert seen == ["the loop ran while the registry request waited"]
    assert broker.schema_registry_address is not None
    reader = SchemaRegistryClient({"url": "http://{}:{}".format(*broker.schema_registry_address)})
    try:
        got = _read(broker, topic, AvroDeserializer(reader), len(USERS))
    finally:
        reader.close()
    assert got == USERS


def test_a_record_whose_schema_is_not_loaded_is_deserialized_off_the_loop(
    broker: RunningBroker,
) -> None:
    topic = fresh("loop-de")
    address = broker.schema_registry_address
    assert address is not None
    writer = SchemaRegistryClient({"url": "http://{}:{}".format(*address)})
    ser = AvroSerializer(writer, json.dumps(USER))

    async def produce() -> None:
        async with open_producer(
            bootstrap_servers=broker.bootstrap_servers, value_serializer=ser
        ) as p:
            for user in USERS:
                await (await p.send(topic, user))

    try:
        trio.run(produce)
    finally:
        writer.close()
    relay, gate, registry = _gated(broker)
    seen: list[str] = []

    async def consume() -> list[Any]:
        with trio.fail_after(120):
            async with trio.open_nursery() as tasks:
                tasks.start_soon(_release_when_asked, relay, gate, seen)
                return await _take(broker, topic, AvroDeserializer(registry), len(USERS))

    try:
        got = trio.run(consume)
    finally:
        registry.close()
        relay.close()
    assert seen == ["the loop ran while the registry request waited"]
    assert got == USERS


async def _take(broker: RunningBroker, topic: str, de: Any, n: int) -> list[Any]:
    """The first ``n`` values of the topic's partition 0, deserialized."""
    tp = TopicPartition(topic, 0)
    out: list[Any] = []
    async with open_consumer(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        value_deserializer=de,
        fetch_max_wait_ms=50,  # its close waits for the fetch held at the end
    ) as consumer:
        consumer.assign([tp])
        while len(out) < n:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                out += [r.value for r in records]
    return out


def _read(broker: RunningBroker, topic: str, de: Any, n: int) -> list[Any]:
    return trio.run(_take, broker, topic, de, n)


def test_a_share_consumer_reads_header_framed_records(broker: RunningBroker) -> None:
    """A share group's records reach a schema deserializer with their topic,
    partition, offset and headers, as a consumer group's do: the schema in the
    ``__value_schema_id`` header is found, and an error names the record. The
    schema is loaded off the share consumer's loop too (a gated registry)."""
    from sdk_brokers import share_queue

    from trafka.sdk import SerializationError
    from trafka.sdk.share_consumer import open_share_consumer

    assert broker.schema_registry_address is not None
    url = "http://{}:{}".format(*broker.schema_registry_address)
    registry = SchemaRegistryClient({"url": url})
    ser = AvroSerializer(registry, json.dumps(USER), conf={"schema.id.framing": "header"})
    bs = broker.bootstrap_servers

    async def main() -> tuple[list[Any], str]:
        topic, group = await share_queue(bs)
        async with open_producer(bootstrap_servers=bs, value_serializer=ser) as p:
            for user in USERS:
                await (await p.send(topic, user))
        async with open_producer(bootstrap_servers=bs) as raw:
            await (await raw.send(topic, b"\x07not avro"))
        got: list[Any] = []
        error = ""
        async with (
            open_share_consumer(
                topic,
                bootstrap_servers=bs,
                group_id=group,
                value_deserializer=AvroDeserializer(gated),
            ) as consumer,
            trio.open_nursery() as tasks,
        ):
            tasks.start_soon(_release_when_asked, relay, gate, seen)
            with trio.fail_after(60):
                while not error:
                    try:
                        got += [r.value for r in await consumer.poll(timeout_ms=200)]
                    except SerializationError as exc:
                        error = str(exc)
        return got, error

    relay, gate, gated = _gated(broker)
    seen: list[str] = []
    try:
        got, error = trio.run(main)
    finally:
        registry.close()
        gated.close()
        relay.close()
    assert seen == ["the loop ran while the registry request waited"]
    assert got == USERS
    assert "offset 3" in error and "not a schema registry frame" in error
