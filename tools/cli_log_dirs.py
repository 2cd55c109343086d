"""``trafka log-dirs``: where brokers keep partitions, and moving replicas between
a broker's log directories, like Kafka's ``kafka-log-dirs.sh --describe`` and the
log-directory part of ``kafka-reassign-partitions.sh``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* ``describe`` lists every broker's log directories (DescribeLogDirs) with the
  bytes each partition takes there, or only the partitions of ``--topic``
  (repeatable) and the brokers of ``--broker`` (repeatable); ``--json`` prints
  Kafka's tool's shape: ``{"version": 1, "brokers": [{"broker", "logDirs":
  [{"logDir", "error", "partitions": [{"partition", "size"}]}]}]}``, with
  ``totalBytes`` and ``usableBytes`` when the broker reports them.
* ``move TOPIC PARTITION BROKER DIR`` moves one replica (AlterReplicaLogDirs);
  the broker copies it in the background. The result is checked per replica
  and a refusal (LOG_DIR_NOT_FOUND, UNKNOWN_TOPIC_OR_PARTITION,
  CLUSTER_AUTHORIZATION_FAILED...) exits 1 naming it. ``replica TOPIC
  PARTITION BROKER`` then shows where the replica is, and any copy under way.
* ``reopen TOPIC PARTITION BROKER`` brings a replica that went offline after a
  failed write back online, without restarting the broker: it "moves" the
  replica to the directory it is in, which brokerlite answers by checking that
  the directory takes a write again and opening the log afresh, as a restart
  would. KAFKA_STORAGE_ERROR (still offline) exits 1 naming it.
"""

from __future__ import annotations

import json
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["log_dirs_command"]


def _name(exc: KafkaError) -> str:
    return exc.code.name if isinstance(exc.code, ErrorCode) else str(exc.code)


@click.group("log-dirs")
def log_dirs_command() -> None:
    """Describe brokers' log directories and move replicas between them."""


@log_dirs_command.command("describe")
@click.option("--topic", "topics", multiple=True, help="Only this topic's partitions (repeatable).")
@click.option("--broker", "brokers", multiple=True, type=int, help="Only this broker (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print kafka-log-dirs.sh's JSON.")
@admin_options
def log_dirs_describe(
    cfg: dict[str, Any], topics: tuple[str, ...], brokers: tuple[int, ...], as_json: bool
) -> None:
    """Every broker's log directories and the size of each partition in them."""

    async def run(admin: Any) -> list[Any]:
        partitions = None
        if topics:
            described = await admin.describe_topics(list(dict.fromkeys(topics)))
            partitions = [(t.name, p.partition) for t in described.values() for p in t.partitions]
        dirs: list[Any] = await admin.describe_log_dirs(partitions)
        return dirs

    found = run_client(with_admin, cfg, run)
    if brokers:
        found = [d for d in found if d.node_id in set(brokers)]
    found.sort(key=lambda d: (d.node_id, d.path))
    if as_json:
        by_broker: dict[int, list[dict[str, Any]]] = {}
        for d in found:
            entry: dict[str, Any] = {
                "logDir": d.path,
                "error": None if d.error is None else _name(d.error),
                "partitions": [
                    {"partition": f"{tp.topic}-{tp.partition}", "size": size}
                    for tp, size in sorted(d.partitions.items())
                ],
            }
            if d.total_bytes is not None:
                entry["totalBytes"] = d.total_bytes
                entry["usableBytes"] = d.usable_bytes
            by_broker.setdefault(d.node_id, []).append(entry)
        brokers_json = [{"broker": b, "logDirs": dirs} for b, dirs in sorted(by_broker.items())]
        click.echo(json.dumps({"version": 1, "brokers": brokers_json}))
        return
    rows = []
    for d in found:
        if d.error is not None:
            rows.append((d.node_id, d.path, "-", "-", _name(d.error)))
        for tp, size in sorted(d.partitions.items()):
            rows.append((d.node_id, d.path, tp.topic, tp.partition, size))
        if d.error is None and not d.partitions:
            rows.append((d.node_id, d.path, "-", "-", "-"))
    if rows:
        click.echo(format_table(["BROKER", "LOG-DIR", "TOPIC", "PARTITION", "SIZE"], rows))


@log_dirs_command.command("move")
@click.argument("topic")
@click.argument("partition", type=click.IntRange(min=0))
@click.argument("broker", type=click.IntRange(min=0))
@click.argument("log_dir")
@admin_options
def log_dirs_move(
    cfg: dict[str, Any], topic: str, partition: int, broker: int, log_dir: str
) -> None:
    """Move the replica of TOPIC's PARTITION on BROKER to its directory LOG_DIR
    (an absolute path, as ``describe`` shows the broker's directories)."""
    from trafka.sdk import TopicPartitionReplica

    replica = TopicPartitionReplica(topic, partition, broker)

    async def run(admin: Any) -> dict[Any, KafkaError | None]:
        result: dict[Any, KafkaError | None] = await admin.alter_replica_log_dirs(
            {replica: log_dir}
        )
        return result

    error = run_client(with_admin, cfg, run).get(replica)
    if error is not None:
        raise click.ClickException(str(error))  # it names the code
    click.echo(f"moving {topic}-{partition} on broker {broker} to {log_dir}", err=True)


@log_dirs_command.command("reopen")
@click.argument("topic")
@click.argument("partition", type=click.IntRange(min=0))
@click.argument("broker", type=click.IntRange(min=0))
@admin_options
def log_dirs_reopen(cfg: dict[str, Any], topic: str, partition: int, broker: int) -> None:
    """Bring BROKER's replica of TOPIC's PARTITION back online after a storage
    failure took it offline (brokerlite checks the directory, then reopens it)."""
    from trafka.sdk import TopicPartitionReplica

    replica = TopicPartitionReplica(topic, partition, broker)

    async def run(admin: Any) -> tuple[str | None, KafkaError | None]:
        where = (await admin.describe_replica_log_dirs([replica]))[replica].current_log_dir
        if where is None:
            return None, None
        result = await admin.alter_replica_log_dirs({replica: where})
        return where, result.get(replica)

    where, error = run_client(with_admin, cfg, run)
    if where is None:
        raise click.ClickException(f"broker {broker} holds no replica of {topic}-{partition}")
    if error is not None:
        raise click.ClickException(str(error))  # it names the code
    click.echo(f"{topic}-{partition} on broker {broker} is online in {where}", err=True)


@log_dirs_command.command("replica")
@click.argument("topic")
@click.argument("partition", type=click.IntRange(min=0))
@click.argument("broker", type=click.IntRange(min=0))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def log_dirs_replica(
    cfg: dict[str, Any], topic: str, partition: int, broker: int, as_json: bool
) -> None:
    """Where BROKER keeps its replica of TOPIC's PARTITION, and any move under way."""
    from trafka.sdk import TopicPartitionReplica

    replica = TopicPartitionReplica(topic, partition, broker)

    async def run(admin: Any) -> Any:
        return (await admin.describe_replica_log_dirs([replica]))[replica]

    info = run_client(with_admin, cfg, run)
    fields = {
        "current_log_dir": info.current_log_dir,
        "current_offset_lag": info.current_offset_lag,
        "size": info.size,
        "future_log_dir": info.future_log_dir,
        "future_offset_lag": info.future_offset_lag,
        "future_size": info.future_size,
    }
    if as_json:
        click.echo(json.dumps(fields))
        return
    if info.current_log_dir is None:
        raise click.ClickException(f"broker {broker} holds no replica of {topic}-{partition}")
    for key, value in fields.items():
        click.echo(f"{key}: {'-' if value is None else value}")
