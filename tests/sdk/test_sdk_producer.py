"""Producer driver against the scripted fake broker (both anyio backends)."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest
from sdk_fakebroker import FakeBroker

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.records import read_batch_header
from trafka.sdk.accumulator import RECORD_OVERHEAD
from trafka.sdk.errors import (
    ClientClosedError,
    ConfigError,
    KafkaConnectionError,
    SerializationError,
)
from trafka.sdk.partitioners import KEY_HASHES, murmur2_partition
from trafka.sdk.producer import open_producer

pytestmark = pytest.mark.anyio


async def test_send_and_wait_round_trip(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, linger_ms=0) as p:
            md = await p.send_and_wait(
                "t", b"v1", key=b"k1", headers=[("h", "x")], timestamp_ms=1234
            )
            assert md.topic == "t" and md.partition == murmur2_partition(b"k1", 3)
            assert md.offset == 0 and md.timestamp == 1234
            md2 = await p.send_and_wait("t", b"v2", key=b"k1")
            assert md2.offset == 1 and md2.partition == md.partition
    recs = fake_broker.records("t", md.partition)
    assert [(r.key, r.value) for r in recs] == [(b"k1", b"v1"), (b"k1", b"v2")]
    assert recs[0].headers == (("h", b"x"),) and recs[0].timestamp == 1234
    # idempotent by default: the batch carries the producer id
    assert read_batch_header(fake_broker.logs[("t", md.partition)][0]).producer_id == 1000


async def test_many_sends_batched_and_flushed_on_exit(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, linger_ms=1000, value_serializer="str"
        ) as p:
            futures = [await p.send("one", f"m{i}") for i in range(500)]
            assert not futures[0].done()
        offsets = [(await f).offset for f in futures]
    assert offsets == list(range(500))
    produce_requests = [r for r in fake_broker.requests if r[0] == 0]
    assert len(produce_requests) < 50  # batched, not one request per record
    assert [r.value for r in fake_broker.records("one", 0)][:3] == [b"m0", b"m1", b"m2"]


async def test_flush_ignores_linger(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, linger_ms=60_000) as p:
            f = await p.send("one", b"x")
            await p.flush()
            assert f.done() and f.result().offset == 0


async def test_acks_zero(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, acks=0, linger_ms=0) as p:
            md = await p.send_and_wait("one", b"x")
            assert md.offset == -1
    assert [r.value for r in fake_broker.records("one", 0)] == [b"x"]


async def test_json_serializer_and_sticky_null_keys(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, value_serializer="json", key_serializer="str"
        ) as p:
            futures = [await p.send("t", {"i": i}) for i in range(10)]
            await p.flush()
            parts = {f.result().partition for f in futures}
            assert len(parts) == 1  # sticky: one batch, one partition
            with pytest.raises(SerializationError):
                await p.send("t", {1, 2})
            keyed = await p.send_and_wait("t", [1], key="k")
            assert keyed.partition == murmur2_partition(b"k", 3)
    assert fake_broker.records("t", keyed.partition)[-1].value == b"[1]"


async def test_retriable_error_retried(fake_broker: FakeBroker) -> None:
    from trafka.codec.messages import k00_produce as produce

    failures = {"left": 2}
    real = fake_broker.produce

    def flaky(header: object, body: produce.ProduceRequest) -> object:
        if failures["left"]:
            failures["left"] -= 1
            P = produce.ProduceResponse
            return P(
                responses=[
                    P.TopicProduceResponse(
                        name=t.name,
                        topic_id=t.topic_id,  # v13: by id (KIP-516)
                        partition_responses=[
                            P.PartitionProduceResponse(
                                index=x.index, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
                            )
                            for x in t.partition_data
                        ],
                    )
                    for t in body.topic_data
                ]
            )
        return real(header, body)

    fake_broker.handlers[0] = flaky
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, retry_backoff_ms=1, linger_ms=0
        ) as p:
            md = await p.send_and_wait("one", b"x")
    assert md.offset == 0 and failures["left"] == 0
    metadata_requests = [r for r in fake_broker.requests if r[0] == 3]
    assert len(metadata_requests) >= 2  # NOT_LEADER triggered refreshes


async def test_non_retriable_error_surfaces(fake_broker: FakeBroker) -> None:
    from trafka.codec.messages import k00_produce as produce

    P = produce.ProduceResponse

    def reject(header: object, body: produce.ProduceRequest) -> object:
        return P(
            responses=[
                P.TopicProduceResponse(
                    name=body.topic_data[0].name,
                    topic_id=body.topic_data[0].topic_id,  # v13: by id (KIP-516)
                    partition_responses=[
                        P.PartitionProduceResponse(index=0, error_code=ErrorCode.INVALID_RECORD)
                    ],
                )
            ]
        )

    fake_broker.handlers[0] = reject
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, linger_ms=0) as p:
            with pytest.raises(KafkaError) as info:
                await p.send_and_wait("one", b"x")
    assert info.value.code == ErrorCode.INVALID_RECORD


async def test_unknown_topic_and_partition(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, max_block_ms=300) as p:
            with pytest.raises(KafkaError) as info:
                await p.send("missing", b"x")
            assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            with pytest.raises(KafkaError):
                await p.send("one", b"x", partition=5)


@pytest.mark.parametrize(
    "code", [ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_TOPIC_EXCEPTION]
)
async def test_final_topic_errors_fail_at_once(fake_broker: FakeBroker, code: ErrorCode) -> None:
    """No waiting out max.block.ms for what no wait cures: the first metadata
    response after the send that names the error fails the send with it."""
    plain = fake_broker.metadata
    refused = {"secret"}

    def metadata(header: Any, body: Any) -> Any:
        response = plain(header, body)
        topics = [
            dataclasses.replace(t, error_code=code, partitions=[]) if t.name in refused else t
            for t in response.topics
        ]
        return dataclasses.replace(response, topics=topics)

    fake_broker.handlers[3] = metadata
    fake_broker.topics["secret"] = 1
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, max_block_ms=60_000) as p:
            began = anyio.current_time()
            with pytest.raises(KafkaError) as info:
                await p.send("secret", b"x")
            assert info.value.code == code
            assert anyio.current_time() - began < 30  # far from max.block.ms
            # A later answer without the error lets the topic through.
            refused.clear()
            md = await p.send_and_wait("secret", b"y")
            assert md.offset == 0


async def test_no_broker(anyio_backend: str) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
    # nothing listens on that port any more
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=1500) as p:
            with pytest.raises((KafkaError, KafkaConnectionError, TimeoutError)) as failed:
                await p.send("t", b"x")
    # The error says which address failed, and why.
    assert f"127.0.0.1:{port}" in str(failed.value)
    assert "refused" in str(failed.value).lower(), failed.value


async def test_closed_producer_refuses(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap) as p:
            pass
        with pytest.raises(ClientClosedError):
            await p.send("t", b"x")


async def test_error_in_body_not_wrapped_and_pending_records_fail(fake_broker: FakeBroker) -> None:
    holder = []
    with anyio.fail_after(10):
        with pytest.raises(ZeroDivisionError):
            async with open_producer(
                bootstrap_servers=fake_broker.bootstrap, linger_ms=60_000
            ) as p:
                holder.append(await p.send("one", b"x"))
                1 / 0  # noqa: B018
    assert isinstance(holder[0].exception(), ClientClosedError)


async def test_a_send_racing_close_is_refused_or_delivered_never_told_unsent_once_written(
    fake_broker: FakeBroker,
) -> None:
    # A task goes on sending while the block is left: the close's flush waits
    # for what is buffered, and a record appended behind it would leave after it
    # and be in flight when the producer closes. Every future it got must tell
    # the truth: delivered at its offset, or ClientClosedError and not written.
    sent: list[tuple[bytes, Any]] = []
    refused = []

    async def keep_sending(p: Any) -> None:
        try:
            while True:
                value = b"%d" % len(sent)
                sent.append((value, await p.send("one", value, partition=0)))
                await anyio.sleep(0)
        except ClientClosedError as exc:
            refused.append(exc)

    with anyio.fail_after(10):
        async with (
            anyio.create_task_group() as tg,
            open_producer(bootstrap_servers=fake_broker.bootstrap, linger_ms=0) as p,
        ):
            await p.partitions_for("one")
            tg.start_soon(keep_sending, p)
            while len(sent) < 20:
                await anyio.sleep(0)
    assert refused  # the sender was stopped by the close, not by anything else
    log = [r.value for r in fake_broker.records("one", 0)]
    acknowledged = 0
    for value, future in sent:
        assert future.done()
        error = future.exception()
        if error is None:
            assert log[future.result().offset] == value
            acknowledged += 1
        else:
            assert isinstance(error, ClientClosedError) and value not in log
    assert acknowledged == len(log)


async def test_cancellation_leaves_nothing_running(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(10):
        with anyio.move_on_after(0.2):
            async with open_producer(bootstrap_servers=fake_broker.bootstrap, linger_ms=0) as p:
                while True:
                    await p.send_and_wait("one", b"x")
        # every connection the producer opened is closed by the broker's view
        with anyio.fail_after(5):
            while fake_broker.open_connections:
                await anyio.sleep(0.01)


async def test_a_cancelled_send_that_buffered_its_record_still_returns_its_future(
    fake_broker: FakeBroker,
) -> None:
    # A send opening a new batch yields once after the append; a cancellation
    # there must not hide a record that will be sent anyway.
    with anyio.fail_after(10):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, linger_ms=0) as p:
            await p.partitions_for("one")
            futures = []
            with anyio.CancelScope() as scope:
                scope.cancel()
                futures.append(await p.send("one", b"new batch", partition=0))
                futures.append(await p.send("one", b"hot path", partition=0))
            assert not scope.cancelled_caught
            assert [(await f).offset for f in futures] == [0, 1]
    assert [r.value for r in fake_broker.records("one", 0)] == [b"new batch", b"hot path"]


def test_bad_config_is_config_error() -> None:
    async def main() -> None:
        async with open_producer(lingerms=5):
            pass

    with pytest.raises(ConfigError, match="linger_ms"):
        anyio.run(main)


async def test_hot_path_keeps_order_batch_bound_and_memory_bound(fake_broker: FakeBroker) -> None:
    """Key-less bytes records take send()'s hot path; mixed with the general path,
    every record lands once, in order, in batches within batch.size and memory
    within buffer.memory."""
    batch_size = 4096
    buffer_memory = 64 * 1024
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap,
            batch_size=batch_size,
            buffer_memory=buffer_memory,
            linger_ms=2,
        ) as p:
            acc = p._acc
            peak = 0
            futures = []
            for i in range(3000):
                if i % 500 == 7:  # the general path, same topic and partition choice
                    futures.append(await p.send("one", b"h%d" % i, headers=[("n", b"1")]))
                else:
                    futures.append(await p.send("one", b"v%d" % i))
                # Records reserve out of buffer.memory; encoded in-flight batches
                # come on top (documented in sdk/accumulator.py).
                encoded = sum(len(b.encoded) for b in acc.incomplete_batches() if b.encoded)
                peak = max(peak, acc.used_memory - encoded)
            assert p.core._sticky_batches, "key-less bytes records must use the hot path"
        results = [await f for f in futures]
    assert peak <= buffer_memory
    assert [r.offset for r in results] == list(range(3000))
    values = [r.value for r in fake_broker.records("one", 0)]
    assert values == [(b"h%d" if i % 500 == 7 else b"v%d") % i for i in range(3000)]
    for blob in fake_broker.logs[("one", 0)]:
        assert len(blob) <= batch_size + 64  # the bound, plus the record that crossed it


async def test_keyed_hot_path_matches_murmur2_and_keeps_order(fake_broker: FakeBroker) -> None:
    """Keyed bytes records take the hot path to their murmur2 partition's open batch;
    mixed with the general path (headers) and key-less records, each partition
    holds its records once, in send order."""
    keys = [b"k%d" % (i % 7) for i in range(2000)]
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, batch_size=2048, linger_ms=2
        ) as p:
            futures = []
            for i, key in enumerate(keys):
                if i % 300 == 5:
                    futures.append(await p.send("t", b"h%d" % i, key=key, headers={"n": b"1"}))
                else:
                    futures.append(await p.send("t", b"v%d" % i, key=key))
            assert p.core._keyed_batches, "keyed bytes records must use the hot path"
        results = [await f for f in futures]
    expected: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for i, (key, md) in enumerate(zip(keys, results, strict=True)):
        assert md.partition == murmur2_partition(key, 3)
        expected[md.partition].append((b"h%d" if i % 300 == 5 else b"v%d") % i)
    for part, values in expected.items():
        records = fake_broker.records("t", part)
        assert [r.value for r in records] == values
        assert [r.key for r in records] == [keys[int(v[1:])] for v in values]


async def test_keyed_hot_path_follows_a_partition_count_change(fake_broker: FakeBroker) -> None:
    """Once the metadata shows more partitions, keyed records go to murmur2 of the new
    count at once, even while the batches they used to join are still open."""
    keys = [b"k%d" % i for i in range(40)]
    assert {murmur2_partition(k, 3) for k in keys} != {murmur2_partition(k, 7) for k in keys}
    with anyio.fail_after(20):
        async with open_producer(bootstrap_servers=fake_broker.bootstrap, linger_ms=60_000) as p:
            before = [await p.send("t", b"a", key=k) for k in keys]
            assert p.core._keyed_batches["t"], "keyed bytes records must use the hot path"
            fake_broker.topics["t"] = 7
            md = p._cluster.metadata
            md.request_update()
            p._cluster.nudge()
            while md.partition_count("t") != 7:
                await anyio.sleep(0.01)
            assert not any(f.done() for f in before), "the old batches must still be open"
            after = [await p.send("t", b"b", key=k) for k in keys]
            await p.flush()
        first = [await f for f in before]
        second = [await f for f in after]
    assert [m.partition for m in first] == [murmur2_partition(k, 3) for k in keys]
    assert [m.partition for m in second] == [murmur2_partition(k, 7) for k in keys]


@pytest.mark.parametrize("partitioner", ["murmur2", "consistent_random"])
async def test_try_send_takes_what_fits_an_open_batch_and_send_the_rest(
    fake_broker: FakeBroker, partitioner: str
) -> None:
    """The documented loop: try_send, else send. Every record lands once, in
    order per partition, where the partitioner puts it (librdkafka's
    consistent_random: CRC-32 of the key, a random partition without one),
    and try_send takes nearly all of them."""
    keys = [None if i % 3 else b"k%d" % (i % 5) for i in range(3000)]
    key_hash = KEY_HASHES["crc32" if partitioner == "consistent_random" else partitioner]
    taken = 0
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap,
            batch_size=4096,
            linger_ms=2,
            partitioner=partitioner,
        ) as p:
            futures = []
            for i, key in enumerate(keys):
                value = b"v%d" % i
                future = p.try_send("t", value, key)
                if future is None:
                    future = await p.send("t", value, key)
                else:
                    taken += 1
                futures.append(future)
        results = [await f for f in futures]
    assert taken > 2500  # all but the records that opened a batch
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for i, (key, md) in enumerate(zip(keys, results, strict=True)):
        if key is not None:
            assert md.partition == key_hash(key, 3)
        sent[md.partition].append(b"v%d" % i)
    for part, values in sent.items():
        assert [r.value for r in fake_broker.records("t", part)] == values


async def test_try_send_declines_what_needs_send(fake_broker: FakeBroker) -> None:
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, linger_ms=60_000, batch_size=4096
        ) as p:
            assert p.try_send("one", b"x") is None  # no batch open yet
            first = await p.send("one", b"x")
            assert p.try_send("one", "text") is None  # not bytes
            assert p.try_send("one", b"x", key="text") is None
            assert p.try_send("one", b"y" * 5000) is None  # no room in the batch
            assert p.try_send("one", b"z") is not None
            await p.flush()
            assert p.try_send("one", b"x") is None  # the batch has left
            assert (await first).offset == 0
        assert p.try_send("one", b"x") is None  # closed
    async with open_producer(
        bootstrap_servers=fake_broker.bootstrap, partitioner="roundrobin", linger_ms=60_000
    ) as p:
        await p.send("t", b"v", key=b"k")
        assert p.try_send("t", b"v", key=b"k") is None  # a counter: one pick per record


async def test_a_batch_try_send_fills_leaves_without_waiting_for_linger(
    fake_broker: FakeBroker,
) -> None:
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, batch_size=1024, linger_ms=60_000
        ) as p:
            await p.send("one", b"warm-up")
            await p.flush()  # connected, and the sender idle until a linger ends
            futures = [await p.send("one", b"first")]
            await anyio.sleep(0.05)  # the sender has seen the new batch's linger
            batch = futures[0].batch
            while (future := p.try_send("one", b"." * 50)) is not None:
                futures.append(future)
            # The record that fills the batch to batch.size exactly marks it full.
            room = p._acc.batch_size - batch.size - RECORD_OVERHEAD
            future = p.try_send("one", b"." * room)
            assert future is not None and future.batch is batch and batch.full
            futures.append(future)
            # No flush, no other send: the full batch goes at once, not after linger.
            results = [await f for f in futures]
    assert [r.offset for r in results] == list(range(1, len(futures) + 1))


async def test_keyed_hot_path_is_off_for_a_custom_partitioner(fake_broker: FakeBroker) -> None:
    def murmur2(key: bytes | None, n: int, available: object) -> int:  # a namesake
        return n - 1

    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, partitioner=murmur2, linger_ms=1
        ) as p:
            results = [await p.send_and_wait("t", b"v", key=b"k%d" % i) for i in range(5)]
            assert not p.core._keyed_batches.get("t")
    assert {md.partition for md in results} == {2}


async def test_queued_full_batches_leave_together_up_to_the_in_flight_limit(
    fake_broker: FakeBroker,
) -> None:
    """Full batches that queued up (here while the leader's connection was opening)
    go out in one pass, up to max.in.flight.requests.per.connection, rather than one
    per answer: a flush or a commit otherwise waits one round trip per batch."""
    handshakes = 0

    async def slow_leader_handshake(header: object, body: object) -> object:
        nonlocal handshakes
        handshakes += 1
        if handshakes == 2:  # the bootstrap connection was first; this is the leader's
            await anyio.sleep(0.3)
        return fake_broker.api_versions(header, body)

    in_flight_seen: list[int] = []

    async def held_produce(header: object, body: object) -> object:
        if not in_flight_seen:
            # The first request's answer is held, so what else left with it shows.
            await anyio.sleep(0.3)
        in_flight_seen.append(max(p._sender._node_in_flight.values()))
        return fake_broker.produce(header, body)

    fake_broker.handlers[18] = slow_leader_handshake
    fake_broker.handlers[0] = held_produce
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, batch_size=1000, linger_ms=60_000
        ) as p:
            await p.partitions_for("one")
            futures = [await p.send("one", b"x" * 900) for _ in range(8)]
            await p.flush()
        offsets = [(await f).offset for f in futures]
    assert offsets == list(range(8))
    assert len(in_flight_seen) == 8  # a batch per request: one record fills a batch
    assert in_flight_seen[0] == 5  # the default in-flight limit, reached at once
