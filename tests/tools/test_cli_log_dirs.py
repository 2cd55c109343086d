"""``trafka log-dirs`` against brokerlite: describe (table, kafka-log-dirs.sh's
JSON, topic and broker filters), moving a replica to the broker's own directory,
refusals naming Kafka's error, and where a replica is."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(120)


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{os.getpid()}"


def log_dirs(broker: RunningBroker, *args: str) -> Result:
    return CliRunner().invoke(main, ["log-dirs", *args, "-b", broker.bootstrap_servers])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def topic_with_records(broker: RunningBroker, partitions: int, records: int) -> str:
    name = fresh("dirs")

    async def setup() -> None:
        bs = broker.bootstrap_servers
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(name, partitions)])
        async with open_producer(bootstrap_servers=bs) as producer:
            for i in range(records):
                await producer.send(name, b"x" * 100, partition=i % partitions)

    anyio.run(setup)
    return name


def data_dir(broker: RunningBroker) -> str:
    answer = json.loads(ok(log_dirs(broker, "describe", "--json")).stdout)
    [b] = answer["brokers"]
    [d] = b["logDirs"]
    path: str = d["logDir"]
    return path


def test_describe_lists_the_partitions_with_their_sizes(broker: RunningBroker) -> None:
    topic = topic_with_records(broker, 2, 10)
    answer: dict[str, Any] = json.loads(
        ok(log_dirs(broker, "describe", "--topic", topic, "--json")).stdout
    )
    assert answer["version"] == 1
    [b] = answer["brokers"]
    assert b["broker"] == 1
    [d] = b["logDirs"]
    assert d["error"] is None and os.path.isabs(d["logDir"])
    sizes = {p["partition"]: p["size"] for p in d["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"}
    # Five 100-byte records each, in record batches: more than their values.
    assert all(size > 500 for size in sizes.values())
    assert d["usableBytes"] <= d["totalBytes"]
    table = ok(log_dirs(broker, "describe", "--topic", topic)).stdout
    assert table.splitlines()[0].split() == ["BROKER", "LOG-DIR", "TOPIC", "PARTITION", "SIZE"]
    assert f" {topic} " in table and str(sizes[f"{topic}-1"]) in table
    # Another broker id: nothing.
    assert ok(log_dirs(broker, "describe", "--broker", "7")).stdout == ""


def test_move_to_its_own_directory_then_where_the_replica_is(broker: RunningBroker) -> None:
    topic = topic_with_records(broker, 1, 3)
    path = data_dir(broker)
    moved = ok(log_dirs(broker, "move", topic, "0", "1", path))
    assert "moving" in moved.stderr
    info = json.loads(ok(log_dirs(broker, "replica", topic, "0", "1", "--json")).stdout)
    assert info["current_log_dir"] == path and info["future_log_dir"] is None
    assert info["current_offset_lag"] == 0 and info["size"] > 300
    text = ok(log_dirs(broker, "replica", topic, "0", "1")).stdout
    assert f"current_log_dir: {path}" in text and "future_log_dir: -" in text


def test_refusals_name_kafkas_error(broker: RunningBroker) -> None:
    topic = topic_with_records(broker, 1, 1)
    elsewhere = log_dirs(broker, "move", topic, "0", "1", "/no/such/dir")
    assert elsewhere.exit_code == 1 and "LOG_DIR_NOT_FOUND" in elsewhere.output
    # The code once (the error's text names it), as against Kafka (test_cli_kafka.py).
    assert elsewhere.stderr.startswith("Error: [LOG_DIR_NOT_FOUND (57)] moving ")
    unknown = log_dirs(broker, "move", fresh("nope"), "0", "1", data_dir(broker))
    assert unknown.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.output
    nowhere = log_dirs(broker, "replica", topic, "3", "1")
    assert nowhere.exit_code == 1 and "holds no replica" in nowhere.output
    usage = log_dirs(broker, "move", topic, "-1", "1", data_dir(broker))
    assert usage.exit_code == 2
