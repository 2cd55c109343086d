"""confluent-kafka's producer loop, run as a script against ``confluent_kafka``
and ``trafka.compat.confluent`` on the same brokerlite: many records over
several batches and partitions, a delivery callback per record (the shape of
confluent-kafka's examples/producer.py: ``produce(..., callback=)``,
``poll(0)``, ``BufferError`` served by ``poll``, then ``flush()``), and the
script ends without closing the producer, as confluent-kafka's examples do.

confluent-kafka's documentation (Producer.produce, poll, flush, __len__):
every produced message gets exactly one delivery report, served by
``poll()``/``flush()``; ``flush()`` returns the number of messages still
awaiting theirs; ``len()`` counts the messages awaiting delivery or report.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.timeout(300)

SCRIPT = r"""
import collections, importlib, json, sys

api, bs, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ck = importlib.import_module(api)
reports = collections.Counter()
offsets = collections.defaultdict(list)
errors = []

def report(err, msg):
    if err is not None:
        errors.append(err.code())
        return
    reports[msg.partition()] += 1
    offsets[msg.partition()].append(msg.offset())
    if msg.key() is not None:
        assert msg.value() == b"v" + msg.key()[1:], (msg.key(), msg.value())

producer = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 4096,
                        "queue.buffering.max.messages": 2000})
for i in range(n):
    key = None if i % 4 == 0 else b"k%d" % i
    while True:
        try:
            if key is None:
                producer.produce(topic, b"v%d" % i, callback=report)
            else:
                producer.produce(topic, b"v%d" % i, key, on_delivery=report)
            break
        except BufferError:
            producer.poll(1)
    producer.poll(0)
left = producer.flush(120)
print(json.dumps({
    "left": left, "len": len(producer), "errors": errors, "total": sum(reports.values()),
    "offsets_unique": all(len(set(v)) == len(v) for v in offsets.values()),
}), flush=True)
"""


def _run(api: str, bs: str, n: int) -> dict[str, object]:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"compat-loop-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(60)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, api, bs, topic, str(n)],
        capture_output=True,
        text=True,
        timeout=240,  # a script that never exits fails here
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_a_producer_script_gets_every_report_and_exits(brokerlite_peer: str) -> None:
    """Every record's report exactly once, over many batches of three
    partitions, whether the callback is the call's or ``on_delivery``;
    ``flush()`` returns 0 and ``len()`` is 0 after it; and the
    script exits without ``close()`` (the compat producer once hung there)."""
    n = 6000
    theirs = _run("confluent_kafka", brokerlite_peer, n)
    ours = _run("trafka.compat.confluent", brokerlite_peer, n)
    assert ours == theirs
    assert theirs == {
        "left": 0,
        "len": 0,
        "errors": [],
        "total": n,
        "offsets_unique": True,
    }


def test_a_dropped_producer_is_closed_off_the_collecting_thread(brokerlite_peer: str) -> None:
    """A producer dropped without ``close()`` (confluent-kafka's goes with its last
    reference) that the garbage collector finalizes on another client's loop
    thread (one running trio: the collector runs wherever an allocation trips it)
    is closed, and that thread goes on. Closing it there hung: trio refuses a
    blocking call from a thread running trio, anyio's portal swallows the
    refusal and waits for its loop's thread forever (CI: the next scenario's
    compat AdminClient never started, and its create_topics future timed out)."""
    import gc
    import threading
    import time

    import trio

    from trafka.compat.confluent import Producer

    topic = f"compat-drop-{uuid.uuid4().hex[:10]}"
    holder = [Producer({"bootstrap.servers": brokerlite_peer})]
    holder[0].produce(topic, b"delivered", partition=0)
    assert holder[0].flush(60) == 0
    inner = holder[0]._producer  # trafka's blocking producer underneath, to watch it close

    async def drop_on_a_trio_thread() -> None:
        holder.clear()  # the last reference; the producer is in reference cycles,
        gc.collect()  # so the collector finalizes it, here: in a task of this loop

    thread = threading.Thread(target=trio.run, args=(drop_on_a_trio_thread,), daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "dropping the producer blocked the thread that collected it"
    deadline = time.monotonic() + 60
    while not inner.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert inner.closed


def test_the_buffer_is_bounded_as_librdkafkas() -> None:
    """librdkafka's CONFIGURATION.md: ``queue.buffering.max.kbytes`` defaults
    to 1048576 (1 GiB) and bounds the producer queue's bytes; the drop-in's
    buffer is that, not Java's 32 MiB ``buffer.memory``, unless set."""
    import trafka.compat.confluent as ck

    def bound(conf: dict[str, object]) -> int:
        p = ck.Producer({"bootstrap.servers": "127.0.0.1:9", **conf})
        try:
            memory: int = p._producer._producer.config.buffer_memory
            return memory
        finally:
            p.flush(0)
            p.close()

    assert bound({}) == 1_048_576 * 1024
    assert bound({"queue.buffering.max.kbytes": 2048}) == 2048 * 1024
    assert bound({"buffer.memory": 5_000_000}) == 5_000_000
