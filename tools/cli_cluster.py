"""Cluster operations, as Kafka's tools run them, through the Kafka protocol (so
they work against any Kafka cluster, not only brokerlite's):

* ``trafka elect-leaders``: leader elections (``kafka-leader-election.sh``,
  the ElectLeaders API).
* ``trafka reassign generate|execute|verify``: moving partitions between
  brokers in three steps (``kafka-reassign-partitions.sh``, with its JSON
  files; the AlterPartitionReassignments and ListPartitionReassignments APIs).

reassign's throttle (KIP-73), as Kafka's tool sets it: ``execute --throttle B``
(bytes/s) sets, before the moves start, ``leader.replication.throttled.rate``
and ``follower.replication.throttled.rate`` on every broker a partition moves
from or to, and on each topic ``leader.replication.throttled.replicas`` (the
``partition:broker`` pairs it moves from) and
``follower.replication.throttled.replicas`` (the pairs it moves to, not
already among them); a move under way counts from where it started.
``verify``, once every move is complete, deletes all four, on every broker of
the cluster and of the plan and on each topic of the plan, unless
``--preserve-throttles``.

elect-leaders:

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

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["elect_leaders_command", "reassign_command", "throttle_configs"]

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


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
@admin_options
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

    outcome = run_client(with_admin, cfg, run)
    rows = []
    failed = []
    for tp, error in sorted(outcome.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        if error is None:
            result = "elected"
        elif error.code == ErrorCode.ELECTION_NOT_NEEDED:
            result = "not needed"
        else:
            result = error.code.name
            failed.append(f"{tp.topic}-{tp.partition}: {error}")
        rows.append((tp.topic, tp.partition, result))
    if as_json:
        click.echo(json.dumps([{"topic": t, "partition": p, "result": r} for t, p, r in rows]))
    elif rows:
        click.echo(format_table(["TOPIC", "PARTITION", "RESULT"], rows))
    else:
        click.echo("no partition needed an election", err=True)
    for line in failed:
        # The table is the data; what went wrong is said where errors go too.
        click.echo(f"Error: no leader elected for {line}", err=True)
    if failed:
        raise SystemExit(1)


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot read the {what} file {path}: {exc}") from None


def _plan_file(doc: Any, path: str) -> dict[tuple[str, int], list[int]]:
    """A reassignment JSON file (Kafka's format) as {(topic, partition): replicas}."""
    try:
        entries = doc["partitions"]
        plan = {
            (str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]] for e in entries
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise click.UsageError(
            f"{path}: not a reassignment file "
            '({"version":1,"partitions":[{"topic":...,"partition":...,"replicas":[...]}]}): '
            f"{exc}"
        ) from None
    return plan


def _assignment_json(assignment: dict[tuple[str, int], list[int]]) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(assignment.items())
            ],
        }
    )


async def _current(admin: Any, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    described = await admin.describe_topics(topics)
    return {
        (name, p.partition): list(p.replicas)
        for name, info in described.items()
        for p in info.partitions
    }


def throttle_configs(
    plan: dict[tuple[str, int], list[int]],
    current: dict[tuple[str, int], list[int]],
    ongoing: dict[tuple[str, int], tuple[list[int], list[int]]],
) -> tuple[dict[str, dict[str, str | None]], list[int]]:
    """The topic configs and the brokers of a throttled reassignment, as Kafka's
    tool computes them (``calculateProposedMoveMap``, ``calculateLeaderThrottles``,
    ``calculateFollowerThrottles``, ``calculateReassigningBrokers``).

    Args:
        plan: the moves asked for: partition -> target replicas.
        current: the partitions' replicas now.
        ongoing: the moves under way: partition -> (replicas, adding replicas);
            they are throttled too, from where they started.

    Returns:
        Per topic, its two throttled-replicas lists; and the brokers to give the
        rates to, sorted.
    """
    moves: dict[tuple[str, int], tuple[set[int], set[int]]] = {}
    for key, (replicas, adding) in ongoing.items():
        moves[key] = (set(replicas) - set(adding), set(adding))
    for key, target in plan.items():
        if key in moves:
            sources = moves[key][0]
        elif key in current:
            sources = set(current[key])
        else:
            raise click.ClickException(f"{key[0]}-{key[1]}: no such partition")
        moves[key] = (sources, set(target) - sources)
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    for (topic, partition), (sources, destinations) in moves.items():
        leaders.setdefault(topic, set()).update(f"{partition}:{b}" for b in sources)
        followers.setdefault(topic, set()).update(f"{partition}:{b}" for b in destinations)
    # Sorted as strings, as the tool's TreeSet of "partition:broker" sorts them.
    configs: dict[str, dict[str, str | None]] = {
        topic: {
            LEADER_REPLICAS: ",".join(sorted(leaders[topic])),
            FOLLOWER_REPLICAS: ",".join(sorted(followers[topic])),
        }
        for topic in sorted(leaders)
    }
    brokers = sorted({b for sources, dests in moves.values() for b in sources | dests})
    return configs, brokers


@click.group("reassign")
def reassign_command() -> None:
    """Move partitions between brokers: generate a plan, execute it, verify it."""


@reassign_command.command("generate")
@click.option(
    "--topics-to-move-json-file",
    "topics_file",
    required=True,
    help='{"version":1,"topics":[{"topic":"foo"}]}',
)
@click.option("--broker-list", required=True, metavar="ID,ID,...", help="The brokers to move to.")
@admin_options
def reassign_generate(cfg: dict[str, Any], topics_file: str, broker_list: str) -> None:
    """Print the topics' current assignment and one that spreads them over the brokers."""
    from trafka.brokerlite.cluster.controller import AssignmentError, assign_replicas

    doc = _read_json(topics_file, "topics-to-move")
    try:
        topics = [str(t["topic"]) for t in doc["topics"]]
        brokers = [int(b) for b in broker_list.split(",") if b.strip()]
    except (KeyError, TypeError, ValueError) as exc:
        raise click.UsageError(f"bad topics file or broker list: {exc}") from None

    async def run(admin: Any) -> dict[tuple[str, int], list[int]]:
        return await _current(admin, topics)

    current = run_client(with_admin, cfg, run)
    proposed: dict[tuple[str, int], list[int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        if not parts:
            continue
        factor = len(current[(topic, parts[0])])
        try:
            placed = assign_replicas(brokers, len(parts), factor)
        except AssignmentError as exc:
            raise click.ClickException(f"{topic}: {exc}") from None
        for p in parts:
            proposed[(topic, p)] = list(placed[p])
    click.echo("Current partition replica assignment")
    click.echo(_assignment_json(current))
    click.echo("")
    click.echo("Proposed partition reassignment configuration")
    click.echo(_assignment_json(proposed))


@reassign_command.command("execute")
@click.option("--reassignment-json-file", "plan_file", required=True, help="The plan to carry out.")
@click.option(
    "--throttle",
    type=click.IntRange(min=-1),
    default=-1,
    show_default=True,
    metavar="BYTES/S",
    help="Throttle the moves' replication to this rate on each broker (-1: none); "
    "run verify until it completes to remove the throttle.",
)
@admin_options
def reassign_execute(cfg: dict[str, Any], plan_file: str, throttle: int) -> None:
    """Start the moves of a reassignment file; print the current assignment for rollback."""
    plan = _plan_file(_read_json(plan_file, "reassignment"), plan_file)

    async def run(admin: Any) -> tuple[dict[tuple[str, int], list[int]], dict[Any, Any]]:
        current = await _current(admin, sorted({t for t, _ in plan}))
        if throttle >= 0:
            moving = await admin.list_partition_reassignments()
            ongoing = {
                (tp.topic, tp.partition): (list(r.replicas), list(r.adding_replicas))
                for tp, r in moving.items()
            }
            topic_configs, brokers = throttle_configs(plan, current, ongoing)
            await admin.alter_topic_configs(topic_configs)
            rates: dict[str, str | None] = {
                LEADER_RATE: str(throttle),
                FOLLOWER_RATE: str(throttle),
            }
            await admin.alter_broker_configs({b: rates for b in brokers})
        outcome = await admin.alter_partition_reassignments(plan)
        return current, outcome

    current, outcome = run_client(with_admin, cfg, run)
    click.echo("Current partition replica assignment")
    click.echo("")
    click.echo(_assignment_json({k: v for k, v in current.items() if k in plan}))
    click.echo("")
    click.echo("Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        click.echo(
            "Warning: You must run --verify periodically, until the reassignment completes, "
            "to ensure the throttle is removed."
        )
        click.echo(f"The inter-broker throttle limit was set to {throttle} B/s")
    failed = {tp: e for tp, e in outcome.items() if e is not None}
    started = sorted(f"{tp.topic}-{tp.partition}" for tp, e in outcome.items() if e is None)
    if started:
        click.echo(f"Successfully started partition reassignments for {','.join(started)}")
    for tp, error in sorted(failed.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        click.echo(f"Error reassigning {tp.topic}-{tp.partition}: {error}", err=True)
    if failed:
        raise SystemExit(1)


@reassign_command.command("verify")
@click.option("--reassignment-json-file", "plan_file", required=True, help="The plan executed.")
@click.option(
    "--preserve-throttles",
    is_flag=True,
    help="Leave the replication throttles in place when every move is complete.",
)
@admin_options
def reassign_verify(cfg: dict[str, Any], plan_file: str, preserve_throttles: bool) -> None:
    """Say, per partition of a reassignment file, whether its move is complete; exit 1
    while any is still in progress or ended elsewhere than planned. Once every move
    is complete, remove the replication throttles (see ``execute --throttle``)."""
    plan = _plan_file(_read_json(plan_file, "reassignment"), plan_file)

    async def run(admin: Any) -> tuple[dict[Any, Any], dict[tuple[str, int], list[int]]]:
        ongoing = await admin.list_partition_reassignments(list(plan))
        current = await _current(admin, sorted({t for t, _ in plan}))
        return ongoing, current

    ongoing, current = run_client(with_admin, cfg, run)
    moving = {(tp.topic, tp.partition) for tp in ongoing}
    if not moving and not preserve_throttles:
        _clear_throttles(cfg, plan)
    click.echo("Status of partition reassignment:")
    unfinished = False
    for (topic, partition), target in sorted(plan.items()):
        if (topic, partition) in moving:
            state = "is still in progress."
            unfinished = True
        elif current.get((topic, partition)) == target:
            state = "is completed."
        else:
            state = f"failed: its replicas are {current.get((topic, partition))}, not {target}."
            unfinished = True
        click.echo(f"Reassignment of partition {topic}-{partition} {state}")
    if unfinished:
        raise SystemExit(1)


def _clear_throttles(cfg: dict[str, Any], plan: dict[tuple[str, int], list[int]]) -> None:
    """Delete the four throttle configs, as Kafka's tool does once the moves are
    complete: on every broker of the cluster and of the plan (which brokers an
    earlier execute throttled is not known), and on each topic of the plan."""
    topics = sorted({t for t, _ in plan})

    async def run(admin: Any) -> list[int]:
        brokers = {n.node_id for n in (await admin.describe_cluster()).brokers}
        brokers.update(b for replicas in plan.values() for b in replicas)
        rates: dict[str, str | None] = {LEADER_RATE: None, FOLLOWER_RATE: None}
        await admin.alter_broker_configs({b: rates for b in sorted(brokers)})
        lists: dict[str, str | None] = {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None}
        await admin.alter_topic_configs({t: lists for t in topics})
        return sorted(brokers)

    brokers = run_client(with_admin, cfg, run)
    click.echo(
        f"Clearing broker-level throttles on broker{'s' if len(brokers) != 1 else ''} "
        f"{','.join(map(str, brokers))}"
    )
    click.echo(
        f"Clearing topic-level throttles on topic{'s' if len(topics) != 1 else ''} "
        f"{','.join(topics)}"
    )
