"""``trafka transactions`` against an in-process brokerlite: list, describe,
describe-producers, fence and the usage errors. Finding and aborting a hanging
transaction is in tests/sdk/test_sdk_admin_transactions.py, with the admin
calls it is built on."""

from __future__ import annotations

import json
import threading

import anyio
import anyio.to_thread
import pytest
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, ProducerFencedError, open_admin, open_producer
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(60)


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def cli(broker: RunningBroker, *args: str) -> Result:
    return CliRunner().invoke(main, ["transactions", *args, "-b", broker.bootstrap_servers])


class OpenTransaction:
    """A producer with a transaction open on partition 0 of a new topic, on a thread
    of its own, until :meth:`finish`; ``fenced`` tells whether its commit then
    failed because it was fenced."""

    def __init__(self, broker: RunningBroker, topic: str, tid: str) -> None:
        self.ready = threading.Event()
        self.go = threading.Event()
        self.fenced = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=lambda: anyio.run(self._run, broker.bootstrap_servers, topic, tid)
        )
        self._thread.start()
        assert self.ready.wait(30), self.error

    async def _run(self, bs: str, topic: str, tid: str) -> None:
        try:
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(topic, 2)])
            async with open_producer(bootstrap_servers=bs, transactional_id=tid) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send(topic, b"open", partition=0)
                await p.flush()
                self.ready.set()
                await anyio.to_thread.run_sync(self.go.wait)
                try:
                    await p.commit_transaction()
                except ProducerFencedError:
                    self.fenced = True
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            raise

    def finish(self) -> None:
        self.go.set()
        self._thread.join(30)
        assert self.error is None, self.error


def test_list_describe_and_describe_producers(broker: RunningBroker) -> None:
    topic, tid = fresh("listed"), fresh("tx")
    txn = OpenTransaction(broker, topic, tid)
    try:
        listed = cli(broker, "list", "--state", "Ongoing", "--json")
        assert listed.exit_code == 0, listed.output
        (mine,) = [t for t in json.loads(listed.stdout) if t["transactional_id"] == tid]
        assert mine["state"] == "Ongoing"
        table = cli(broker, "list").stdout
        assert table.startswith("TRANSACTIONAL-ID") and tid in table
        by_pid = json.loads(
            cli(broker, "list", "--producer-id", str(mine["producer_id"]), "--json").stdout
        )
        assert [t["transactional_id"] for t in by_pid] == [tid]

        (desc,) = json.loads(cli(broker, "describe", tid, "--json").stdout)
        assert desc["state"] == "Ongoing" and desc["producer_id"] == mine["producer_id"]
        assert desc["partitions"] == [{"topic": topic, "partition": 0}]
        assert desc["duration_ms"] >= 0 and desc["coordinator_id"] >= 0
        assert tid in cli(broker, "describe", tid).stdout

        producers = json.loads(cli(broker, "describe-producers", topic, "--json").stdout)
        assert [(p["partition"], p["current_transaction_start_offset"]) for p in producers] == [
            (0, 0)
        ]
        assert producers[0]["producer_id"] == mine["producer_id"]
        one = json.loads(cli(broker, "describe-producers", topic, "-p", "1", "--json").stdout)
        assert one == []
        assert "TXN-START-OFFSET" in cli(broker, "describe-producers", topic).stdout
    finally:
        txn.finish()
    assert not txn.fenced
    (desc,) = json.loads(cli(broker, "describe", tid, "--json").stdout)
    assert desc["state"] == "CompleteCommit" and desc["duration_ms"] is None


def test_fence(broker: RunningBroker) -> None:
    topic, tid = fresh("fenced"), fresh("tx")
    txn = OpenTransaction(broker, topic, tid)
    try:
        fenced = cli(broker, "fence", tid)
        assert fenced.exit_code == 0, fenced.output
        assert f"fenced {tid}" in fenced.stderr
        (desc,) = json.loads(cli(broker, "describe", tid, "--json").stdout)
        # As Kafka's Admin.fenceProducers: the abort bumps the epoch, and the
        # fence's InitProducerId, retried until the abort is written, again.
        assert desc["state"] == "Empty" and desc["producer_epoch"] == 2
    finally:
        txn.finish()
    assert txn.fenced


def test_usage_and_client_errors(broker: RunningBroker) -> None:
    bogus = cli(broker, "list", "--state", "Bogus")
    assert bogus.exit_code == 2 and "Bogus" in bogus.output
    unknown = cli(broker, "describe", fresh("never-used"))
    assert unknown.exit_code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in unknown.output
    missing = cli(broker, "describe-producers", fresh("no-such-topic"))
    assert missing.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.output
    for args in (
        ["abort", "-t", "x", "-p", "0"],
        ["abort", "-t", "x", "-p", "0", "--start-offset", "0", "--producer-id", "1"],
        ["abort", "-t", "x", "-p", "0", "--producer-id", "1"],
    ):
        res = cli(broker, *args)
        assert res.exit_code == 2 and "--start-offset" in res.output, args
    for res in (unknown, missing, bogus):
        assert "Traceback" not in res.output
