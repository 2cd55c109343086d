"""What routing one plain producer's Produce request costs the proxy's own code
(issue #66), in process, without sockets: the CPU of the path a coalesced
request takes, from its frame to its answer's bytes.

Each request is what librdkafka sends by default: one lz4 batch of ``--batch``
records of 100 random bytes for each of ``--partitions`` partitions (12), the
1,000 keys placed by its CRC32 partitioner, so that the proxy's murmur2 moves
nearly every record. Per request: the frame decoded (as the proxy's filters
see it), checked and its records placed as key routing's filter does
(``KeyRouting._place``: the codec's C pass), its pieces
queued in the coalescing accumulators, the upstream requests built (batches
merged and compressed) and encoded, their answers read on bytes, the client's
answer written. The upstream "broker" is a stand-in that answers every
partition at once; making its answers is not counted. Printed per setup
(``--brokers``: the partitions' leaders spread over 1 or 3 brokers): thread
CPU per request (median of ``--requests``) and per 100,000 records.

``--producers idempotent``: the same requests from one idempotent producer (a
producer id, each partition's batches numbered on from the last), through key
routing's idempotent plan as its filter runs it under the producer's lock
(``prepare_idempotent``, ``commit_idempotent``: placed, built, numbered), each
round's upstream requests encoded, their answers read and settled, the
client's answer written; without a journal, the producer born through the
proxy (no leader asked), no trio scheduling (the plain path's coalescing
tasks are counted, this path's waiting is not).

A figure, not a test. Run from a checkout whose venv has the C accelerator
built: ``python bench/proxy_route_cpu.py`` (``--smoke``: a check that it runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
import zlib
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from trafka.codec import ApiKey, protocol
from trafka.codec.compression import Compression
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.produce_response import read_produce_response
from trafka.codec.records import encode_batch, set_base_sequence
from trafka.proxy.keyrouting import KeyRouting, coalesce
from trafka.proxy.keyrouting.idempotent_plan import (
    commit_idempotent,
    idempotent_answer_bytes,
    prepare_idempotent,
    read_batches,
    upstream_body,
)
from trafka.proxy.keyrouting.plan import cheap_to_plan
from trafka.proxy.keyrouting.sequences import Sequences
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics

VERSION = 9
PID, EPOCH = 4242, 0


def frames(
    partitions: int, batch: int, n: int, seed: int = 1, idempotent: bool = False
) -> list[bytes]:
    """``n`` distinct Produce frames (without size prefix) as librdkafka sends
    them (``idempotent``: of one producer, numbered from 0 on, request after
    request)."""
    rng = random.Random(seed)
    keys = [b"key-%d" % i for i in range(1000)]
    by_crc: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for k in keys:
        by_crc[(zlib.crc32(k) & 0xFFFFFFFF) % partitions].append(k)
    out = []
    for _ in range(n):
        data = []
        for p in range(partitions):
            rows = [
                (1_700_000_000_000 + i, rng.choice(by_crc[p] or keys), rng.randbytes(100), [])
                for i in range(batch)
            ]
            if idempotent:
                records = encode_batch(
                    rows,
                    compression=Compression.LZ4,
                    producer_id=PID,
                    producer_epoch=EPOCH,
                    base_sequence=0,
                )
            else:
                records = encode_batch(rows, compression=Compression.LZ4)
            data.append(pm.ProduceRequest.PartitionProduceData(index=p, records=records))
        body = pm.ProduceRequest(
            acks=1,
            timeout_ms=30_000,
            topic_data=[pm.ProduceRequest.TopicProduceData(name="t", partition_data=data)],
        )
        header = RequestHeader(
            request_api_key=ApiKey.PRODUCE,
            request_api_version=VERSION,
            correlation_id=7,
            client_id="rdkafka",
        )
        out.append(protocol.encode_request(header, body)[4:])
    return out


def measure(partitions: int, brokers: int, batch: int, requests: int) -> list[int]:
    """Thread CPU (ns) of each request's routing, the stand-in broker's not counted."""
    topics = Topics({"t": partitions}, {("t", p): p % brokers for p in range(partitions)})
    sample = frames(partitions, batch, 8)
    spent = [0]  # ns the stand-in broker took, to leave out

    def answer_of(body: Any) -> Any:
        r = pm.ProduceResponse
        return r(
            responses=[
                r.TopicProduceResponse(
                    name=t.name,
                    partition_responses=[
                        r.PartitionProduceResponse(index=p.index, base_offset=1000)
                        for p in t.partition_data
                    ],
                )
                for t in body.topic_data
            ]
        )

    class Pool:
        async def send(self, node: int, client_id: str, key: int, version: int, body: Any) -> bytes:
            header = RequestHeader(
                request_api_key=key,
                request_api_version=version,
                correlation_id=1,
                client_id=client_id,
            )
            protocol.encode_request(header, body)  # as the pool's connection does
            started = time.thread_time_ns()
            frame = protocol.encode_response(1, key, version, answer_of(body))[4:]
            spent[0] += time.thread_time_ns() - started
            return frame

    async def settle(
        pool: Any, client_id: Any, version: int, leader: int, part: Any, frame: Any, deadline: float
    ) -> Any:
        return read_produce_response(frame, version)

    # The filter itself places the records (KeyRouting._place), as the proxy
    # does once a request is read: only its topics are needed of the proxy.
    routing = KeyRouting("murmur2")
    routing._services = SimpleNamespace(topics=topics)  # type: ignore[assignment]
    routing._eos = SimpleNamespace()  # type: ignore[assignment]

    async def main() -> list[int]:
        out = []
        async with trio.open_nursery() as nursery:
            coalescer = coalesce.Coalescer(nursery, settle, RouteStats())
            pool: Any = Pool()
            for i in range(requests):
                started, spent[0] = time.thread_time_ns(), 0
                _, body = protocol.decode_request(sample[i % len(sample)], allow_trailing=True)
                assert cheap_to_plan(body, hash_name="murmur2", origin_headers=False)
                placed = routing._place(body, routing.hash_name)
                assert placed is not None, "the C pass is not built or declined"
                deadline = trio.current_time() + 30
                share = coalescer.add(
                    pool, topics.leader, "rdkafka", VERSION, 1, 30_000, deadline, placed
                )
                await coalesce.answer(share, body, VERSION, "rdkafka", None)
                await trio.testing.wait_all_tasks_blocked()
                out.append(time.thread_time_ns() - started - spent[0])
        return out

    return trio.run(main)


def measure_idempotent(partitions: int, brokers: int, batch: int, requests: int) -> list[int]:
    """:func:`measure` of an idempotent producer's requests (see the module's doc)."""
    topics = Topics({"t": partitions}, {("t", p): p % brokers for p in range(partitions)})
    sample = [
        protocol.decode_request(f, allow_trailing=True)
        for f in frames(partitions, batch, 8, idempotent=True)
    ]
    numbered = []  # each request's frame, its batches numbered on (not counted)
    for i in range(requests):
        header, body = sample[i % len(sample)]
        body = dataclasses.replace(
            body,
            topic_data=[
                dataclasses.replace(
                    t,
                    partition_data=[
                        dataclasses.replace(p, records=set_base_sequence(p.records, i * batch))
                        for p in t.partition_data
                    ],
                )
                for t in body.topic_data
            ],
        )
        numbered.append(protocol.encode_request(header, body)[4:])
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    stats = RouteStats()
    out = []
    offset = 0
    for frame in numbered:
        started, spent = time.thread_time_ns(), 0
        _, body = protocol.decode_request(frame, allow_trailing=True)
        headers = read_batches(body)  # the filter's reading, once for both
        assert headers.producer == (PID, EPOCH)
        session = seqs.session(PID, EPOCH, 0)
        assert session is not None
        prepared = prepare_idempotent(
            body, session=session, topics=topics, hash_name="murmur2", stats=stats, headers=headers
        )
        assert prepared is not None and not prepared.refused
        plan = commit_idempotent(body, prepared, session)
        template = None
        for batches in plan.rounds:
            by_leader: dict[int, list[Any]] = {}
            for u in batches:
                by_leader.setdefault(topics.leader(u.topic, u.partition), []).append(u)
            for _, written in sorted(by_leader.items()):
                part = upstream_body(body, written)
                header = RequestHeader(
                    request_api_key=ApiKey.PRODUCE,
                    request_api_version=VERSION,
                    correlation_id=1,
                    client_id="rdkafka",
                )
                protocol.encode_request(header, part)  # as the pool's connection does
                for u in written:
                    session.sent(u, 0)
                # The stand-in broker's answer, not counted.
                made = time.thread_time_ns()
                r = pm.ProduceResponse
                answer = r(
                    responses=[
                        r.TopicProduceResponse(
                            name=t.name,
                            partition_responses=[
                                r.PartitionProduceResponse(index=p.index, base_offset=offset)
                                for p in t.partition_data
                            ],
                        )
                        for t in part.topic_data
                    ]
                )
                reply = protocol.encode_response(1, ApiKey.PRODUCE, VERSION, answer)[4:]
                spent += time.thread_time_ns() - made
                read = read_produce_response(reply, VERSION)
                template = template or read
                for u in written:
                    got = read.partitions[(u.topic, u.partition)]
                    session.settle(
                        u,
                        ErrorCode(got.error_code),
                        base_offset=got.base_offset,
                        log_append_time_ms=got.log_append_time_ms,
                        log_start_offset=got.log_start_offset,
                    )
                    offset += u.count
        idempotent_answer_bytes(plan, template, VERSION, "rdkafka")
        out.append(time.thread_time_ns() - started - spent)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--batch", default="10,100", help="records per batch, comma-separated")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--brokers", default="1,3", help="comma-separated")
    parser.add_argument("--producers", default="plain", help="plain, idempotent, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="a check that it runs: 5 requests")
    args = parser.parse_args()
    if args.smoke:
        args.requests = 5
    for producer in args.producers.split(","):
        run = {"plain": measure, "idempotent": measure_idempotent}[producer]
        for batch in (int(b) for b in args.batch.split(",")):
            for brokers in (int(b) for b in args.brokers.split(",")):
                cpu = run(args.partitions, brokers, batch, args.requests)
                median = statistics.median(cpu) / 1000
                records = args.partitions * batch
                print(
                    f"{producer:10} {args.partitions} x {batch} records, {brokers} broker(s): "
                    f"{median:8.1f} us per request, "
                    f"{median * 100_000 / records / 1e6:.3f} s per 100,000 records"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
