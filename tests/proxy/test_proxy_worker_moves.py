"""An idempotent producer that moves between two workers and back
(``trafka proxy --workers N --journal DIR``, :mod:`trafka.proxy.journal_peers`):
two proxies in threads, each with its own journal directory and the other's
as its peer (as ``worker_config`` sets them), in front of one in-process
brokerlite, with no grace (``journal_takeover_grace_ms=0``: nothing is in the
network here). Produce requests are made by hand, one producer id and epoch
through both, each move on a new connection as a client's is (it bootstraps
again once its worker stops answering).

Before a worker re-read its siblings' journals for a producer it already had
placements of, both cases below went wrong: the returning producer's batches
were numbered from the worker's old state, so the broker answered them as
duplicates of the sibling's batches (the client told written records that
are in no log, at the sibling's offsets); and after a restart, a retry of a
batch the sibling wrote was placed afresh and written twice."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from proxy_helpers import INIT_PRODUCER_ID, call, create, fresh, placement, produce_batch

from trafka.brokerlite import RunningBroker
from trafka.codec.messages import k03_metadata as mm
from trafka.proxy import RunningProxy, proxy_in_thread

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


@contextmanager
def worker(broker: RunningBroker, journal: Path, k: int) -> Iterator[RunningProxy]:
    """Worker ``k`` of two: its own journal directory, the other's read."""
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,),
        port=0,
        journal_dir=str(journal / f"worker-{k}"),
        journal_peer_dirs=(str(journal / f"worker-{1 - k}"),),
        journal_takeover_grace_ms=0,
    ) as running:
        yield running


@contextmanager
def connect(proxy: RunningProxy, topic: str) -> Iterator[socket.socket]:
    """A new connection to the worker's broker port (learnt from its Metadata)."""
    host, port = proxy.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as boot:
        md = mm.MetadataRequest
        answer = call(boot, 3, 9, md(topics=[md.MetadataRequestTopic(name=topic)]))
    with socket.create_connection((host, answer.brokers[0].port), timeout=30) as sock:
        yield sock


def records(tag: bytes, n: int = 30) -> list[tuple[int, bytes, bytes, list[Any]]]:
    """``n`` records of distinct values, keys spread over every partition."""
    return [(1_000 + i, b"key-%d" % (i % 29), b"%s-%d" % (tag, i), []) for i in range(n)]


def values(batches: list[list[tuple[int, bytes, bytes, list[Any]]]]) -> Counter[bytes]:
    return Counter(v for batch in batches for _, _, v, _ in batch)


def test_a_producer_back_from_a_sibling_is_numbered_from_the_leaders(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """Worker 0 writes a batch of the producer; the client moves to worker 1,
    which writes the next; back on worker 0 (a new connection), a batch of
    another partition of the client is placed on the same target partitions:
    it is written, each record once, not answered as a duplicate of worker
    1's batches."""
    topic = fresh("moves")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    first, second, third = records(b"first"), records(b"second"), records(b"third")
    with ExitStack() as stack:
        w0 = stack.enter_context(worker(broker, tmp_path, 0))
        w1 = stack.enter_context(worker(broker, tmp_path, 1))
        with connect(w0, topic) as sock:
            producer = call(sock, 22, 4, INIT_PRODUCER_ID)
            assert produce_batch(sock, topic, producer, first, 0) == [0]
        with connect(w1, topic) as sock:
            assert produce_batch(sock, topic, producer, second, 30) == [0]
        with connect(w0, topic) as sock:
            assert produce_batch(sock, topic, producer, third, 0, partition=1) == [0]
    written = Counter(r.value for r in placement(broker.bootstrap_servers, topic, PARTITIONS))
    assert written == values([first, second, third])


def test_a_retry_of_a_batch_a_sibling_wrote_is_not_written_again_after_a_restart(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """Worker 0 writes a batch of the producer and is restarted; the client
    moves to worker 1, which writes the next batch, and its answer is lost;
    the client comes back to worker 0 and retries that batch: it is answered
    written, and its records are in the log once."""
    topic = fresh("moves")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    first, second = records(b"first"), records(b"second")
    with worker(broker, tmp_path, 1) as w1:
        with worker(broker, tmp_path, 0) as w0, connect(w0, topic) as sock:
            producer = call(sock, 22, 4, INIT_PRODUCER_ID)
            assert produce_batch(sock, topic, producer, first, 0) == [0]
        with worker(broker, tmp_path, 0) as w0:  # started again: its journal read
            with connect(w1, topic) as sock:
                assert produce_batch(sock, topic, producer, second, 30) == [0]
            with connect(w0, topic) as sock:  # the retry, the answer above lost
                assert produce_batch(sock, topic, producer, second, 30) == [0]
    written = Counter(r.value for r in placement(broker.bootstrap_servers, topic, PARTITIONS))
    assert written == values([first, second])


def test_a_producer_born_here_and_written_by_a_sibling_is_numbered_from_the_leaders(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """The producer's InitProducerId went through worker 0, its first batch
    through worker 1 (the client's Metadata came from there); then it comes to
    worker 0 with a batch of another partition, placed on the same targets:
    worker 0 passed its birth, but worker 1 wrote for it, so its targets'
    sequences are asked of the leaders, not started at 0 (the broker would
    answer the batch as a duplicate of worker 1's)."""
    topic = fresh("moves")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    first, second = records(b"first"), records(b"second")
    with worker(broker, tmp_path, 0) as w0, worker(broker, tmp_path, 1) as w1:
        with connect(w0, topic) as sock:
            producer = call(sock, 22, 4, INIT_PRODUCER_ID)
        with connect(w1, topic) as sock:
            assert produce_batch(sock, topic, producer, first, 0) == [0]
        with connect(w0, topic) as sock:
            assert produce_batch(sock, topic, producer, second, 0, partition=1) == [0]
    written = Counter(r.value for r in placement(broker.bootstrap_servers, topic, PARTITIONS))
    assert written == values([first, second])
