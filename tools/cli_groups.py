"""``trafka groups``: list, describe, reset and delete consumer and share groups,
their offsets, members and configs, like Kafka's ``kafka-consumer-groups.sh``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* ``groups reset-offsets`` is a dry run unless ``--execute`` is given, and
  refuses a group with active members, as Kafka's tool does.
* ``groups list`` shows each group's type (classic, consumer, share; ``-t``
  filters). ``groups describe`` of a share group (DescribeGroups does not know
  one) prints what ShareGroupDescribe says instead of offsets and lag: state,
  epochs and members with their subscriptions and assignments. Other groups
  print as before.
* ``groups remove-members`` removes static members by ``--instance-id`` (or
  ``--all`` members) through Admin.remove_members_from_consumer_group, one line
  per member on stderr; it exits 1 when any member was not removed.
* ``groups configs`` and ``groups set-config`` read and change group configs
  (ConfigResource GROUP: ``share.auto.offset.reset``...). ``set-config``
  changes only the keys given (IncrementalAlterConfigs); the broker validates
  them, and a refusal, which changes nothing, is one line naming its reason.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError, TrafkaError

from .clikit import (
    admin_options,
    echo_err,
    format_table,
    found_offset,
    parse_pairs,
    parse_timestamp,
    run_client,
    with_admin,
)

__all__ = [
    "GROUP_TYPES",
    "groups_command",
]


#: Kafka's group types (``groups list --type``).
GROUP_TYPES = ("classic", "consumer", "share", "streams")


@click.group("groups")
def groups_command() -> None:
    """List and describe groups (consumer groups with lag, share groups with start
    offsets and lag), reset their offsets, delete them; show and set group configs."""


@groups_command.command("list")
@click.option(
    "-t",
    "--type",
    "types",
    multiple=True,
    type=click.Choice(GROUP_TYPES, case_sensitive=False),
    help="Only groups of this type (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def groups_list(cfg: dict[str, Any], types: tuple[str, ...], as_json: bool) -> None:
    """Every group: id, state, protocol type and group type (classic, consumer or share)."""

    async def run(admin: Any) -> list[Any]:
        result: list[Any] = await admin.list_groups(types=[t.lower() for t in types] or None)
        return result

    groups = sorted(run_client(with_admin, cfg, run), key=lambda g: g.group_id)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(g) for g in groups]))
    elif groups:
        click.echo(
            format_table(
                ["GROUP", "STATE", "PROTOCOL-TYPE", "TYPE"],
                [(g.group_id, g.state, g.protocol_type, g.group_type) for g in groups],
            )
        )


async def _share_description(admin: Any, group_id: str) -> Any:
    """``group_id``'s ShareGroupDescription; None when it is not a share group, or
    the broker has no share groups."""
    try:
        return (await admin.describe_share_groups([group_id]))[group_id]
    except KafkaError as exc:
        if exc.code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
            return None
        raise


async def _classic_or_share(admin: Any, group_id: str) -> tuple[Any, Any]:
    """``(GroupDescription, None)`` for a classic or consumer group (or none at all:
    DescribeGroups calls it Dead), ``(None, ShareGroupDescription)`` for a share group.

    DescribeGroups knows classic groups (the SDK falls back on
    ConsumerGroupDescribe); a share group is neither: brokerlite calls it Dead,
    Kafka GROUP_ID_NOT_FOUND. Only then is ShareGroupDescribe asked.
    """
    try:
        desc = (await admin.describe_groups([group_id]))[group_id]
    except KafkaError as exc:
        if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise
        share = await _share_description(admin, group_id)
        if share is None:
            raise
        return None, share
    if desc.state == "Dead" and not desc.members:
        share = await _share_description(admin, group_id)
        if share is not None:
            return None, share
    return desc, None


async def _share_offsets(admin: Any, group_id: str) -> list[dict[str, Any]] | None:
    """Every partition the share group has state for, with its start offset and lag
    (None: the broker does not serve DescribeShareGroupOffsets, before Kafka 4.1)."""
    try:
        offsets = await admin.list_share_group_offsets(group_id)
    except KafkaError as exc:
        if exc.code == ErrorCode.UNSUPPORTED_VERSION:
            return None
        raise
    return [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "start_offset": info.start_offset if info else None,
            "leader_epoch": info.leader_epoch if info else None,
            "lag": info.lag if info else None,
        }
        for tp, info in offsets.items()
    ]


async def _describe_share_group(admin: Any, group_id: str, desc: Any) -> dict[str, Any]:
    """A share group (its ShareGroupDescription ``desc``) as ``describe``'s JSON."""
    partitions = await _share_offsets(admin, group_id)
    return {
        "group": group_id,
        "type": "share",
        "state": desc.state,
        "group_epoch": desc.group_epoch,
        "assignment_epoch": desc.assignment_epoch,
        "assignor": desc.assignor,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "subscribed_topics": sorted(m.subscribed_topics),
                "assignment": sorted([tp.topic, tp.partition] for tp in m.assignment),
            }
            for m in desc.members
        ],
        "partitions": partitions,
        "total_lag": None if partitions is None else sum(p["lag"] or 0 for p in partitions),
    }


async def _describe_group(admin: Any, group_id: str) -> dict[str, Any]:
    desc, share = await _classic_or_share(admin, group_id)
    if share is not None:
        return await _describe_share_group(admin, group_id, share)
    committed = await admin.list_consumer_group_offsets(group_id)
    owner: dict[Any, Any] = {}
    for m in desc.members:
        for tp in m.assignment:
            owner[tp] = m
    tps = sorted(set(committed) | set(owner))
    # A partition without a reachable leader has no known end: its lag is "-".
    latest = await admin.list_offsets(dict.fromkeys(tps, "latest"), partial=True)
    for tp, hit in latest.items():
        if isinstance(hit, TrafkaError):
            echo_err(f"warning: the lag of {tp.topic}-{tp.partition} is unknown: {hit}")
    rows = []
    for tp in tps:
        end = found_offset(latest.get(tp))
        end_offset = end[0] if end else None
        current = committed.get(tp)
        m = owner.get(tp)
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": current,
                "log_end_offset": end_offset,
                "lag": None
                if current is None or end_offset is None
                else max(end_offset - current, 0),
                "member_id": m.member_id if m else None,
                "client_id": m.client_id if m else None,
                "host": m.client_host if m else None,
            }
        )
    return {
        "group": group_id,
        "state": desc.state,
        "protocol_type": desc.protocol_type,
        "protocol": desc.protocol,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": sorted([tp.topic, tp.partition] for tp in m.assignment),
            }
            for m in desc.members
        ],
        "partitions": rows,
        "total_lag": sum(r["lag"] or 0 for r in rows),
    }


@groups_command.command("describe")
@click.argument("group_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def groups_describe(cfg: dict[str, Any], group_ids: tuple[str, ...], as_json: bool) -> None:
    """State, members, committed offsets and lag of groups; of a share group its
    state, epochs, members with their subscriptions and assignments, and each
    partition's start offset and lag."""

    async def run(admin: Any) -> list[dict[str, Any]]:
        return [await _describe_group(admin, g) for g in group_ids]

    described = run_client(with_admin, cfg, run)
    # As kafka-consumer-groups.sh: a group the coordinator knows nothing of (Dead,
    # no members, no offsets) does not exist; the command then fails.
    missing = [
        g["group"]
        for g in described
        if g.get("type") != "share"
        and g["state"] == "Dead"
        and not g["members"]
        and not g["partitions"]
    ]
    _print_groups(described, as_json)
    if missing:
        raise click.ClickException(
            f"group {', '.join(repr(m) for m in missing)} does not exist"
            if len(missing) == 1
            else f"groups {', '.join(repr(m) for m in missing)} do not exist"
        )


def _print_groups(described: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(described))
        return
    for i, g in enumerate(described):
        if i:
            click.echo()
        if g.get("type") == "share":
            _print_share_group(g)
            continue
        click.echo(
            f"Group: {g['group']}  State: {g['state']}  Protocol: {g['protocol'] or '-'}  "
            f"Members: {len(g['members'])}  TotalLag: {g['total_lag']}"
        )
        rows = [
            (
                r["topic"],
                r["partition"],
                r["current_offset"],
                r["log_end_offset"],
                r["lag"],
                r["member_id"],
                r["host"],
                r["client_id"],
            )
            for r in g["partitions"]
        ]
        if rows:
            click.echo(
                format_table(
                    [
                        "TOPIC",
                        "PARTITION",
                        "CURRENT-OFFSET",
                        "LOG-END-OFFSET",
                        "LAG",
                        "CONSUMER-ID",
                        "HOST",
                        "CLIENT-ID",
                    ],
                    rows,
                )
            )


def _assignment_text(assignment: Iterable[Sequence[Any]]) -> str:
    """``[[t, 0], [t, 1], [u, 3]]`` as ``t:0,1 u:3``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))


def _print_share_group(g: dict[str, Any]) -> None:
    lag = "" if g["total_lag"] is None else f"  TotalLag: {g['total_lag']}"
    click.echo(
        f"Group: {g['group']}  Type: share  State: {g['state']}  "
        f"GroupEpoch: {g['group_epoch']}  AssignmentEpoch: {g['assignment_epoch']}  "
        f"Assignor: {g['assignor'] or '-'}  Members: {len(g['members'])}{lag}"
    )
    rows = [
        (
            m["member_id"],
            m["host"],
            m["client_id"],
            m["member_epoch"],
            ",".join(m["subscribed_topics"]) or None,
            _assignment_text(m["assignment"]) or None,
        )
        for m in g["members"]
    ]
    if rows:
        click.echo(
            format_table(
                ["CONSUMER-ID", "HOST", "CLIENT-ID", "EPOCH", "SUBSCRIBED", "ASSIGNMENT"], rows
            )
        )
    # The share-partitions, as kafka-share-groups.sh --describe --offsets shows them.
    if g["partitions"]:
        click.echo(
            format_table(
                ["TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
                [
                    (p["topic"], p["partition"], p["leader_epoch"], p["start_offset"], p["lag"])
                    for p in g["partitions"]
                ],
            )
        )


def _parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = spec.partition(":")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise click.BadParameter(
            f"{spec!r}: use TOPIC or TOPIC:0,1,2", param_hint="--topic"
        ) from None


_ACTIVE_STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


async def _inactive_group_offsets(
    admin: Any, group_id: str
) -> tuple[dict[Any, int | None], list[Any], bool]:
    """A group's offsets to reset: ``(committed, their partitions sorted, is a
    share group)``; a share group's are its start offsets. Refused while the
    group has members (Kafka's tool refuses it too)."""
    desc, share = await _classic_or_share(admin, group_id)
    if share is not None:
        if share.members:
            raise click.ClickException(
                f"share group {group_id!r} is {share.state} with {len(share.members)} "
                "members; its offsets can only be reset while it is empty"
            )
        starts = await admin.list_share_group_offsets(group_id)
        committed = {tp: info.start_offset for tp, info in starts.items() if info}
        return committed, sorted(starts), True
    if desc.state in _ACTIVE_STATES or desc.members:
        raise click.ClickException(
            f"group {group_id!r} is {desc.state} with {len(desc.members)} members; "
            "offsets can only be reset while it is inactive"
        )
    committed = await admin.list_consumer_group_offsets(group_id)
    return committed, sorted(committed), False


async def _named_partitions(admin: Any, wanted: list[tuple[str, list[int] | None]]) -> list[Any]:
    """The partitions ``--topic`` named (all of a topic's when none are given);
    one the topic does not have is an error."""
    from trafka.sdk import TopicPartition

    infos = await admin.describe_topics([t for t, _ in wanted])
    tps = []
    for t, parts in wanted:
        present = {p.partition for p in infos[t].partitions}
        for p in parts if parts is not None else sorted(present):
            if p not in present:
                raise click.ClickException(f"{t} has no partition {p}")
            tps.append(TopicPartition(t, p))
    return tps


async def _log_bounds(
    admin: Any, tps: list[Any], when: int | None
) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
    """Each partition's earliest and latest offsets, and its offset at ``when``
    (empty without it). The plan needs them all: a partition that cannot be
    asked (offline) stops the whole reset, at once and naming it."""
    earliest = await admin.list_offsets(dict.fromkeys(tps, "earliest"), partial=True)
    latest = await admin.list_offsets(dict.fromkeys(tps, "latest"), partial=True)
    by_time: dict[Any, Any] = {}
    if when is not None:
        by_time = await admin.list_offsets(dict.fromkeys(tps, when), partial=True)
    unknown = {
        tp: hit
        for found in (earliest, latest, by_time)
        for tp, hit in found.items()
        if isinstance(hit, TrafkaError)
    }
    if unknown:
        which = "; ".join(f"{tp.topic}-{tp.partition}: {e}" for tp, e in sorted(unknown.items()))
        raise click.ClickException(
            f"cannot plan the reset, nothing changed: the offsets of {which} are unknown"
        )
    return earliest, latest, by_time


@groups_command.command("reset-offsets")
@click.argument("group_id")
@click.option("-t", "--topic", "topics", multiple=True, metavar="TOPIC[:P,P]", help="Repeatable.")
@click.option("--all-topics", is_flag=True, help="Every topic the group has offsets for.")
@click.option("--to-earliest", "mode", flag_value="earliest", help="The log start.")
@click.option("--to-latest", "mode", flag_value="latest", help="The log end.")
@click.option("--to-offset", type=click.IntRange(min=0), help="This offset (clamped to the log).")
@click.option("--to-datetime", help="The first record at or after this time (ISO, or ms).")
@click.option("--execute", is_flag=True, help="Apply the plan (default: only print it).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@admin_options
def groups_reset_offsets(
    cfg: dict[str, Any],
    group_id: str,
    topics: tuple[str, ...],
    all_topics: bool,
    mode: str | None,
    to_offset: int | None,
    to_datetime: str | None,
    execute: bool,
    as_json: bool,
) -> None:
    """Move GROUP's committed offsets (a dry run unless --execute); of a share
    group, its start offsets (the records from there on are delivered again, as
    new; AlterShareGroupOffsets).

    The group must have no active members.
    """
    chosen = [m for m in (mode, to_offset, to_datetime) if m is not None]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime"
        )
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    when = parse_timestamp(to_datetime) if to_datetime is not None else None
    wanted = [_parse_topic_partitions(t) for t in topics]

    async def run(admin: Any) -> tuple[list[dict[str, Any]], bool]:
        from trafka.sdk import TopicPartition

        committed, known, is_share = await _inactive_group_offsets(admin, group_id)
        tps = known if all_topics else await _named_partitions(admin, wanted)
        if not tps:
            return [], is_share
        earliest, latest, by_time = await _log_bounds(admin, tps, when)
        plan = []
        for tp in tps:
            lo = earliest[tp][0] if earliest.get(tp) else 0
            hi = latest[tp][0] if latest.get(tp) else 0
            if mode == "earliest":
                new = lo
            elif mode == "latest":
                new = hi
            elif to_offset is not None:
                new = min(max(to_offset, lo), hi)
            else:
                hit = by_time.get(tp)
                new = hit[0] if hit else hi
            plan.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "current_offset": committed.get(tp),
                    "new_offset": new,
                }
            )
        if execute:
            new_offsets = {
                TopicPartition(p["topic"], p["partition"]): p["new_offset"] for p in plan
            }
            if is_share:
                await admin.alter_share_group_offsets(group_id, new_offsets)
            else:
                await admin.alter_consumer_group_offsets(group_id, new_offsets)
        return plan, is_share

    plan, is_share = run_client(with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps(plan))
    elif plan:
        click.echo(
            format_table(
                [
                    "TOPIC",
                    "PARTITION",
                    "START-OFFSET" if is_share else "CURRENT-OFFSET",
                    "NEW-OFFSET",
                ],
                [(p["topic"], p["partition"], p["current_offset"], p["new_offset"]) for p in plan],
            )
        )
    if not execute:
        click.echo("dry run: nothing changed; add --execute to apply", err=True)


@groups_command.command("delete-offsets")
@click.argument("group_id")
@click.option(
    "-t",
    "--topic",
    "topics",
    multiple=True,
    required=True,
    metavar="TOPIC[:P,P]",
    help="Repeatable.",
)
@admin_options
def groups_delete_offsets(cfg: dict[str, Any], group_id: str, topics: tuple[str, ...]) -> None:
    """Delete GROUP's committed offsets of these topics (all their partitions, or the
    ones listed). While the group has members, none may subscribe to the topics.

    Of a share group, its state of whole topics (DeleteShareGroupOffsets), only
    while it has no members: the next member starts them by the group's
    share.auto.offset.reset.
    """
    wanted = [_parse_topic_partitions(t) for t in topics]

    async def run(admin: Any) -> str:
        from trafka.sdk import TopicPartition

        _, share = await _classic_or_share(admin, group_id)
        if share is not None:
            if any(parts is not None for _, parts in wanted):
                raise click.UsageError(
                    f"{group_id!r} is a share group: its offsets are deleted by whole topics "
                    "(give TOPIC without :PARTITIONS)"
                )
            names = list(dict.fromkeys(t for t, _ in wanted))
            await admin.delete_share_group_offsets(group_id, names)
            return f"deleted the share-group offsets of {len(names)} topic(s) for group {group_id}"

        names = [t for t, parts in wanted if parts is None]
        infos = await admin.describe_topics(names) if names else {}
        tps: list[TopicPartition] = []
        for t, parts in wanted:
            if parts is None:
                parts = [p.partition for p in infos[t].partitions]
            tps.extend(TopicPartition(t, p) for p in parts)
        await admin.delete_consumer_group_offsets(group_id, tps)
        return f"deleted the offsets of {len(tps)} partition(s) for group {group_id}"

    click.echo(run_client(with_admin, cfg, run), err=True)


@groups_command.command("delete")
@click.argument("group_ids", nargs=-1, required=True)
@admin_options
def groups_delete(cfg: dict[str, Any], group_ids: tuple[str, ...]) -> None:
    """Delete empty groups and their committed offsets."""

    async def run(admin: Any) -> None:
        await admin.delete_groups(group_ids)

    run_client(with_admin, cfg, run)
    for g in group_ids:
        click.echo(f"deleted group {g}", err=True)


@groups_command.command("remove-members")
@click.argument("group_id")
@click.option(
    "--instance-id",
    "instance_ids",
    multiple=True,
    metavar="ID",
    help="A static member's group.instance.id (repeatable).",
)
@click.option("--all", "remove_all", is_flag=True, help="Every member of the group.")
@click.option("--reason", help="Why, for the broker's log (default: Java's admin reason).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def groups_remove_members(
    cfg: dict[str, Any],
    group_id: str,
    instance_ids: tuple[str, ...],
    remove_all: bool,
    reason: str | None,
    as_json: bool,
) -> None:
    """Remove members from GROUP (LeaveGroup on their behalf), as Java's
    Admin.removeMembersFromConsumerGroup: static members by --instance-id, or
    --all of them (dynamic ones by member id). A static member that was shut
    down is otherwise kept until its session times out; its partitions go to
    the others at once. A member still running joins again. Exits 1 when a
    member could not be removed (UNKNOWN_MEMBER_ID: no such instance id).

    \b
    Examples:
      trafka groups remove-members orders --instance-id host-3
      trafka groups remove-members orders --all --reason "scaled down"
    """
    if bool(instance_ids) == remove_all:
        raise click.UsageError("give --instance-id ID (repeatable) or --all")

    async def run(admin: Any) -> dict[str, KafkaError | None]:
        result: dict[str, KafkaError | None] = await admin.remove_members_from_consumer_group(
            group_id, None if remove_all else instance_ids, reason=reason
        )
        return result

    results = run_client(with_admin, cfg, run)

    def code(err: KafkaError | None) -> str | None:
        if err is None:
            return None
        return err.code.name if isinstance(err.code, ErrorCode) else str(err.code)

    if as_json:
        click.echo(json.dumps([{"member": m, "error": code(e)} for m, e in results.items()]))
    for member, err in results.items():
        if err is None:
            if not as_json:
                click.echo(f"removed member {member} from group {group_id}", err=True)
        else:
            click.echo(f"member {member}: {code(err)}: {err}", err=True)
    if not results and not as_json:
        click.echo(f"group {group_id} has no members", err=True)
    if any(e is not None for e in results.values()):
        raise click.exceptions.Exit(1)


def _refusal(exc: KafkaError) -> str:
    """The broker's reason without the SDK's ``[CODE (n)] altering configs of 'g':`` prefix."""
    text = str(exc)
    _, sep, rest = text.partition("] ")
    text = rest if sep else text
    what, sep, reason = text.partition("': ")
    return reason if sep and what.startswith("altering configs of '") else text


@groups_command.command("configs")
@click.argument("group_ids", nargs=-1, required=True)
@click.option("--overrides", is_flag=True, help="Only the settings made for the group.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def groups_configs(
    cfg: dict[str, Any], group_ids: tuple[str, ...], overrides: bool, as_json: bool
) -> None:
    """Group configs (share.auto.offset.reset, share.record.lock.duration.ms...) of
    GROUPS: each value, and whether it is set for the group or the broker's default."""

    async def run(admin: Any) -> list[dict[str, Any]]:
        own = await admin.describe_group_configs(group_ids, overrides_only=True)
        every = own if overrides else await admin.describe_group_configs(group_ids)
        return [
            {
                "group": g,
                "configs": [
                    {
                        "name": name,
                        "value": value,
                        "source": "group" if name in own.get(g, {}) else "default",
                    }
                    for name, value in sorted(every.get(g, {}).items())
                ],
            }
            for g in group_ids
        ]

    described = run_client(with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps(described))
        return
    for i, g in enumerate(described):
        if i:
            click.echo()
        click.echo(f"Group: {g['group']}")
        if g["configs"]:
            rows = [(c["name"], c["value"], c["source"]) for c in g["configs"]]
            click.echo(format_table(["NAME", "VALUE", "SOURCE"], rows))


@groups_command.command("set-config")
@click.argument("group_id")
@click.argument("settings", nargs=-1, metavar="[KEY=VALUE]...")
@click.option(
    "-d",
    "--delete",
    "deletes",
    multiple=True,
    metavar="KEY",
    help="Remove the group's setting of KEY: the broker's default applies again (repeatable).",
)
@admin_options
def groups_set_config(
    cfg: dict[str, Any], group_id: str, settings: tuple[str, ...], deletes: tuple[str, ...]
) -> None:
    """Set or delete configs of GROUP (IncrementalAlterConfigs, other settings are
    kept); the group need not exist yet.

    \b
    Examples:
      trafka groups set-config workers share.auto.offset.reset=earliest
      trafka groups set-config workers share.record.lock.duration.ms=60000 \\
          --delete share.isolation.level
    """
    changes: dict[str, str | None] = dict(parse_pairs(settings, "KEY=VALUE"))
    both = sorted(set(changes) & set(deletes))
    if both:
        raise click.UsageError(f"both set and deleted: {', '.join(both)}")
    if not changes and not deletes:
        raise click.UsageError("give KEY=VALUE settings and/or --delete KEY")
    changes.update(dict.fromkeys(deletes))

    async def run(admin: Any) -> None:
        try:
            await admin.alter_group_configs({group_id: changes})
        except KafkaError as exc:
            name = exc.code.name if isinstance(exc.code, ErrorCode) else str(exc.code)
            raise click.ClickException(
                f"group {group_id!r}: the broker refused the change ({name}), nothing changed: "
                f"{_refusal(exc)}"
            ) from None

    run_client(with_admin, cfg, run)
    for key, value in changes.items():
        if value is None:
            click.echo(f"deleted {key} of group {group_id}", err=True)
        else:
            click.echo(f"set {key}={value} for group {group_id}", err=True)
