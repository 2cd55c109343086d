"""Leader moves and KIP-951 leader hints through the proxy, for the tests in
front of Apache Kafka (test_proxy_kafka_leader_moves.py) and brokerlite's
cluster (test_proxy_cluster.py)."""

from __future__ import annotations

from typing import Any

import anyio
import trio

from trafka.codec import ApiKey
from trafka.proxy.filters import Filter, FilterContext, ProxyServices
from trafka.sdk import TopicPartition, open_admin, open_consumer, open_producer

N = 20
# Far past the tests' deadlines: no periodic refresh comes to the rescue.
MAX_AGE_MS = 900_000


async def produce(servers: str, topic: str, values: list[bytes]) -> None:
    async with open_producer(bootstrap_servers=servers, acks="all") as producer:
        for value in values:
            await producer.send(topic, value, partition=0)
        await producer.flush()


async def read(consumer: Any, wanted: int, seconds: float) -> list[bytes]:
    got: list[bytes] = []
    with anyio.move_on_after(seconds):
        while len(got) < wanted:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(r.value for r in records)
    return got


async def move_leader(servers: str, tp: TopicPartition) -> tuple[int, int]:
    """The partition's leader moved to another of its replicas (that one put first,
    KIP-455, then the preferred replica elected, KIP-460): (old leader, new leader)."""
    async with open_admin(bootstrap_servers=servers) as admin:
        info = (await admin.describe_topics([tp.topic]))[tp.topic].partitions[0]
        old, replicas = info.leader, list(info.replicas)
        first, *rest = [n for n in replicas if n != old]
        target = [first, old, *rest]
        assert await admin.alter_partition_reassignments({tp: target}) == {tp: None}
        while await admin.list_partition_reassignments([tp]):
            await anyio.sleep(0.2)
        while (await admin.describe_topics([tp.topic]))[tp.topic].partitions[0].replicas != tuple(
            target
        ):
            await anyio.sleep(0.2)
        # Elected by the call, or already by the move (the wait below says which leads).
        outcome = (await admin.elect_leaders([tp]))[tp]
        assert outcome is None or outcome.code.name == "ELECTION_NOT_NEEDED", outcome
        while (await admin.describe_topics([tp.topic]))[tp.topic].partitions[0].leader != target[0]:
            await anyio.sleep(0.2)
    return old, target[0]


class MetadataGate(Filter):
    """Holds every Metadata request once shut (each on its own client connection,
    ``on_request`` awaiting the gate), and notes each Fetch and Produce
    request's listener and the brokers each of their answers names, as the
    client receives it."""

    api_keys = frozenset({ApiKey.METADATA, ApiKey.FETCH, ApiKey.PRODUCE})

    def attach(self, services: ProxyServices) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.gate = trio.Event()
        self.shut = False
        self.held = 0
        self.fetch_versions: set[int] = set()
        self.fetched_on: list[int] = []
        self.named: list[tuple[int, str, int]] = []
        self.produce_versions: set[int] = set()
        self.produced_on: list[int] = []

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        if ctx.api_key == ApiKey.METADATA and self.shut:
            self.held += 1
            await self.gate.wait()
        elif ctx.api_key == ApiKey.FETCH and self.shut:
            self.fetch_versions.add(ctx.api_version)
            self.fetched_on.append(ctx.node_id)
        elif ctx.api_key == ApiKey.PRODUCE and self.shut:
            self.produce_versions.add(ctx.api_version)
            self.produced_on.append(ctx.node_id)
        return body

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        if (ctx.api_key, ctx.api_version >= 16) == (ApiKey.FETCH, True) or (
            ctx.api_key == ApiKey.PRODUCE and ctx.api_version >= 10 and body is not None
        ):
            self.named.extend((e.node_id, e.host, e.port) for e in body.node_endpoints)
        return body

    def open(self) -> None:
        trio.from_thread.run_sync(self.gate.set, trio_token=self.token)


async def follow_the_hint(servers: str, px: Any, gate: MetadataGate, topic: str) -> int:
    """Reads N records, shuts the gate, moves the leader, writes N more and reads
    them through the proxy: the new leader's address can only come from the
    Fetch answer. Returns the new leader."""
    tp = TopicPartition(topic, 0)
    before = [b"before-%d" % i for i in range(N)]
    after = [b"after-%d" % i for i in range(N)]
    await produce(servers, topic, before)
    async with open_consumer(
        bootstrap_servers=px.bootstrap_servers,
        metadata_max_age_ms=MAX_AGE_MS,
        enable_auto_commit=False,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert await read(consumer, N, 60) == before
        gate.shut = True
        try:
            with anyio.fail_after(120):
                old, new = await move_leader(servers, tp)
                await produce(servers, topic, after)
            got = await read(consumer, N, 60)
        finally:
            await anyio.to_thread.run_sync(gate.open)
    assert got == after, f"read {len(got)} of {N} after the leader moved from {old} to {new}"
    return new
