"""What the tenants filter (``trafka.proxy.tenants``) costs per request, in
the proxy's process: a Produce request (``--partitions`` batches of
``--records`` records of ``--size`` bytes, one topic) and its answer, and
Fetch answers of the same batches by name (v12) and by topic id (v13+), run
through a filter chain holding only the tenants filter (without quotas, and
with quotas measured and checked on every request, never over), against the
same chain without it (the frames pass untouched). CPU time per request and per MB of records, median of
``--rounds`` rounds of ``--requests`` requests each. Not timed tests: figures
for docs/proxy.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from typing import Any

import trio

from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.records import encode_batch
from trafka.proxy.filters import FilterContext, Route, Session, run_request, run_response
from trafka.proxy.tenants import Tenants


def _frames(args: argparse.Namespace, topic: str) -> dict[str, Any]:
    values = [os.urandom(args.size) for _ in range(args.records)]
    batch = encode_batch([(0, b"k%d" % i, v, []) for i, v in enumerate(values)])
    p = produce.ProduceRequest
    request = p(
        transactional_id=None, acks=-1, timeout_ms=30_000,
        topic_data=[p.TopicProduceData(name=topic, partition_data=[
            p.PartitionProduceData(index=i, records=batch) for i in range(args.partitions)])],
    )  # fmt: skip
    header = RequestHeader(
        request_api_key=ApiKey.PRODUCE, request_api_version=9, correlation_id=1, client_id="b"
    )
    r = produce.ProduceResponse
    answer = r(
        responses=[
            r.TopicProduceResponse(
                name="acme." + topic,
                partition_responses=[
                    r.PartitionProduceResponse(index=i, base_offset=0)
                    for i in range(args.partitions)
                ],
            )
        ]
    )
    f = fetch.FetchResponse
    fetched = {
        version: f(responses=[f.FetchableTopicResponse(
            topic="acme." + topic if version < 13 else "", topic_id=uuid.uuid4(),
            partitions=[
                f.PartitionData(partition_index=i, high_watermark=1, last_stable_offset=1,
                                log_start_offset=0, records=batch)
                for i in range(args.partitions)])])
        for version in (12, 13)
    }  # fmt: skip
    return {
        "request": protocol.encode_request(header, request)[4:],
        "answer": protocol.encode_response(1, ApiKey.PRODUCE, 9, answer)[4:],
        12: protocol.encode_response(1, ApiKey.FETCH, 12, fetched[12])[4:],
        13: protocol.encode_response(1, ApiKey.FETCH, 13, fetched[13])[4:],
    }


def _ctx(key: int, version: int) -> FilterContext:
    session = Session(authenticated=True, principal="User:alice")
    return FilterContext(key, version, 1, "b", ("127.0.0.1", 1), -1, session=session)


async def _produce(filters: Any, frames: dict[Any, bytes], n: int) -> float:
    chain = Route.of(filters, ApiKey.PRODUCE, 9).chain
    start = time.process_time()
    for _ in range(n):
        ctx = _ctx(ApiKey.PRODUCE, 9)
        _, _, _, reached = await run_request(chain, ctx, frames["request"])
        run_response(chain[:reached], ctx, frames["answer"])
    return (time.process_time() - start) / n


async def _fetch(filters: Any, frames: dict[Any, bytes], n: int, version: int) -> float:
    # The request is small; the answer carries the records.
    chain = Route.of(filters, ApiKey.FETCH, version).chain
    start = time.process_time()
    for _ in range(n):
        ctx = _ctx(ApiKey.FETCH, version)
        if filters:
            ctx.notes["trafka.proxy.tenants:tenant"] = filters[0].by_principal["User:alice"]
        run_response(chain, ctx, frames[version])
    return (time.process_time() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--records", type=int, default=160)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tenants = Tenants()
    tenants.configure(
        {"tenants": [{"name": "acme", "prefix": "acme.", "principals": ["User:alice"]}]}
    )
    # Quotas measured and checked on every request, never over (nothing waits).
    quotas = Tenants()
    quotas.configure({"tenants": [{"name": "acme", "prefix": "acme.", "principals": ["User:alice"],
                                   "producer_byte_rate": 1e15, "consumer_byte_rate": 1e15}]})  # fmt: skip
    frames = _frames(args, "orders")
    mb = args.partitions * args.records * args.size / 1e6
    print(f"{args.partitions} batches of {args.records} records of {args.size} B ({mb:.3f} MB)")
    cases = (
        ("Produce v9 request + answer", lambda c: trio.run(_produce, c, frames, args.requests)),
        ("Fetch v12 answer (names)", lambda c: trio.run(_fetch, c, frames, args.requests, 12)),
        ("Fetch v13 answer (ids)", lambda c: trio.run(_fetch, c, frames, args.requests, 13)),
    )
    for case, run in cases:
        for name, chain in (("no filter", ()), ("tenants", (tenants,)), ("quotas", (quotas,))):
            per = statistics.median(run(chain) for _ in range(args.rounds))
            print(
                f"{case:>28}, {name:>9}: {per * 1e6:8.1f} us CPU, "
                f"{per / mb * 1e3:.3f} ms CPU per MB of records"
            )


if __name__ == "__main__":
    main()
