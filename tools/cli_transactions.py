"""``trafka transactions``: look into transactions and repair hanging ones (KIP-664).

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* ``list``, ``describe`` and ``describe-producers`` only read:
  ListTransactions, DescribeTransactions, DescribeProducers.
* ``find-hanging`` is :meth:`trafka.sdk.Admin.find_hanging_transactions`
  (KIP-664's recipe), with the timeout in minutes as Kafka's tool takes it.
* ``abort`` writes an ABORT marker for one producer on one partition
  (WriteTxnMarkers). Given ``--start-offset`` it looks the producer up among
  the open transactions of the partition, and refuses when none starts
  there. Only for hanging transactions: aborting a live one this way loses
  its records on that partition.
* ``fence`` bumps the epoch of transactional ids as a new producer would:
  their current producers fail with PRODUCER_FENCED, and their open
  transactions are aborted by the coordinator.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from trafka.codec import TrafkaError

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["transactions_command"]


@click.group("transactions")
def transactions_command() -> None:
    """List and describe transactions and producers; find, abort hanging transactions."""


@transactions_command.command("list")
@click.option("--state", "states", multiple=True, help="Only these states (repeatable).")
@click.option(
    "--producer-id", "producer_ids", multiple=True, type=int, help="Only these (repeatable)."
)
@click.option(
    "--min-duration-ms",
    type=click.IntRange(min=0),
    help="Only transactions open at least this long (brokers of Kafka 3.8+).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def transactions_list(
    cfg: dict[str, Any],
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
    min_duration_ms: int | None,
    as_json: bool,
) -> None:
    """The transactional ids the coordinators know, with their producer id and state."""

    async def run(admin: Any) -> list[Any]:
        try:
            listed: list[Any] = await admin.list_transactions(
                states=states, producer_ids=producer_ids, min_duration_ms=min_duration_ms
            )
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--state") from None
        return listed

    listed = run_client(with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps([_listing_json(t) for t in listed]))
    elif listed:
        click.echo(
            format_table(
                ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"],
                [(t.transactional_id, t.producer_id, t.state) for t in listed],
            )
        )


@transactions_command.command("describe")
@click.argument("transactional_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def transactions_describe(
    cfg: dict[str, Any], transactional_ids: tuple[str, ...], as_json: bool
) -> None:
    """The state of transactional ids at their coordinators."""

    async def run(admin: Any) -> dict[str, Any]:
        described: dict[str, Any] = await admin.describe_transactions(transactional_ids)
        return described

    described = run_client(with_admin, cfg, run)
    now = int(time.time() * 1000)
    rows = [_description_json(described[tid], now) for tid in transactional_ids]
    if as_json:
        click.echo(json.dumps(rows))
        return
    click.echo(
        format_table(
            [
                "TRANSACTIONAL-ID",
                "COORDINATOR",
                "PRODUCER-ID",
                "EPOCH",
                "STATE",
                "TIMEOUT-MS",
                "START-TIME-MS",
                "DURATION-MS",
                "PARTITIONS",
            ],
            [
                (
                    r["transactional_id"],
                    r["coordinator_id"],
                    r["producer_id"],
                    r["producer_epoch"],
                    r["state"],
                    r["transaction_timeout_ms"],
                    r["transaction_start_time_ms"],
                    r["duration_ms"],
                    ",".join(f"{p['topic']}-{p['partition']}" for p in r["partitions"]) or None,
                )
                for r in rows
            ],
        )
    )


@transactions_command.command("describe-producers")
@click.argument("topic")
@click.option(
    "-p",
    "--partition",
    "partitions",
    multiple=True,
    type=click.IntRange(min=0),
    help="Only these partitions (repeatable); default: all.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def transactions_describe_producers(
    cfg: dict[str, Any], topic: str, partitions: tuple[int, ...], as_json: bool
) -> None:
    """The producers each partition's leader keeps state for, and their open transactions."""
    from trafka.sdk import TopicPartition

    async def run(admin: Any) -> dict[Any, Any]:
        chosen = list(partitions)
        if not chosen:
            info = (await admin.describe_topics([topic]))[topic]
            chosen = [p.partition for p in info.partitions]
        # What the reachable leaders say is shown; an offline partition, or one
        # whose leader is out of reach, is named instead of failing the rest.
        states: dict[Any, Any] = await admin.describe_producers(
            [TopicPartition(topic, p) for p in chosen], partial=True
        )
        return states

    states = run_client(with_admin, cfg, run)
    failed = {tp: s for tp, s in states.items() if isinstance(s, TrafkaError)}
    rows = [_producer_json(tp, s) for tp in sorted(states) if tp not in failed for s in states[tp]]
    if as_json:
        click.echo(json.dumps(rows))
    elif rows:
        click.echo(format_table(list(_PRODUCER_COLUMNS), [_producer_row(r) for r in rows]))
    for tp, error in sorted(failed.items()):
        click.echo(f"Error: partition {tp.topic}-{tp.partition} not described: {error}", err=True)
    if failed:
        raise click.exceptions.Exit(1)


@transactions_command.command("find-hanging")
@click.option(
    "-t", "--topic", "topics", multiple=True, help="Only these topics (repeatable); default: all."
)
@click.option(
    "--max-transaction-timeout",
    type=click.IntRange(min=0),
    default=15,
    show_default=True,
    help="Minutes; only transactions open longer than this (transaction.max.timeout.ms).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def transactions_find_hanging(
    cfg: dict[str, Any], topics: tuple[str, ...], max_transaction_timeout: int, as_json: bool
) -> None:
    """Open transactions that no coordinator will complete (KIP-664)."""

    async def run(admin: Any) -> list[dict[str, Any]]:
        found = await admin.find_hanging_transactions(
            topics or None, max_transaction_timeout_ms=max_transaction_timeout * 60_000
        )
        return [_producer_json(tp, s) for tp, s in found]

    hanging = run_client(with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps(hanging))
    elif hanging:
        click.echo(format_table(list(_PRODUCER_COLUMNS), [_producer_row(r) for r in hanging]))
    else:
        click.echo("no hanging transactions", err=True)


@transactions_command.command("abort")
@click.option("-t", "--topic", required=True)
@click.option("-p", "--partition", required=True, type=click.IntRange(min=0))
@click.option(
    "--start-offset",
    type=click.IntRange(min=0),
    help="The first offset of the transaction (from describe-producers or find-hanging).",
)
@click.option("--producer-id", type=click.IntRange(min=0), help="Instead of --start-offset.")
@click.option("--producer-epoch", type=click.IntRange(min=0), help="With --producer-id.")
@click.option(
    "--coordinator-epoch",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="With --producer-id.",
)
@admin_options
def transactions_abort(
    cfg: dict[str, Any],
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int,
) -> None:
    """Abort a hanging transaction on one partition."""
    from trafka.sdk import TopicPartition

    by_offset = start_offset is not None
    if by_offset == (producer_id is not None) or (producer_id is None) != (producer_epoch is None):
        raise click.UsageError("give either --start-offset, or --producer-id with --producer-epoch")
    tp = TopicPartition(topic, partition)

    async def run(admin: Any) -> tuple[int, int]:
        pid, epoch, coord = producer_id, producer_epoch, coordinator_epoch
        if by_offset:
            states = (await admin.describe_producers([tp]))[tp]
            found = [s for s in states if s.current_transaction_start_offset == start_offset]
            if not found:
                raise click.ClickException(
                    f"no open transaction starts at offset {start_offset} of {topic}-{partition}"
                )
            state = found[0]
            pid, epoch = state.producer_id, state.producer_epoch
            coord = state.coordinator_epoch if state.coordinator_epoch is not None else 0
        assert pid is not None and epoch is not None
        await admin.abort_transaction(tp, pid, epoch, coord)
        return pid, epoch

    pid, epoch = run_client(with_admin, cfg, run)
    click.echo(
        f"aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-{partition}",
        err=True,
    )


@transactions_command.command("fence")
@click.argument("transactional_ids", nargs=-1, required=True)
@admin_options
def transactions_fence(cfg: dict[str, Any], transactional_ids: tuple[str, ...]) -> None:
    """Fence the current producers of transactional ids (their open transactions abort)."""

    async def run(admin: Any) -> None:
        await admin.fence_producers(transactional_ids)

    run_client(with_admin, cfg, run)
    for tid in transactional_ids:
        click.echo(f"fenced {tid}", err=True)


# -- output -------------------------------------------------------------------------------

_PRODUCER_COLUMNS = {
    "TOPIC": "topic",
    "PARTITION": "partition",
    "PRODUCER-ID": "producer_id",
    "EPOCH": "producer_epoch",
    "COORDINATOR-EPOCH": "coordinator_epoch",
    "LAST-SEQUENCE": "last_sequence",
    "LAST-TIMESTAMP": "last_timestamp",
    "TXN-START-OFFSET": "current_transaction_start_offset",
}


def _producer_json(tp: Any, state: Any) -> dict[str, Any]:
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "coordinator_epoch": state.coordinator_epoch,
        "last_sequence": state.last_sequence,
        "last_timestamp": state.last_timestamp,
        "current_transaction_start_offset": state.current_transaction_start_offset,
    }


def _producer_row(row: dict[str, Any]) -> list[Any]:
    return [row[key] for key in _PRODUCER_COLUMNS.values()]


def _listing_json(listing: Any) -> dict[str, Any]:
    return {
        "transactional_id": listing.transactional_id,
        "producer_id": listing.producer_id,
        "state": listing.state,
    }


def _description_json(desc: Any, now_ms: int) -> dict[str, Any]:
    from trafka.sdk.admin import LIVE_TRANSACTION_STATES  # (loaded with the admin client)

    start = desc.transaction_start_time_ms
    return {
        "transactional_id": desc.transactional_id,
        "coordinator_id": desc.coordinator_id,
        "producer_id": desc.producer_id,
        "producer_epoch": desc.producer_epoch,
        "state": desc.state,
        "transaction_timeout_ms": desc.transaction_timeout_ms,
        "transaction_start_time_ms": start,
        "duration_ms": now_ms - start
        if start is not None and desc.state in LIVE_TRANSACTION_STATES
        else None,
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition} for tp in sorted(desc.topic_partitions)
        ],
    }
