"""Schema serdes benchmark: trafka.sdk.schemas against confluent-kafka's
serializers on the same records (``make bench``; issue #63's "Measured").

One brokerlite with its schema registry; for Avro, Protobuf and JSON Schema,
each library serializes the same ``--records`` values (a record of five fields:
a string, two ints, a double, an array of strings) under its own topic, then
deserializes the other's output (checked equal to the input, so the figures are
for interoperable bytes). Throughput is records per second, the best of
``--repeat`` runs; the ratio is trafka / confluent-kafka (above 1: trafka is
faster). Then the registry requests trafka made for all of it: one per schema
is the goal (registration when writing, a fetch by id when reading, with a
fresh client).

This is a measurement, not a test: nothing here fails on a slow result.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient as CkRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as CkAvroDe
from confluent_kafka.schema_registry.avro import AvroSerializer as CkAvroSer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as CkJSONDe
from confluent_kafka.schema_registry.json_schema import JSONSerializer as CkJSONSer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer as CkProtoDe
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as CkProtoSer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from trafka.brokerlite.server import broker_in_thread
from trafka.sdk import schemas as ours

AVRO = {
    "type": "record",
    "name": "Reading",
    "namespace": "bench",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "zone", "type": "int"},
        {"name": "value", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
JSON_SCHEMA = {
    "type": "object",
    "title": "Reading",
    "properties": {
        "sensor": {"type": "string"},
        "seq": {"type": "integer"},
        "zone": {"type": "integer"},
        "value": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["sensor", "seq"],
}


def _reading_class() -> Any:
    f = descriptor_pb2.FileDescriptorProto(
        name="bench_reading.proto", package="bench", syntax="proto3"
    )
    m = f.message_type.add(name="Reading")
    for number, (name, kind, label) in enumerate(
        [("sensor", 9, 1), ("seq", 3, 1), ("zone", 5, 1), ("value", 1, 1), ("tags", 9, 3)], 1
    ):
        m.field.add(name=name, number=number, type=kind, label=label, json_name=name)
    pool = descriptor_pool.Default()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Reading"))


def best_rate(fn: Callable[[Any, Any], Any], items: list[Any], ctx: Any, repeat: int) -> float:
    """Records per second of ``fn(item, ctx)`` over ``items``, the best of ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for item in items:
            fn(item, ctx)
        best = min(best, time.perf_counter() - start)
    return len(items) / best


def run_format(
    name: str, values: list[Any], sers: dict[str, Any], des: dict[str, Any], repeat: int
) -> None:
    rates: dict[tuple[str, str], float] = {}
    framed: dict[str, list[bytes]] = {}
    for lib, ser in sers.items():
        ctx = SerializationContext(f"bench-{name}-{lib}", MessageField.VALUE)
        framed[lib] = [ser(v, ctx) for v in values]  # registers, and checks it works
        rates[(lib, "serialize")] = best_rate(ser, values, ctx, repeat)
    for lib, de in des.items():
        other = "confluent-kafka" if lib == "trafka" else "trafka"
        ctx = SerializationContext(f"bench-{name}-{other}", MessageField.VALUE)
        if [de(b, ctx) for b in framed[other]] != values:
            sys.exit(f"{name}: {lib} did not read back what {other} wrote")
        rates[(lib, "deserialize")] = best_rate(de, framed[other], ctx, repeat)
    for op in ("serialize", "deserialize"):
        t, c = rates[("trafka", op)], rates[("confluent-kafka", op)]
        print(
            f"  {name:<12} {op:<12} trafka {t:>10,.0f}/s  confluent-kafka {c:>10,.0f}/s  {t / c:5.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes (tests/bench/test_bench_smoke.py)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.records, args.repeat = 200, 1
    n = args.records
    dicts = [
        {
            "sensor": f"s-{i % 50}",
            "seq": i,
            "zone": i % 7,
            "value": i / 3,
            "tags": ["a", "b"][: i % 3],
        }
        for i in range(n)
    ]
    Reading = _reading_class()
    with (
        tempfile.TemporaryDirectory() as data,
        broker_in_thread(
            port=0, host="127.0.0.1", data_dir=data, schema_registry_listen="127.0.0.1:0"
        ) as running,
    ):
        assert running.schema_registry_address is not None
        host, port = running.schema_registry_address
        url = f"http://{host}:{port}"
        ck = CkRegistry({"url": url})
        print(f"schema serdes, {n:,} records, best of {args.repeat} (trafka / confluent-kafka)")
        with (
            ours.SchemaRegistryClient({"url": url}) as writing,
            ours.SchemaRegistryClient({"url": url}) as reading,
        ):
            avro = json.dumps(AVRO)
            run_format(
                "avro",
                dicts,
                {
                    "trafka": ours.AvroSerializer(writing, avro),
                    "confluent-kafka": CkAvroSer(ck, avro),
                },
                {"trafka": ours.AvroDeserializer(reading), "confluent-kafka": CkAvroDe(ck)},
                args.repeat,
            )
            js = json.dumps(JSON_SCHEMA)
            run_format(
                "json-schema",
                dicts,
                {"trafka": ours.JSONSerializer(js, writing), "confluent-kafka": CkJSONSer(js, ck)},
                {
                    "trafka": ours.JSONDeserializer(None, schema_registry_client=reading),
                    "confluent-kafka": CkJSONDe(js, schema_registry_client=ck),
                },
                args.repeat,
            )
            messages = [Reading(**d) for d in dicts]
            pconf = {"use.deprecated.format": False}
            run_format(
                "protobuf",
                messages,
                {
                    "trafka": ours.ProtobufSerializer(Reading, writing),
                    "confluent-kafka": CkProtoSer(Reading, ck, pconf),
                },
                {
                    "trafka": ours.ProtobufDeserializer(Reading),
                    "confluent-kafka": CkProtoDe(Reading, pconf),
                },
                args.repeat,
            )
            print(
                f"  registry requests by trafka for {3 * n * (args.repeat + 1):,} serialized and "
                f"{2 * n * (args.repeat + 1):,} deserialized records: {writing.requests} writing "
                f"(3 schemas), {reading.requests} reading (2 schemas by id; Protobuf's reader has its class)"
            )


if __name__ == "__main__":
    main()
