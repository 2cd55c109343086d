"""``trafka topics`` and ``features``: list, create, delete, describe and alter
topics and add partitions, as kafka-topics.sh (and kafka-configs.sh for topic
configs) do; read or change the cluster's feature levels.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* ``topics list`` lists every topic, Kafka's internal topics too
  (``__consumer_offsets``...), unless ``--exclude-internal``, as
  ``kafka-topics.sh --list`` does.
* ``topics describe`` shows a partition without a leader as ``LEADER none``
  (as kafka-topics does) and names it on stderr; offsets it cannot look up
  are ``-``, and the command still exits 0. Without names it describes every
  topic (internal ones too, unless ``--exclude-internal``). Its report options
  (``--under-replicated-partitions``...) list only the partitions that match,
  by kafka-topics' rules (:mod:`trafka.tools.topic_health`), and exit 0
  whether or not any does.
* ``topics alter`` changes config overrides incrementally (the others stay) and
  prints the overrides after; ``topics add-partitions`` grows a topic to a
  partition count (the controller refuses a count not above the current one:
  exit 1, nothing changed).
* ``features`` alone (or ``features describe``) prints the feature levels;
  ``features upgrade``/``downgrade``/``disable`` change them, as
  kafka-features.sh does (``--feature``, ``--unsafe``, ``--dry-run``). The
  controller applies a change whole or not at all: a refusal exits 1.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError, TrafkaError

from .clikit import (
    admin_options,
    echo_err,
    format_table,
    found_offset,
    parse_pairs,
    run_client,
    with_admin,
)
from .topic_health import REPORTS, PartitionState, min_isr_of, reports_matching

__all__ = [
    "features_command",
    "topics_command",
]


@click.group("topics")
def topics_command() -> None:
    """List, create, describe, alter and delete topics; add partitions."""


@topics_command.command("list")
@click.option(
    "--exclude-internal", is_flag=True, help="Leave internal topics (__consumer_offsets...) out."
)
# Before internal topics were listed by default, --internal asked for them; a
# script that passes it gets what it asked for.
@click.option("--internal", is_flag=True, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def topics_list(cfg: dict[str, Any], exclude_internal: bool, internal: bool, as_json: bool) -> None:
    """Every topic and its partition count, internal topics too (as kafka-topics
    --list), unless --exclude-internal."""
    if internal and exclude_internal:
        raise click.UsageError("--internal and --exclude-internal contradict each other")

    async def run(admin: Any) -> dict[str, int]:
        result: dict[str, int] = await admin.list_topics(include_internal=not exclude_internal)
        return result

    topics = run_client(with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps(dict(sorted(topics.items()))))
    elif topics:
        click.echo(format_table(["TOPIC", "PARTITIONS"], sorted(topics.items())))


@topics_command.command("create")
@click.argument("names", nargs=-1, required=True)
@click.option("-p", "--partitions", type=click.IntRange(min=1), help="Default: the broker's.")
@click.option("-r", "--replication-factor", type=click.IntRange(min=1), help="Default: broker's.")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option(
    "--replica-assignment",
    metavar="B:B,B:B",
    help="Place each partition (comma-separated, from 0) on these brokers (colon-separated, "
    "the first its preferred leader), as kafka-topics; instead of -p/-r.",
)
@click.option("--if-not-exists", is_flag=True, help="An existing topic is not an error.")
@admin_options
def topics_create(
    cfg: dict[str, Any],
    names: tuple[str, ...],
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    replica_assignment: str | None,
    if_not_exists: bool,
) -> None:
    """Create topics."""
    from trafka.sdk import NewTopic

    settings = parse_pairs(configs, "-c")
    if replica_assignment is None:
        new = [NewTopic(n, partitions or -1, replication_factor or -1, settings) for n in names]
    elif partitions or replication_factor:
        raise click.UsageError("--replica-assignment says the partitions and replicas: no -p/-r")
    else:
        placed = _assignment(replica_assignment)
        new = [NewTopic(n, configs=settings, replica_assignments=placed) for n in names]

    async def run(admin: Any) -> list[str]:
        created = []
        for topic in new:
            try:
                await admin.create_topics([topic])
            except KafkaError as exc:
                if if_not_exists and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                    continue
                raise
            created.append(topic.name)
        return created

    for name in run_client(with_admin, cfg, run):
        click.echo(f"created {name}", err=True)


@topics_command.command("delete")
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="A missing topic is not an error.")
@admin_options
def topics_delete(cfg: dict[str, Any], names: tuple[str, ...], if_exists: bool) -> None:
    """Delete topics (and their records)."""

    async def run(admin: Any) -> list[str]:
        deleted = []
        for name in names:
            try:
                await admin.delete_topics([name])
            except KafkaError as exc:
                if if_exists and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    continue
                raise
            deleted.append(name)
        return deleted

    for name in run_client(with_admin, cfg, run):
        click.echo(f"deleted {name}", err=True)


@topics_command.command("describe")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--exclude-internal", is_flag=True, help="Without NAMES: leave internal topics out.")
@click.option(
    "--under-replicated-partitions",
    "under_replicated",
    is_flag=True,
    help="Only partitions with fewer in-sync replicas than replicas.",
)
@click.option(
    "--unavailable-partitions",
    "unavailable",
    is_flag=True,
    help="Only partitions without a leader, or whose leader is not alive.",
)
@click.option(
    "--under-min-isr-partitions",
    "under_min_isr",
    is_flag=True,
    help="Only partitions with fewer in-sync replicas than min.insync.replicas.",
)
@click.option(
    "--at-min-isr-partitions",
    "at_min_isr",
    is_flag=True,
    help="Only partitions with exactly min.insync.replicas in-sync replicas.",
)
@click.option(
    "--topics-with-overrides",
    is_flag=True,
    help="Only topics with config overrides, without their partitions.",
)
@admin_options
def topics_describe(
    cfg: dict[str, Any],
    names: tuple[str, ...],
    as_json: bool,
    exclude_internal: bool,
    under_replicated: bool,
    unavailable: bool,
    under_min_isr: bool,
    at_min_isr: bool,
    topics_with_overrides: bool,
) -> None:
    """Partitions (leader, replicas, ISR, offsets, size on disk) and config
    overrides of topics: NAMES, or every topic. The report options list only the
    partitions that need attention, as kafka-topics' do."""
    asked = [
        name
        for name, on in zip(
            REPORTS, (under_replicated, unavailable, under_min_isr, at_min_isr), strict=True
        )
        if on
    ]
    if asked:
        if topics_with_overrides:
            raise click.UsageError("--topics-with-overrides lists topics, not partitions")
        report = functools.partial(
            _report_partitions, names=names, exclude_internal=exclude_internal, asked=asked
        )
        _print_reports(run_client(with_admin, cfg, report), as_json)
        return
    describe = functools.partial(_describe_topics, names=names, exclude_internal=exclude_internal)
    described = run_client(with_admin, cfg, describe)
    if topics_with_overrides:
        described = [t for t in described if t["configs"]]
        for t in described:
            t.pop("partitions")
    offline = [
        f"{t['topic']}-{p['partition']}"
        for t in described
        for p in t.get("partitions", ())
        if p["leader"] < 0
    ]
    if offline:
        echo_err(f"warning: offline (no leader): {', '.join(offline)}")
    if as_json:
        click.echo(json.dumps(described))
        return
    for i, t in enumerate(described):
        if i and "partitions" in t:
            click.echo()
        _print_topic(t)


async def _topic_names(admin: Any, names: tuple[str, ...], exclude_internal: bool) -> list[str]:
    """NAMES as given, or every topic (internal ones too unless excluded), sorted."""
    if names:
        return list(dict.fromkeys(names))
    return sorted(await admin.list_topics(include_internal=not exclude_internal))


async def _describe_topics(
    admin: Any, *, names: tuple[str, ...], exclude_internal: bool
) -> list[dict[str, Any]]:
    from trafka.codec import UnsupportedVersionError
    from trafka.sdk import TopicPartition

    wanted = await _topic_names(admin, names, exclude_internal)
    if not wanted:
        return []
    infos = await admin.describe_topics(wanted)
    configs = await admin.describe_configs(topics=wanted, overrides_only=True)
    tps = [TopicPartition(n, p.partition) for n in wanted for p in infos[n].partitions]
    # A partition without a leader is described as it is (kafka-topics'
    # "Leader: none"): nobody can tell its offsets, and nobody is asked.
    led = [
        TopicPartition(n, p.partition) for n in wanted for p in infos[n].partitions if p.leader >= 0
    ]
    earliest = await admin.list_offsets(dict.fromkeys(led, "earliest"), partial=True)
    latest = await admin.list_offsets(dict.fromkeys(led, "latest"), partial=True)
    for tp, hit in latest.items():
        if isinstance(hit, TrafkaError):
            echo_err(f"warning: the offsets of {tp.topic}-{tp.partition} are unknown: {hit}")
    # The leader's bytes on disk (DescribeLogDirs); brokers without the API: none.
    sizes: dict[tuple[int, TopicPartition], int] = {}
    try:
        for d in await admin.describe_log_dirs(tps) if tps else []:
            for tp, size in d.partitions.items():
                key = (d.node_id, tp)
                sizes[key] = sizes.get(key, 0) + size
    except (TrafkaError, UnsupportedVersionError):
        pass
    out = []
    for n in wanted:
        info = infos[n]
        parts = []
        for p in info.partitions:
            tp = TopicPartition(n, p.partition)
            lo, hi = found_offset(earliest.get(tp)), found_offset(latest.get(tp))
            parts.append(
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "earliest_offset": lo[0] if lo else None,
                    "latest_offset": hi[0] if hi else None,
                    "size_bytes": sizes.get((p.leader, tp)),
                }
            )
        out.append(
            {
                "topic": n,
                "topic_id": str(info.topic_id),
                "internal": info.is_internal,
                "partitions": parts,
                "configs": configs.get(n, {}),
            }
        )
    return out


def _print_topic(t: dict[str, Any]) -> None:
    parts = t.get("partitions")
    header = f"Topic: {t['topic']}  TopicId: {t['topic_id']}"
    if parts is not None:
        rf = len(parts[0]["replicas"]) if parts else 0
        header += f"  PartitionCount: {len(parts)}  ReplicationFactor: {rf}"
    click.echo(header)
    if t["configs"]:
        click.echo("Configs: " + ", ".join(f"{k}={v}" for k, v in sorted(t["configs"].items())))
    if parts is None:
        return
    rows = [
        (
            p["partition"],
            p["leader"] if p["leader"] >= 0 else "none",
            ",".join(map(str, p["replicas"])),
            ",".join(map(str, p["isr"])),
            p["earliest_offset"],
            p["latest_offset"],
            "-" if p["size_bytes"] is None else p["size_bytes"],
        )
        for p in parts
    ]
    click.echo(
        format_table(["PARTITION", "LEADER", "REPLICAS", "ISR", "EARLIEST", "LATEST", "SIZE"], rows)
    )


async def _report_partitions(
    admin: Any, *, names: tuple[str, ...], exclude_internal: bool, asked: list[str]
) -> list[dict[str, Any]]:
    """The partitions of NAMES (or every topic) that ``asked`` reports list
    (see :mod:`trafka.tools.topic_health`)."""
    from trafka.codec import UnsupportedVersionError
    from trafka.sdk import TopicPartition

    wanted = await _topic_names(admin, names, exclude_internal)
    infos = await admin.describe_topics(wanted) if wanted else {}
    configs = await admin.describe_configs(topics=wanted) if wanted else {}
    live = {b.node_id for b in (await admin.describe_cluster()).brokers}
    # Kafka's tool does without reassignments where it may not list them.
    tps = [TopicPartition(n, p.partition) for n in wanted for p in infos[n].partitions]
    try:
        moving = await admin.list_partition_reassignments(tps) if tps else {}
    except (KafkaError, UnsupportedVersionError):
        moving = {}
    rows: list[dict[str, Any]] = []
    for n in wanted:
        min_isr = min_isr_of(configs.get(n, {}))
        if min_isr is None and {"under-min-isr", "at-min-isr"} & set(asked):
            echo_err(f"warning: {n}: min.insync.replicas is unknown; min-ISR reports skip it")
        for p in infos[n].partitions:
            move = moving.get(TopicPartition(n, p.partition))
            state = PartitionState(
                p.leader, p.replicas, p.isr, move.adding_replicas if move else ()
            )
            found = reports_matching(state, live_brokers=live, min_isr=min_isr, asked=asked)
            if found:
                rows.append(
                    {
                        "topic": n,
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "adding_replicas": list(state.adding),
                        "min_isr": min_isr,
                        "reports": found,
                    }
                )
    return rows


def _print_reports(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(rows))
    elif rows:
        table = [
            (
                r["topic"],
                r["partition"],
                r["leader"] if r["leader"] >= 0 else "none",
                ",".join(map(str, r["replicas"])),
                ",".join(map(str, r["isr"])),
                r["min_isr"],
                ",".join(r["reports"]),
            )
            for r in rows
        ]
        headers = ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "MIN.ISR", "REPORTS"]
        click.echo(format_table(headers, table))


@topics_command.command("alter")
@click.argument("names", nargs=-1, required=True)
@click.option(
    "--add-config",
    "-c",
    "add",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a config override (repeatable).",
)
@click.option(
    "--delete-config",
    "delete",
    multiple=True,
    metavar="KEY",
    help="Remove an override: the topic takes the broker's value again (repeatable).",
)
@click.option("--if-exists", is_flag=True, help="A missing topic is not an error.")
@admin_options
def topics_alter(
    cfg: dict[str, Any],
    names: tuple[str, ...],
    add: tuple[str, ...],
    delete: tuple[str, ...],
    if_exists: bool,
) -> None:
    """Change topics' config overrides (kafka-configs' --add-config and
    --delete-config). Other overrides are kept; the overrides are printed after."""
    changes: dict[str, str | None] = dict(parse_pairs(add, "--add-config"))
    for key in delete:
        if not key or "=" in key:
            raise click.BadParameter(f"{key!r} is not a config name", param_hint="--delete-config")
        if key in changes:
            raise click.BadParameter(f"{key} is both set and deleted", param_hint="--delete-config")
        changes[key] = None
    if not changes:
        raise click.UsageError("nothing to change: give --add-config or --delete-config")

    async def run(admin: Any) -> dict[str, dict[str, str | None]]:
        done: dict[str, dict[str, str | None]] = {}
        for name in dict.fromkeys(names):
            try:
                await admin.alter_topic_configs({name: changes})
            except KafkaError as exc:
                if if_exists and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    continue
                raise
            done[name] = (await admin.describe_configs(topics=[name], overrides_only=True))[name]
        return done

    for name, overrides in run_client(with_admin, cfg, run).items():
        now = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "none"
        click.echo(f"altered {name}; overrides now: {now}", err=True)


@topics_command.command("add-partitions")
@click.argument("names", nargs=-1, required=True)
@click.option(
    "-p",
    "--partitions",
    type=click.IntRange(min=1),
    required=True,
    help="The new partition count (more than now).",
)
@click.option(
    "--replica-assignment",
    metavar="B:B,B:B",
    help="Every partition's brokers, as kafka-topics --alter: those of the partitions "
    "the topic has are skipped, the rest place the new ones.",
)
@click.option("--if-exists", is_flag=True, help="A missing topic is not an error.")
@click.option("--dry-run", is_flag=True, help="Have the controller check it; change nothing.")
@admin_options
def topics_add_partitions(
    cfg: dict[str, Any],
    names: tuple[str, ...],
    partitions: int,
    replica_assignment: str | None,
    if_exists: bool,
    dry_run: bool,
) -> None:
    """Grow topics to PARTITIONS partitions (kafka-topics --alter --partitions).

    Records with a key go to the partition their key hashes to among all
    partitions, so after this a key's new records may land on another partition
    than its old ones: ordering per key holds only from here on."""
    from trafka.sdk import NewPartitions

    placed = None if replica_assignment is None else _assignment(replica_assignment)

    async def run(admin: Any) -> list[tuple[str, int]]:
        grown = []
        for name in dict.fromkeys(names):
            try:
                before = (await admin.describe_topics([name]))[name].partitions
                added = (
                    None if placed is None else [placed[p] for p in sorted(placed)][len(before) :]
                )
                new = NewPartitions(partitions, added)
                await admin.create_partitions({name: new}, validate_only=dry_run)
            except KafkaError as exc:
                if if_exists and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    continue
                raise
            grown.append((name, len(before)))
        return grown

    for name, before in run_client(with_admin, cfg, run):
        if dry_run:
            click.echo(
                f"{name} can grow from {before} to {partitions} partitions (dry run)", err=True
            )
        else:
            click.echo(f"{name}: {before} -> {partitions} partitions", err=True)
            if before:
                echo_err(f"note: keyed records of {name} may now hash to other partitions")


def _assignment(text: str) -> dict[int, list[int]]:
    """kafka-topics' ``--replica-assignment``: partitions by commas, from 0, each
    its brokers by colons; no broker twice in a partition, as many in each."""
    placed: dict[int, list[int]] = {}
    for partition, brokers in enumerate(text.split(",")):
        try:
            ids = [int(b) for b in brokers.split(":")]
        except ValueError:
            raise click.BadParameter(
                f"partition {partition}: {brokers!r} is not broker ids separated by ':'",
                param_hint="--replica-assignment",
            ) from None
        if len(set(ids)) != len(ids):
            raise click.BadParameter(
                f"partition {partition} names a broker twice: {brokers}",
                param_hint="--replica-assignment",
            )
        if placed and len(ids) != len(placed[0]):
            raise click.BadParameter(
                f"partition {partition} has {len(ids)} replicas, partition 0 {len(placed[0])}",
                param_hint="--replica-assignment",
            )
        placed[partition] = ids
    return placed


def _level_range(levels: tuple[int, int] | None) -> str | None:
    if levels is None:
        return None
    low, high = levels
    return str(high) if low == high else f"{low}-{high}"


def _describe_features(cfg: dict[str, Any], as_json: bool) -> None:
    async def run(admin: Any) -> Any:
        return await admin.describe_features()

    found = run_client(with_admin, cfg, run)
    names = sorted(set(found.supported) | set(found.finalized))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "finalized_epoch": found.finalized_epoch,
                    "features": {
                        name: {
                            "supported": found.supported.get(name),
                            "finalized": found.finalized.get(name),
                        }
                        for name in names
                    },
                }
            )
        )
        return
    if not names:
        # Kafka 3.9 on ZooKeeper reports none either, though it has KIP-584.
        click.echo(
            "the broker reports no features (Kafka before 2.7, or 3.x on ZooKeeper)", err=True
        )
        return
    rows = [
        (
            name,
            _level_range(found.supported.get(name)),
            _level_range(found.finalized.get(name)),
            found.finalized_epoch if name in found.finalized else None,
        )
        for name in names
    ]
    click.echo(format_table(["FEATURE", "SUPPORTED", "FINALIZED", "EPOCH"], rows))


@click.group("features", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (describe).")
@admin_options
def features_command(cfg: dict[str, Any], as_json: bool) -> None:
    """Describe and change the cluster's feature levels (KIP-584), as kafka-features.sh.

    \b
    Without a subcommand: describe (the levels a broker supports, those the
    cluster has finalized, and the epoch of the finalized ones).
    upgrade --feature NAME=LEVEL     raise levels
    downgrade --feature NAME=LEVEL   lower levels (--unsafe: even if metadata is lost)
    disable --feature NAME           lower to 0, which removes the feature
    --dry-run has the controller validate the change, which changes nothing.
    A request is applied whole or not at all.
    """
    if click.get_current_context().invoked_subcommand is None:
        _describe_features(cfg, as_json)


@features_command.command("describe")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def features_describe(cfg: dict[str, Any], as_json: bool) -> None:
    """The supported and finalized levels and the finalized epoch."""
    _describe_features(cfg, as_json)


def _feature_levels(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in values:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=LEVEL", param_hint="--feature")
        try:
            level = int(text)
        except ValueError:
            raise click.BadParameter(
                f"{name}: {text.strip()!r} is not a level", param_hint="--feature"
            ) from None
        if level < 0:
            raise click.BadParameter(f"{name}: a level cannot be negative", param_hint="--feature")
        if name in out:
            raise click.BadParameter(f"{name} given twice", param_hint="--feature")
        out[name] = level
    return out


def _explain_features(exc: KafkaError, verb: str) -> click.ClickException:
    name = exc.code.name if isinstance(exc.code, ErrorCode) else str(exc.code)
    if exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return click.ClickException(
            f"this client's principal may not {verb} features (CLUSTER_AUTHORIZATION_FAILED): "
            "it needs ALTER on the cluster, or to be a super user"
        )
    reason = str(exc).partition("] ")[2] or str(exc)  # without the code named already
    return click.ClickException(f"could not {verb} (nothing changed): {name}: {reason}")


def _update_features(
    cfg: dict[str, Any], levels: dict[str, int], upgrade_type: str, dry_run: bool, verb: str
) -> None:
    from trafka.sdk import FeatureUpdate, UpgradeType

    kind = UpgradeType[upgrade_type]
    updates = {name: FeatureUpdate(level, kind) for name, level in levels.items()}

    async def run(admin: Any) -> dict[str, Any]:
        result: dict[str, Any] = await admin.update_features(updates, validate_only=dry_run)
        return result

    outcome = run_client(with_admin, cfg, run, explain=lambda exc: _explain_features(exc, verb))
    failed = False
    for name, level in levels.items():
        error = outcome.get(name)
        past = "disabled" if verb == "disable" else f"{verb}d to {level}"
        if error is not None:
            failed = True
            click.echo(f"{name}: could not be {past}: {error}", err=True)
        elif dry_run:
            can = "disabled" if verb == "disable" else f"{verb}d to {level}"
            click.echo(f"{name} can be {can} (dry run: nothing changed)")
        else:
            click.echo(f"{name} was {past}")
    if failed:
        raise click.exceptions.Exit(1)


_FEATURE_HELP = "NAME=LEVEL, e.g. group.version=1 (repeatable)."
_DRY_RUN_HELP = "Have the controller validate the change (validate_only); nothing changes."
_UNSAFE_HELP = "An unsafe downgrade: go on even if metadata of the higher level is lost."


@features_command.command("upgrade")
@click.option("--feature", "features", multiple=True, required=True, help=_FEATURE_HELP)
@click.option("--dry-run", is_flag=True, help=_DRY_RUN_HELP)
@admin_options
def features_upgrade(cfg: dict[str, Any], features: tuple[str, ...], dry_run: bool) -> None:
    """Raise (or keep) feature levels."""
    _update_features(cfg, _feature_levels(features), "UPGRADE", dry_run, "upgrade")


@features_command.command("downgrade")
@click.option("--feature", "features", multiple=True, required=True, help=_FEATURE_HELP)
@click.option("--unsafe", is_flag=True, help=_UNSAFE_HELP)
@click.option("--dry-run", is_flag=True, help=_DRY_RUN_HELP)
@admin_options
def features_downgrade(
    cfg: dict[str, Any], features: tuple[str, ...], unsafe: bool, dry_run: bool
) -> None:
    """Lower feature levels (0 removes a feature, as disable)."""
    kind = "UNSAFE_DOWNGRADE" if unsafe else "SAFE_DOWNGRADE"
    _update_features(cfg, _feature_levels(features), kind, dry_run, "downgrade")


@features_command.command("disable")
@click.option("--feature", "features", multiple=True, required=True, help="NAME (repeatable).")
@click.option("--unsafe", is_flag=True, help=_UNSAFE_HELP)
@click.option("--dry-run", is_flag=True, help=_DRY_RUN_HELP)
@admin_options
def features_disable(
    cfg: dict[str, Any], features: tuple[str, ...], unsafe: bool, dry_run: bool
) -> None:
    """Lower features to level 0, which removes them from the finalized ones."""
    names = [f.strip() for f in features]
    if any(not n or "=" in n for n in names):
        raise click.BadParameter("give feature names without levels", param_hint="--feature")
    if len(set(names)) < len(names):
        raise click.BadParameter("a feature is given twice", param_hint="--feature")
    kind = "UNSAFE_DOWNGRADE" if unsafe else "SAFE_DOWNGRADE"
    _update_features(cfg, dict.fromkeys(names, 0), kind, dry_run, "disable")
