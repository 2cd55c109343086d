"""The placement journal kept in the upstream cluster (proxy/journal_topic.py):
its records without sockets, then two journals (two proxy instances) on one
brokerlite: the topic created compacted, placements written by one read by
the other, a claim fencing the former owner, and a journal that cannot write
failing in time instead of hanging."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from proxy_helpers import confluent_produce, create, fresh, placement
from test_proxy_cut_moments import KEYS, PARTITIONS, produce_request

from trafka.brokerlite.server import serve_broker
from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.codec.records import encode_batch
from trafka.proxy import proxy_in_thread
from trafka.proxy.filters import FilterContext
from trafka.proxy.keyrouting.exactly_once import ExactlyOnce
from trafka.proxy.keyrouting.journal import JournalError, JournalFenced
from trafka.proxy.keyrouting.journal_topic import (
    TopicJournal,
    beat_key,
    claim_key,
    decode_record,
    encode_window,
    window_key,
)
from trafka.proxy.keyrouting.sequences import Placement
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.pool import UpstreamPool
from trafka.proxy.topics import Topics
from trafka.sdk import open_admin
from trafka.sdk.partitioners import murmur2_partition

PID, EPOCH = 77, 2
A_PLACEMENT = Placement(10, ((0, 4), (3, 9)))


def test_a_window_record_decodes_to_what_was_encoded() -> None:
    window = [(EPOCH, 0, A_PLACEMENT), (EPOCH, 10, Placement(5, ((1, 14),)))]
    kind, (wkey, instance, claimed, got) = decode_record(
        window_key((PID, "or.ders", 4), "me"), encode_window(12, window)
    )  # type: ignore[misc]
    assert (kind, wkey, instance, claimed, got) == ("p", (PID, "or.ders", 4), "me", 12, window)
    # A tombstone is an empty window; a claim names its instance and epoch.
    assert decode_record(window_key((PID, "t", 0), "a"), None) == (
        "p",
        ((PID, "t", 0), "a", -1, []),
    )
    assert decode_record(claim_key(PID), b'{"o":"b","e":2}') == ("c", (PID, "b", 2))
    assert decode_record(beat_key(PID), b"") == ("b", PID)


def test_a_record_that_does_not_parse_is_skipped() -> None:
    assert decode_record(b"p:x:t:0:a", b'{"c":1,"w":[]}') is None
    assert decode_record(window_key((PID, "t", 0), "a"), b"not json") is None
    assert decode_record(b"z:1", b"{}") is None


def test_a_window_written_by_a_fenced_instance_is_void() -> None:
    journal = TopicJournal(["127.0.0.1:1"], instance="c")
    key, wkey = (PID, EPOCH, "t", 0, 0), (PID, "t", 0)
    journal._apply_one(claim_key(PID), b'{"o":"a","e":2}', 0)
    journal._apply_one(window_key(wkey, "a"), encode_window(0, [(EPOCH, 0, A_PLACEMENT)]), 1)
    assert journal.lookup(key) == A_PLACEMENT
    journal._apply_one(claim_key(PID), b'{"o":"b","e":2}', 2)
    # a's write landing after b's claim changes nothing; b's own does.
    late = Placement(3, ((5, 2),))
    journal._apply_one(window_key(wkey, "a"), encode_window(0, [(EPOCH, 0, late)]), 3)
    assert journal.lookup(key) == A_PLACEMENT
    bs = Placement(4, ((1, 2),))
    journal._apply_one(window_key(wkey, "b"), encode_window(2, [(EPOCH, 0, bs)]), 4)
    assert journal.lookup(key) == bs
    assert journal.owner(PID) == "b"


def test_a_producers_placements_are_listed_for_a_sync_at_its_epoch() -> None:
    """What a proxy learning a partition's last sequence checks for stale
    placements (see Sequences.synced): the producer's, at its epoch, from
    every window of its client partitions."""
    journal = TopicJournal(["127.0.0.1:1"], instance="c")
    journal._apply_one(claim_key(PID), b'{"o":"a","e":2}', 0)
    other = Placement(3, ((5, 2),))
    journal._apply_one(
        window_key((PID, "t", 0), "a"),
        encode_window(0, [(EPOCH, 0, A_PLACEMENT), (EPOCH - 1, 4, other)]),
        1,
    )
    journal._apply_one(window_key((PID, "t", 2), "a"), encode_window(0, [(EPOCH, 7, other)]), 2)
    journal._apply_one(window_key((PID + 1, "t", 0), "a"), encode_window(0, [(EPOCH, 0, other)]), 3)
    assert sorted(journal.placements(PID, EPOCH)) == [
        ((PID, EPOCH, "t", 0, 0), A_PLACEMENT),
        ((PID, EPOCH, "t", 2, 7), other),
    ]
    assert journal.placements(PID, EPOCH + 1) == []


def test_after_compaction_the_last_claimers_window_counts() -> None:
    """The claims compacted to the last one (a's again, at 9): b's window (b
    claimed at 3) still beats a's late one written under a's claim at 0."""
    journal = TopicJournal(["127.0.0.1:1"], instance="c")
    key, wkey = (PID, EPOCH, "t", 0, 0), (PID, "t", 0)
    late, bs = Placement(3, ((5, 2),)), Placement(4, ((1, 2),))
    journal._apply_one(window_key(wkey, "b"), encode_window(3, [(EPOCH, 0, bs)]), 6)
    journal._apply_one(window_key(wkey, "a"), encode_window(0, [(EPOCH, 0, late)]), 7)
    journal._apply_one(claim_key(PID), b'{"o":"a","e":2}', 9)
    assert journal.lookup(key) == bs


def test_an_own_window_read_back_early_does_not_replace_one_handed_since() -> None:
    """Windows are handed to the journal's producer before the earlier ones
    are acknowledged (pipelined): the follower may read this instance's older
    window before its acknowledgement says the offset is its own. It is not
    applied: the newer window, holding both placements, stays."""
    journal = TopicJournal(["127.0.0.1:1"], instance="a")
    wkey, later = (PID, "t", 0), Placement(1, ((2, 5),))
    journal._apply_one(claim_key(PID), b'{"o":"a","e":2}', 0)
    journal._windows[wkey] = (0, [(EPOCH, 0, A_PLACEMENT), (EPOCH, 10, later)])  # handed
    journal._apply_one(window_key(wkey, "a"), encode_window(0, [(EPOCH, 0, A_PLACEMENT)]), 1)
    assert journal.lookup((PID, EPOCH, "t", 0, 10)) == later


def test_two_instances_share_placements_and_a_claim_fences_the_former_owner(
    tmp_path: Path,
) -> None:
    trio.run(_two_instances, tmp_path)


async def _two_instances(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with (
            serve_broker(port=0, host="127.0.0.1", data_dir=str(tmp_path)) as broker,
            trio.open_nursery() as nursery,
        ):
            servers = [broker.bootstrap_servers]
            a = TopicJournal(servers, instance="a", partitions=3, takeover_grace=2.5)
            nursery.start_soon(a.run)
            # The first claim of a producer: nobody owned it, no grace.
            deadline = trio.current_time() + 30
            assert await a.claim(PID, EPOCH, deadline) == 0.0
            await a.record([((PID, EPOCH, "t", 1, 0), A_PLACEMENT)])
            # The topic: compacted, one replica on one broker.
            async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                configs = await admin.describe_configs(topics=["__trafka_proxy_placements"])
            (topic_configs,) = configs.values()
            assert topic_configs["cleanup.policy"] == "compact"

            # Another proxy starts: it reads what a wrote.
            b = TopicJournal(servers, instance="b", takeover_grace=2.5)
            nursery.start_soon(b.run)
            assert await b.claim(PID, EPOCH, deadline) == 2.5  # a owned it at this epoch
            assert b.lookup((PID, EPOCH, "t", 1, 0)) == A_PLACEMENT
            assert b.lookup((PID, EPOCH, "t", 1, 99)) is None
            # a is fenced at its next write; b writes on, keeping a's window.
            with pytest.raises(JournalFenced):
                await a.record([((PID, EPOCH, "t", 1, 10), Placement(1, ((2, 5),)))])
            await b.record([((PID, EPOCH, "t", 1, 20), Placement(2, ((2, 7),)))])
            await trio.sleep(0)
            assert b.lookup((PID, EPOCH, "t", 1, 10)) is None  # a's fenced write is void
            assert b.lookup((PID, EPOCH, "t", 1, 0)) == A_PLACEMENT
            # a sees b's write (once read), and its claim back makes b the fenced one.
            assert await a.claim(PID, EPOCH, deadline) == 2.5
            assert a.lookup((PID, EPOCH, "t", 1, 20)) == Placement(2, ((2, 7),))
            with pytest.raises(JournalFenced):
                await b.record([((PID, EPOCH, "t", 1, 30), Placement(1, ((0, 1),)))])
            # Batches written again, their placements unchanged: a beat is
            # written for the check, which fences b all the same (and not a).
            with pytest.raises(JournalFenced):
                await b.record([], producer=PID)
            await a.record([], producer=PID)
            assert a.fenced == 1
            nursery.cancel_scope.cancel()


def test_a_journal_whose_cluster_is_down_fails_its_write_in_time() -> None:
    trio.run(_cluster_down)


async def _cluster_down() -> None:
    # Nothing listens on the port: the write fails at its deadline instead of
    # hanging (the caller writes no batch and answers a retriable error).
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            journal = TopicJournal([f"127.0.0.1:{port}"], timeout=1.0)
            nursery.start_soon(journal.run)
            with pytest.raises(JournalError, match="in time"):
                await journal.record([((PID, EPOCH, "t", 0, 0), A_PLACEMENT)])
            with pytest.raises(JournalError):
                await journal.claim(PID, EPOCH, trio.current_time() + 1)
            nursery.cancel_scope.cancel()


def test_a_proxy_with_the_topic_journal_routes_an_idempotent_producer(broker: Any) -> None:
    """librdkafka's idempotent producer through a proxy journaling in the
    cluster: every record once on its murmur2 partition, and the journal topic
    holds the producer's claim and placement windows."""
    topic = fresh("jt")
    create(broker.bootstrap_servers, topic, 6)
    journal_topic = fresh("journal")
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, journal_topic=journal_topic
    ) as px:
        confluent_produce(px.bootstrap_servers, topic, 500, **{"enable.idempotence": True})
        assert px.statistics.routing.records_moved > 0
    records = placement(broker.bootstrap_servers, topic, 6)
    assert sorted(r.value for r in records) == sorted(b"v%d" % i for i in range(500))
    assert all(r.partition == murmur2_partition(r.key, 6) for r in records)
    kinds = {r.key[:2] for r in placement(broker.bootstrap_servers, journal_topic, 12)}
    assert kinds == {b"c:", b"p:"}


def test_two_live_proxies_for_one_producer_write_one_at_a_time(broker: Any) -> None:
    """The ownership rule between two live proxies (a client that fails over
    while the first proxy still runs, then comes back): the proxy that did not
    claim last writes nothing (its request is answered REQUEST_TIMED_OUT, which
    the client retries) and claims again on the retry; a batch out of order
    for a proxy's stale view makes it claim back instead of refusing it. Every
    record ends in the topic once, on its murmur2 partition."""
    topic = fresh("owners")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    host, port = broker.address
    node = broker.config.node_id
    journal_topic = fresh("journal")
    n = 20

    async def connect(node_id: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)

    async def main() -> list[list[int]]:
        outcomes = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                proxies = []
                for name in ("a", "b"):
                    journal = TopicJournal(
                        [broker.bootstrap_servers], topic=journal_topic, instance=name,
                        takeover_grace=0.05,
                    )  # fmt: skip
                    nursery.start_soon(journal.run)
                    pool = UpstreamPool(nursery, connect, 1 << 24)
                    topics = Topics(
                        {topic: PARTITIONS}, {(topic, p): node for p in range(PARTITIONS)}
                    )
                    eos = ExactlyOnce(
                        pool, topics, RouteStats(), lambda _: None, lambda: [node], 1 << 24, journal
                    )
                    proxies.append((eos, pool, journal))
                a, b = proxies
                init = ip.InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60_000,
                    producer_id=-1, producer_epoch=-1,
                )  # fmt: skip
                waiter = await a[1].send(node, "owners", 22, 4, init)
                answer = protocol.decode_response(
                    await a[1].wait(waiter, trio.current_time() + 10), 22, 4
                )[1]
                a[0].init_answered(answer)
                producer = (answer.producer_id, answer.producer_epoch)
                ctx = FilterContext(0, 9, 1, "owners", None, node)

                async def send(proxy: Any, first: int) -> list[int]:
                    eos = proxy[0]
                    records = [
                        (1_000 + i, KEYS[i % len(KEYS)], b"v-%d" % i, [])
                        for i in range(first, first + n)
                    ]
                    batch = encode_batch(
                        records, producer_id=producer[0], producer_epoch=producer[1],
                        base_sequence=first,
                    )  # fmt: skip
                    body = produce_request(topic, {0: batch})
                    deadline = trio.current_time() + 20
                    result = await eos.plan(ctx, body, producer, "murmur2", deadline)
                    if isinstance(result, tuple):
                        result = await eos.settle(ctx, body, *result, deadline)
                    if isinstance(result, bytes):  # the answer, merged on bytes
                        result = protocol.decode_response_body(0, ctx.api_version, result)
                    return [p.error_code for t in result.responses for p in t.partition_responses]

                outcomes.append(await send(a, 0))  # a owns the producer
                # The client fails over with a retry of that batch (its answer
                # lost): b claims the producer and knows the batch from the journal.
                outcomes.append(await send(b, 0))
                # Back to a, in order for a's view: fenced at the write, nothing
                # written; the client's retry claims the producer back.
                outcomes.append(await send(a, n))
                outcomes.append(await send(a, n))
                # To b again: out of order for b's view, so b claims it back
                # (rather than refusing a batch that is in order for the producer).
                outcomes.append(await send(b, 2 * n))
                assert (a[2].fenced, b[2].fenced) == (1, 0)
                assert (a[2].claims_made, b[2].claims_made) == (2, 2)
                nursery.cancel_scope.cancel()
        return outcomes

    outcomes = trio.run(main)
    timed_out = ErrorCode.REQUEST_TIMED_OUT
    assert outcomes == [[0], [0], [timed_out], [0], [0]]
    records = placement(broker.bootstrap_servers, topic, PARTITIONS)
    values = sorted(int(r.value.split(b"-")[1]) for r in records)
    assert values == list(range(3 * n))
    assert all(r.partition == murmur2_partition(r.key, PARTITIONS) for r in records)


def test_a_producer_idle_past_idle_s_has_its_records_deleted() -> None:
    """Compaction keeps the live state only: a producer nothing was written for
    in ``idle_s`` gets tombstones for its windows and its claim (the clock is
    trio's, driven here by a MockClock)."""

    async def main() -> dict[int, list[bytes]]:
        journal = TopicJournal(["127.0.0.1:1"], instance="a", idle_s=100)
        now = trio.current_time()
        journal._apply_one(claim_key(PID), b'{"o":"b","e":2}', 0, now=now)
        window = encode_window(0, [(EPOCH, 0, A_PLACEMENT)])
        journal._apply_one(window_key((PID, "t", 0), "b"), window, 1, now=now)
        await trio.sleep(60)
        journal._apply_one(claim_key(PID + 1), b'{"o":"b","e":0}', 2, now=trio.current_time())
        assert journal.idle(trio.current_time()) == {}
        await trio.sleep(50)
        gone = journal.idle(trio.current_time())
        journal._busy[PID] = 1  # a write under way: not now
        assert journal.idle(trio.current_time()) == {}
        return gone

    gone = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert gone == {PID: [window_key((PID, "t", 0), "b"), claim_key(PID)]}


@pytest.mark.parametrize(
    ("value", "directory", "topic"),
    [
        ("topic", None, "__trafka_proxy_placements"),
        ("topic:ours", None, "ours"),
        ("/var/lib/proxy", "/var/lib/proxy", None),
    ],
)
def test_the_cli_journal_is_a_directory_or_a_topic(
    value: str, directory: str | None, topic: str | None
) -> None:
    from click.testing import CliRunner

    from trafka.proxy import cli
    from trafka.proxy.service import check
    from trafka.proxy.settings import Sources

    arguments = ["--upstream", "b:9092", "--journal", value, "--journal-takeover-grace-ms", "250"]
    result = CliRunner().invoke(cli.command, [*arguments, "--check-config"])
    assert result.exit_code == 0, result.output
    flags = {"upstream": ("b:9092",), "journal": value, "journal_takeover_grace_ms": 250}
    config = check(Sources(flags)).config
    assert (config.journal_dir, config.journal_topic) == (directory, topic)
    assert config.journal_takeover_grace_ms == 250


def test_one_journal_at_a_time() -> None:
    from trafka.proxy import ProxyConfig

    with pytest.raises(ValueError, match="choose one journal"):
        ProxyConfig(upstream=("b:9092",), journal_dir="/tmp/j", journal_topic="t")


def test_when_the_cluster_refuses_the_journal_nothing_is_written(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The journal's topic cannot take an acks=all write (min.insync.replicas 2
    on one broker: NOT_ENOUGH_REPLICAS): the routed batches are never written
    unjournaled; the producer hears retriable errors until its own timeout."""
    import anyio
    import confluent_kafka

    from trafka.sdk import NewTopic

    topic, journal_topic = fresh("refused"), fresh("journal")
    create(broker.bootstrap_servers, topic, 6)

    async def create_journal() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            configs = {"cleanup.policy": "compact", "min.insync.replicas": "2"}
            await admin.create_topics([NewTopic(journal_topic, 12, 1, configs)])

    anyio.run(create_journal, backend="trio")
    errors: list[Any] = []
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, journal_topic=journal_topic,
        connect_timeout=1.0,
    ) as px:  # fmt: skip
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": px.bootstrap_servers,
                "enable.idempotence": True,
                "message.timeout.ms": 5000,
                "linger.ms": 5,
            }
        )
        for i in range(20):
            producer.produce(
                topic, value=b"v%d" % i, key=b"k%d" % i, on_delivery=lambda e, _m: errors.append(e)
            )
        assert producer.flush(60) == 0
    assert len(errors) == 20 and all(e is not None for e in errors)
    assert placement(broker.bootstrap_servers, topic, 6) == []
    # Refused for the journal's sake (its claim could not be written), nothing else.
    assert "NOT_ENOUGH_REPLICAS" in caplog.text
