"""The trafka demo (``make demo``, ``trafka demo``, ``python -m trafka.tools.demo``).

First the whole path (:mod:`trafka.tools.whole_path`): services producing keyed
orders through the proxy into brokerlite with two clients, a consumer group,
the web console showing its lag, and PySpark reading the topic, each step
checked. Then the SDK's order pipeline (:mod:`trafka.tools.pipeline`) on an
embedded brokerlite with the trafka producer, a two-member consumer group and a
kafka-python reader, each step checked. Then one schema-framed topic
(:mod:`trafka.tools.schemas_demo`): Avro values written by the SDK's serializer
through brokerlite's schema registry and decoded by a consumer. Then what a client and a broker say to
each other, without a network (``--no-broker`` shows only this part):

1. a producer's request stream: a Metadata request (v12) and a Produce request
   (v9, flexible) carrying an lz4-compressed record batch of three keyed
   records with headers, each framed as on the wire;
2. that stream decoded back by ``trafka decode``'s logic, printed as JSON;
3. the broker's matching responses, encoded, decoded and compared with what was
   sent (a round trip).

The wire tour is deterministic: the timestamps are fixed, because the codec
reads no clock. The demo exits with 1 if any check of the pipeline fails or a
round trip does not give back what was encoded, which makes it a smoke test too.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import click
import trio

from trafka.codec import ApiKey, protocol
from trafka.codec.compression import Compression
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.records import decode_records, encode_batch
from trafka.tools.decode import decode_stream, format_json
from trafka.tools.pipeline import main_job
from trafka.tools.schemas_demo import schema_step

__all__ = ["build_request_stream", "build_responses", "command", "main", "run"]

TOPIC = "orders"
TOPIC_ID = uuid.UUID("6f1c2e4a-8b0d-4c3e-9a57-0d1e2f3a4b5c")
CLIENT_ID = "trafka-demo"
BASE_TIMESTAMP = 1_700_000_000_000  # ms; fixed so the output never changes

RECORDS: list[tuple[int, bytes, bytes, list[tuple[str, bytes | None]]]] = [
    (BASE_TIMESTAMP, b"customer-17", b'{"item": "tea", "qty": 2}', [("source", b"web")]),
    (BASE_TIMESTAMP + 5, b"customer-42", b'{"item": "cups", "qty": 6}', [("source", b"app")]),
    (
        BASE_TIMESTAMP + 9,
        b"customer-17",
        b'{"item": "kettle", "qty": 1}',
        [("source", b"web"), ("trace-id", None)],
    ),
]

METADATA_VERSION = 12
PRODUCE_VERSION = 9


def _header(key: int, version: int, correlation_id: int) -> protocol.RequestHeader:
    return protocol.RequestHeader(
        request_api_key=key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=CLIENT_ID,
    )


def build_request_stream() -> bytes:
    """A producer's first two requests, size-prefixed and concatenated as on the wire."""
    metadata_request = metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(name=TOPIC)],
        allow_auto_topic_creation=False,
    )
    batch = encode_batch(RECORDS, compression=Compression.LZ4)
    produce_request = produce.ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=0, records=batch)
                ],
            )
        ],
    )
    frames: list[bytes] = [
        protocol.encode_request(_header(ApiKey.METADATA, METADATA_VERSION, 1), metadata_request),
        protocol.encode_request(_header(ApiKey.PRODUCE, PRODUCE_VERSION, 2), produce_request),
    ]
    return b"".join(frames)


def build_responses() -> list[tuple[int, int, int, Any]]:
    """The broker's answers: ``(correlation_id, api_key, api_version, body)``."""
    meta = metadata.MetadataResponse
    metadata_response = meta(
        brokers=[meta.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092)],
        cluster_id="trafka-demo-cluster",
        controller_id=1,
        topics=[
            meta.MetadataResponseTopic(
                name=TOPIC,
                topic_id=TOPIC_ID,
                partitions=[
                    meta.MetadataResponsePartition(
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=[1],
                        isr_nodes=[1],
                    )
                ],
            )
        ],
    )
    prod = produce.ProduceResponse
    produce_response = prod(
        responses=[
            prod.TopicProduceResponse(
                name=TOPIC,
                partition_responses=[
                    prod.PartitionProduceResponse(index=0, base_offset=0, log_start_offset=0)
                ],
            )
        ],
    )
    return [
        (1, 3, METADATA_VERSION, metadata_response),
        (2, 0, PRODUCE_VERSION, produce_response),
    ]


def _record_line(record: Any) -> str:
    headers = ", ".join(f"{k}={'null' if v is None else v.decode()}" for k, v in record.headers)
    key = record.key.decode() if record.key is not None else "null"
    value = record.value.decode() if record.value is not None else "null"
    return f"  offset {record.offset}  key {key}  value {value}  headers [{headers}]"


def _summary(body: Any) -> str:
    if isinstance(body, metadata.MetadataResponse):
        broker = body.brokers[0]
        topic = body.topics[0]
        part = topic.partitions[0]
        return (
            f"cluster {body.cluster_id}, broker {broker.node_id} at {broker.host}:{broker.port}, "
            f"topic {topic.name} ({topic.topic_id}) partition {part.partition_index} "
            f"led by broker {part.leader_id}"
        )
    topic_response = body.responses[0]
    part = topic_response.partition_responses[0]
    return (
        f"{topic_response.name}-{part.index}: {ErrorCode(part.error_code).name}, "
        f"records stored from offset {part.base_offset}"
    )


def run(
    echo: Callable[[str], None] = print,
    *,
    broker: bool = True,
    whole: bool = True,
    cluster: bool = False,
) -> int:
    """Run the demo, writing its lines with ``echo``; return the exit status.

    With ``whole`` (the default), the whole path first: brokerlite (a 3-node
    cluster with ``cluster``), the proxy, services producing through it, a
    consumer group, the console and PySpark (see :mod:`trafka.tools.whole_path`).
    With ``broker`` (the default), then the SDK's order pipeline on an embedded
    brokerlite (see :mod:`trafka.tools.pipeline`). Then a tour of the wire: the
    frames a client sends, decoded as ``trafka decode`` prints them.
    """
    ok = True
    if broker and whole:
        from trafka.tools.whole_path import whole_path

        shape = "a 3-node brokerlite cluster" if cluster else "the embedded broker"
        echo(f"=== The whole path: services, the proxy, {shape}, the console, Spark")
        ok = trio.run(partial(whole_path, echo, cluster=cluster))
        echo("")
    if broker:
        echo("=== The SDK: an order pipeline on the embedded broker (brokerlite)")
        ok = trio.run(main_job, echo) and ok
        echo("")
        echo("=== Schemas: an Avro topic through brokerlite's schema registry")
        ok = schema_step(echo) and ok
        echo("")
        echo("=== On the wire: what a client sends, decoded")

    def show(obj: Any) -> None:
        echo(format_json(obj, width=120))

    stream = build_request_stream()
    echo(f"== 1. A client's request stream: {len(stream)} bytes, two frames")
    echo(stream[:32].hex(" ") + " ...")

    echo("")
    echo("== 2. Decoded by `trafka decode` (one JSON object per frame)")
    decoded = list(decode_stream(stream))
    for result in decoded:
        show(result)
        ok = ok and "error" not in result

    reader = FrameReader()
    reader.feed(stream)
    _, produce_request = protocol.decode_request(list(reader)[1])
    batch = produce_request.topic_data[0].partition_data[0].records
    echo(f"The lz4 batch ({len(batch)} bytes) holds:")
    for record in decode_records(batch):
        echo(_record_line(record))

    echo("")
    echo("== 3. The broker's responses, encoded and decoded back")
    for correlation_id, key, version, body in build_responses():
        frame = protocol.encode_response(correlation_id, key, version, body)
        got_header, got_body = protocol.decode_response(frame[4:], key, version)
        same = got_header.correlation_id == correlation_id and got_body == body
        ok = ok and same
        name = f"{protocol.api(key).name}Response v{version}"
        if same:
            echo(f"{name}, {len(frame)} bytes, round trip ok:")
            echo("  " + _summary(got_body))
        else:
            echo(f"{name}, {len(frame)} bytes, round trip FAILED: decoded {got_body!r}")
    echo("")
    echo("demo: ok" if ok else "demo: FAILED")
    return 0 if ok else 1


@click.command(name="demo")
@click.option("--no-broker", is_flag=True, help="Only the tour of the wire, without any broker.")
@click.option("--no-whole-path", is_flag=True, help="Skip the proxy, console and Spark part.")
@click.option(
    "--cluster", is_flag=True, help="Run the whole path on a 3-node cluster (needs ZooKeeper)."
)
def command(no_broker: bool, no_whole_path: bool, cluster: bool) -> None:
    """Run the whole path (services, the proxy, brokerlite, the console, Spark), the SDK's
    order pipeline, then decode what crosses the wire."""
    sys.exit(run(click.echo, broker=not no_broker, whole=not no_whole_path, cluster=cluster))


def main() -> None:
    """Entry point of ``python -m trafka.tools.demo`` (``--cluster``: the whole path
    on three nodes)."""
    sys.exit(run(cluster="--cluster" in sys.argv[1:]))


if __name__ == "__main__":
    main()
