"""``trafka elect-leaders``: leader elections on a cluster, as Kafka's
``kafka-leader-election.sh`` runs them (through the ElectLeaders API, so it works
against any Kafka cluster, not only brokerlite's).

``--all-topic-partitions`` or ``--topic T [--partition P]`` chooses the
partitions; ``--election-type preferred`` (the default) hands leadership back
to each partition's first replica, ``unclean`` elects any live replica where no
in-sync one is left (records only the old ISR had are lost). One line per
partition says what happened; the exit status is 1 when an election asked for
by name could not be carried out (ELECTION_NOT_NEEDED is not a failure).
"""

from __future__ import annotations

import json
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError

from .cli_client import _admin_options, _run, _table, _with_admin

__all__ = ["elect_leaders_command"]


@click.command("elect-leaders")
@click.option("--topic", help="The topic whose partitions to elect leaders for.")
@click.option(
    "--partition", "partitions", type=int, multiple=True, help="A partition (repeatable)."
)
@click.option("--all-topic-partitions", is_flag=True, help="Every partition that needs one.")
@click.option(
    "--election-type",
    type=click.Choice(["preferred", "unclean"], case_sensitive=False),
    default="preferred",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_admin_options
def elect_leaders_command(
    cfg: dict[str, Any],
    topic: str | None,
    partitions: tuple[int, ...],
    all_topic_partitions: bool,
    election_type: str,
    as_json: bool,
) -> None:
    """Elect partition leaders (preferred replicas, or unclean)."""
    if all_topic_partitions == (topic is not None):
        raise click.UsageError("give either --topic (with --partition) or --all-topic-partitions")
    if partitions and topic is None:
        raise click.UsageError("--partition needs --topic")

    async def run(admin: Any) -> dict[Any, KafkaError | None]:
        wanted: list[tuple[str, int]] | None = None
        if topic is not None:
            chosen = list(partitions)
            if not chosen:
                described = await admin.describe_topics([topic])
                chosen = [p.partition for p in described[topic].partitions]
            wanted = [(topic, p) for p in chosen]
        outcome: dict[Any, KafkaError | None] = await admin.elect_leaders(
            wanted, election_type=election_type.lower()
        )
        return outcome

    outcome = _run(_with_admin, cfg, run)
    rows = []
    failed = False
    for tp, error in sorted(outcome.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        if error is None:
            result = "elected"
        elif error.code == ErrorCode.ELECTION_NOT_NEEDED:
            result = "not needed"
        else:
            result = error.code.name
            failed = True
        rows.append((tp.topic, tp.partition, result))
    if as_json:
        click.echo(json.dumps([{"topic": t, "partition": p, "result": r} for t, p, r in rows]))
    elif rows:
        click.echo(_table(["TOPIC", "PARTITION", "RESULT"], rows))
    else:
        click.echo("no partition needed an election", err=True)
    if failed:
        raise SystemExit(1)
