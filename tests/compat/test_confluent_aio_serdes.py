"""confluent-kafka 2.16's serializing clients with serde builders, blocking and
asyncio (``SerializingProducer`` / ``DeserializingConsumer`` with
``value.serializer.builder``; ``await AsyncSerializingProducer(conf)`` /
``await AsyncDeserializingConsumer(conf)``), on ``confluent_kafka`` and on
``trafka.compat.confluent``, against one brokerlite with its schema registry.

From confluent-kafka's reference: a property and its ``.builder`` both set is
a ``ValueError``; a builder's serde is the client's (closed with it); the
asyncio clients are made by awaiting them, their serdes may be coroutines,
and ``produce`` returns a future of the delivered message. Records written by
either library's clients are read back by the other's, the same values.
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::UserWarning")]

APIS = ["confluent_kafka", "trafka.compat.confluent"]
SCHEMA = (
    '{"type": "record", "name": "Reading", "fields": ['
    '{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}]}'
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    running: RunningBroker
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("aio-serdes"),
        schema_registry_listen="127.0.0.1:0",
        group_initial_rebalance_delay_ms=0,
    ) as running:
        assert running.schema_registry_address is not None
        host, port = running.schema_registry_address
        yield running.bootstrap_servers, f"http://{host}:{port}"


def test_a_serde_and_its_builder_both_set_is_refused() -> None:
    seen = []
    for api in APIS:
        ck = importlib.import_module(api)
        ser = importlib.import_module(api + ".serialization")
        with pytest.raises(ValueError) as refused:
            ck.SerializingProducer(
                {
                    "bootstrap.servers": "127.0.0.1:1",
                    "value.serializer": ser.StringSerializer(),
                    "value.serializer.builder": object(),
                }
            )
        seen.append(str(refused.value))
    assert seen[0] == seen[1]


async def _produce_async(
    api: str, bs: str, url: str, topic: str, readings: list[dict[str, Any]]
) -> list[int]:
    aio = importlib.import_module(api + ".aio")
    avro = importlib.import_module(api + ".schema_registry.avro")
    builder = (
        avro.AsyncAvroSerializerBuilder()
        .set_schema_registry_config({"url": url})
        .set_schema(SCHEMA)
    )
    ser = importlib.import_module(api + ".serialization")
    producer = await aio.AsyncSerializingProducer(
        {
            "bootstrap.servers": bs,
            "key.serializer": ser.StringSerializer(),
            "value.serializer.builder": builder,
        }
    )
    offsets = []
    for reading in readings:
        future = await producer.produce(topic, key=reading["sensor"], value=reading, partition=0)
        offsets.append((await future).offset())
    await producer.close()
    return offsets


async def _consume_async(api: str, bs: str, url: str, topic: str, n: int) -> list[Any]:
    aio = importlib.import_module(api + ".aio")
    avro = importlib.import_module(api + ".schema_registry.avro")
    ser = importlib.import_module(api + ".serialization")
    builder = avro.AsyncAvroDeserializerBuilder().set_schema_registry_config({"url": url})
    consumer = await aio.AsyncDeserializingConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "key.deserializer": ser.StringDeserializer(),
            "value.deserializer.builder": builder,
        }
    )
    await consumer.subscribe([topic])
    got: list[Any] = []
    for _ in range(30):
        got += [(m.offset(), m.key(), m.value()) for m in await consumer.consume(n - len(got), 1.0)]
        if len(got) >= n:
            break
    await consumer.close()
    return got


@pytest.mark.parametrize(("writer", "reader"), [(APIS[0], APIS[1]), (APIS[1], APIS[0])])
def test_asyncio_serializing_clients_cross_both_ways(
    cluster: tuple[str, str], writer: str, reader: str
) -> None:
    bs, url = cluster
    topic = f"aio-serdes-{uuid.uuid4().hex[:8]}"
    readings = [{"sensor": f"s{i}", "value": i / 2} for i in range(3)]
    offsets = asyncio.run(_produce_async(writer, bs, url, topic, readings))
    assert offsets == [0, 1, 2]
    got = asyncio.run(_consume_async(reader, bs, url, topic, 3))
    assert got == [(i, r["sensor"], r) for i, r in enumerate(readings)]


def test_blocking_serializing_clients_take_builders(cluster: tuple[str, str]) -> None:
    """``SerializingProducer`` / ``DeserializingConsumer`` with ``.builder``
    settings on the drop-in; confluent-kafka's consumer reads the same."""
    bs, url = cluster
    topic = f"serdes-builder-{uuid.uuid4().hex[:8]}"
    ck = importlib.import_module(APIS[1])
    avro = importlib.import_module(APIS[1] + ".schema_registry.avro")
    builder = (
        avro.AvroSerializerBuilder().set_schema_registry_config({"url": url}).set_schema(SCHEMA)
    )
    producer = ck.SerializingProducer(
        {"bootstrap.servers": bs, "value.serializer.builder": builder}
    )
    for i in range(2):
        producer.produce(topic, value={"sensor": "x", "value": float(i)}, partition=0)
    producer.flush(30)
    producer.close()
    got = []
    for api in APIS:
        c = importlib.import_module(api)
        avro_api = importlib.import_module(api + ".schema_registry.avro")
        registry = importlib.import_module(api + ".schema_registry")
        consumer = c.DeserializingConsumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"g-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest",
                "value.deserializer": avro_api.AvroDeserializer(
                    registry.SchemaRegistryClient({"url": url})
                ),
            }
        )
        consumer.subscribe([topic])
        values = []
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is not None:
                values.append(msg.value())
            if len(values) == 2:
                break
        consumer.close()
        got.append(values)
    assert got[0] == got[1] == [{"sensor": "x", "value": 0.0}, {"sensor": "x", "value": 1.0}]
