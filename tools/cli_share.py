"""``trafka share-consume``: read topics as a member of a share group (KIP-932 "queues"),
the counterpart of Kafka's ``kafka-console-share-consumer.sh``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2), and the output formats
  are ``consume``'s: raw (the value, then ``-D``; ``-K`` prints the key first)
  or JSON (``consume``'s object plus ``delivery_count``).
* Where a share group starts reading is its group config
  ``share.auto.offset.reset`` (``latest`` unless set: ``trafka groups
  set-config``), not an option of this command.
* The consumer runs with ``share.acknowledgement.mode=explicit``: every record
  printed is acknowledged with ``--ack``'s type (accept, release or reject),
  and records a poll delivered past ``-c`` are released, not acknowledged as
  ``--ack`` says (they were not printed). A record whose printing failed (the
  reader closed the pipe) is released too. Acknowledgements travel with the
  next ShareFetch; before it closes, the command commits what is still
  pending (ShareAcknowledge) and waits for the answer, then closes its share
  sessions and leaves the group. ``-X share.acknowledgement.mode`` is a usage
  error: ``--ack`` decides.
* It stops after ``-c N`` records, after ``--idle-timeout`` seconds without a
  record (counted from the first assignment, so joining does not count), on
  Ctrl-C or SIGTERM, or when the reader of stdout goes away. The first signal
  ends the loop and the command commits and leaves as above, then exits 128 +
  the signal's number (130 for Ctrl-C, 143 for SIGTERM); a second one, while
  it does, quits at once (the broker then gives the records back when their
  acquisition locks expire). A SIGINT the command started with ignored (a
  background job of a script) stays ignored.
* A broker out of reach and an assigned partition it cannot read (no leader,
  or its leader out of reach) are said on stderr when they happen (see
  :mod:`trafka.tools.cli_faults`); it goes on with the others. Idle at
  ``--idle-timeout`` while a partition is unreachable, it exits 1 naming it:
  records may wait there. A group whose coordinator cannot be found is said
  too; with ``--idle-timeout``, which counts from joining, the command gives
  the group up once it has been so for ``-m`` seconds and exits 1.
* An acknowledgement the broker refused or never answered (an expired lock,
  a timeout...) is reported on stderr, and the exit status is 1: those
  records will be delivered again.
* A topic that does not exist is an error at once and is not created (as
  ``consume``; ``-X allow.auto.create.topics=true`` to change).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import anyio
import anyio.abc
import click

from .cli_faults import (
    BrokerNotices,
    GroupWatch,
    Interrupts,
    PartitionWatch,
    no_coordinator_error,
    signals_watched,
)
from .clikit import (
    check_reachable,
    check_topics_exist,
    client_options,
    client_settings,
    echo_err,
    make_config,
    parse_delimiter,
    parse_pairs,
    record_to_json,
    record_writer,
    run_client,
)

__all__ = ["ACK_TYPES", "share_consume_command", "share_record_to_json"]

#: ``--ack`` choices, as Kafka's acknowledgement types.
ACK_TYPES = ("accept", "release", "reject")
_ACK_MODE_KEY = "share.acknowledgement.mode"


def share_record_to_json(record: Any) -> dict[str, Any]:
    """A record delivered by a share group as a JSON-able dict: ``consume``'s
    object (:func:`~trafka.tools.clikit.record_to_json`) plus
    ``delivery_count``, how many times the group has delivered it (1 the first time)."""
    out = record_to_json(record)
    out["delivery_count"] = record.delivery_count
    return out


@dataclasses.dataclass(slots=True)
class _ShareOptions:
    topics: tuple[str, ...]
    ack: str
    json: bool
    delimiter: bytes
    key_delimiter: bytes | None
    null_str: bytes
    count: int | None
    idle_timeout: float | None
    quiet: bool
    group: str = ""
    #: Seconds --idle-timeout waits for a group without a coordinator (-m).
    grace: float = 10.0


@dataclasses.dataclass(slots=True)
class _Outcome:
    """What a run did: records printed, acknowledgements refused, whether a signal stopped it."""

    printed: int = 0
    released_unprinted: int = 0
    failures: list[tuple[str, int, int, BaseException]] = dataclasses.field(default_factory=list)
    interrupts: Interrupts = dataclasses.field(default_factory=Interrupts)
    broken_pipe: bool = False
    #: It stopped at the idle timeout.
    idle_out: bool = False
    #: The assigned partitions it could not reach when it last looked, with why.
    unreachable: dict[Any, str] = dataclasses.field(default_factory=dict)
    #: Why --idle-timeout gave the group up (it found no coordinator), or "".
    no_coordinator: str = ""


async def _poll_loop(
    consumer: Any, opts: _ShareOptions, outcome: _Outcome, notices: BrokerNotices
) -> None:
    """Poll, print and acknowledge until -c, the idle timeout or a broken pipe."""
    from trafka.sdk import AcknowledgeType

    kind = AcknowledgeType[opts.ack.upper()]
    out = sys.stdout.buffer
    write = record_writer(opts, out, share_record_to_json)
    idle_since: float | None = None
    cluster = consumer.cluster
    watch = PartitionWatch(0.0, echo_err, "its records wait")
    then = "giving it up after {:g} s (-m)" if opts.idle_timeout is not None else "waiting for it"
    group = GroupWatch(opts.group, opts.grace, echo_err, then.format(opts.grace))

    def look() -> None:
        # The consumer retries by itself; what it cannot reach is said meanwhile.
        unreachable = cluster.unreachable_brokers
        now = anyio.current_time()
        notices.check(unreachable)
        watch.update(consumer.assignment(), cluster.metadata, unreachable, now)
        outcome.unreachable = watch.unreachable
        if not consumer.assignment():
            group.update(consumer.statistics().coordinator_problem, now)
        else:
            group.update("", now)

    while True:
        look()
        if opts.idle_timeout is not None and idle_since is None:
            outcome.no_coordinator = group.given_up(anyio.current_time())
            if outcome.no_coordinator:
                return
        left = None if opts.count is None else opts.count - outcome.printed
        if left == 0:
            return
        timeout_ms: float | None = None
        if opts.idle_timeout is not None:
            if idle_since is None and consumer.assignment():
                idle_since = anyio.current_time()
            if idle_since is None:
                timeout_ms = 200  # not assigned yet: look again soon
            else:
                idle_left = opts.idle_timeout - (anyio.current_time() - idle_since)
                if idle_left <= 0:
                    outcome.idle_out = True
                    return
                timeout_ms = idle_left * 1000
        # Polls end every second at least, to look at what is reachable.
        timeout_ms = 1000 if timeout_ms is None else min(timeout_ms, 1000)
        records = await consumer.poll(timeout_ms=timeout_ms)
        if not records:
            continue
        shown = records if left is None else records[:left]
        try:
            for record in shown:
                write(record)
                consumer.acknowledge(record, type=kind)
            out.flush()
        except BrokenPipeError:
            # Nobody reads what was written since the last flush: give it all back.
            for record in shown:
                consumer.acknowledge(record, type=AcknowledgeType.RELEASE)
            outcome.broken_pipe = True
            return
        finally:
            for record in records[len(shown) :]:
                consumer.acknowledge(record, type=AcknowledgeType.RELEASE)
        outcome.printed += len(shown)
        outcome.released_unprinted += len(records) - len(shown)
        if opts.idle_timeout is not None:
            idle_since = anyio.current_time()


async def _share_consume(opts: _ShareOptions, cfg: dict[str, Any]) -> _Outcome:
    from trafka.sdk import ShareConsumer, ShareConsumerConfig

    config = make_config(ShareConsumerConfig, cfg)
    outcome = _Outcome()

    def heard(offsets: dict[Any, set[int]], error: BaseException | None) -> None:
        if error is not None:
            for tp, acked in offsets.items():
                outcome.failures.append((tp.topic, tp.partition, len(acked), error))

    stop = anyio.CancelScope()

    def interrupted(count: int, signum: Any) -> None:
        if not opts.quiet:
            echo_err(
                f"{signum.name}: committing the acknowledgements and leaving "
                "(again to quit at once)"
            )

    async with (
        signals_watched(outcome.interrupts, [stop], interrupted),
        ShareConsumer(config) as consumer,
    ):
        consumer.set_acknowledgement_commit_callback(heard)
        # A signal ends the command wherever it is, connecting included.
        with stop:
            await check_reachable(consumer.cluster)
            await check_topics_exist(consumer.cluster, opts.topics)
            consumer.subscribe(opts.topics)
            await _poll_loop(consumer, opts, outcome, cfg["error_cb"])
        # Explicit mode: everything delivered is acknowledged by now; this
        # sends what the last fetch did not carry and waits for the broker's
        # answer (refusals reach `heard`). Closing finds nothing left to send.
        await consumer.commit()
    return outcome


@click.command("share-consume")
@click.argument("topics", nargs=-1, required=True)
@client_options
@click.option("-G", "--group", required=True, help="The share group to consume as a member of.")
@click.option(
    "--ack",
    type=click.Choice(ACK_TYPES, case_sensitive=False),
    default="accept",
    show_default=True,
    help="How every record printed is acknowledged: accept (done), release (deliver "
    "it again) or reject (never deliver it again).",
)
@click.option(
    "-f", "--format", "fmt", type=click.Choice(["raw", "json"]), default="raw", show_default=True
)
@click.option("-J", "json_flag", is_flag=True, help="Same as --format json.")
@click.option("-D", "--delimiter", default="\\n", show_default=True, help="After each value (raw).")
@click.option("-K", "--key-delimiter", help="Print keys before values, then this (raw).")
@click.option("-Z", "--null-str", default="", help="Print null keys and values as this (raw).")
@click.option(
    "-c",
    "--count",
    "--max-messages",
    "count",
    type=click.IntRange(min=1),
    help="Exit after this many records.",
)
@click.option(
    "-i",
    "--idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Exit once no record came for this long (counted from joining the group).",
)
@click.option("-q", "--quiet", is_flag=True, help="No notes or summary line.")
def share_consume_command(
    topics: tuple[str, ...],
    bootstrap: str,
    timeout: float,
    properties: tuple[str, ...],
    group: str,
    ack: str,
    fmt: str,
    json_flag: bool,
    delimiter: str,
    key_delimiter: str | None,
    null_str: str,
    count: int | None,
    idle_timeout: float | None,
    quiet: bool,
) -> None:
    """Print records of TOPICS as a member of the share group GROUP, acknowledging
    each one (--ack); the acknowledgements are committed before it exits.

    A share group starts at the end of the log unless its config says otherwise:
    trafka groups set-config GROUP share.auto.offset.reset=earliest

    \b
    Examples:
      trafka share-consume jobs -G workers                 # until Ctrl-C
      trafka share-consume jobs -G workers -c 10 -J        # ten records, as JSON
      trafka share-consume jobs -G workers --ack release   # look, and give them back
      trafka share-consume jobs -G workers -i 5 -K :       # keys too; stop when idle 5 s
    """
    given = parse_pairs(properties, "-X")
    if any(k.replace("_", ".") == _ACK_MODE_KEY for k in given):
        raise click.UsageError(
            f"-X {_ACK_MODE_KEY} is not for this command: every record printed is "
            "acknowledged with --ack's type"
        )
    opts = _ShareOptions(
        topics=topics,
        ack=ack.lower(),
        json=json_flag or fmt == "json",
        delimiter=parse_delimiter(delimiter),
        key_delimiter=parse_delimiter(key_delimiter) if key_delimiter is not None else None,
        null_str=null_str.encode(),
        count=count,
        idle_timeout=idle_timeout,
        quiet=quiet,
        group=group,
        grace=timeout,
    )
    defaults: dict[str, Any] = {
        "group.id": group,
        _ACK_MODE_KEY: "explicit",
        "default.api.timeout.ms": int(timeout * 1000),
        # As kcat: reading a misspelt topic must not create it (-X to change).
        "allow.auto.create.topics": False,
    }
    if count is not None:
        # Acquire no more than will be printed: the rest would be released, which
        # counts as a delivery for whoever gets them next.
        defaults["max.poll.records"] = min(count, 500)
    cfg = client_settings(bootstrap, properties, defaults)
    outcome = run_client(_share_consume, opts, cfg)
    if outcome.broken_pipe:
        # The reader went away (| head): not an error. Point stdout at /dev/null
        # so that the interpreter's final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    for topic, partition, n, error in outcome.failures:
        click.echo(
            f"acknowledging {n} record(s) of {topic}-{partition} failed (they will be "
            f"delivered again): {error}",
            err=True,
        )
    if not quiet and not outcome.broken_pipe:
        done = {"accept": "accepted", "release": "released", "reject": "rejected"}[opts.ack]
        extra = outcome.released_unprinted
        more = f" ({extra} more delivered past -c, released)" if extra else ""
        click.echo(f"{outcome.printed} records consumed and {done}{more}", err=True)
    status = outcome.interrupts.exit_status
    if status is not None:
        raise click.exceptions.Exit(status)
    if outcome.no_coordinator:
        click.echo(no_coordinator_error(group, timeout, outcome.no_coordinator), err=True)
        raise click.exceptions.Exit(1)
    if outcome.idle_out and outcome.unreachable:
        # Idle, but not because nothing was left: records may wait where it could not look.
        for tp, why in outcome.unreachable.items():
            name = f"{tp.topic}-{tp.partition}"
            click.echo(f"Error: partition {name} could not be read: {why}", err=True)
        raise click.exceptions.Exit(1)
    if outcome.failures:
        raise click.exceptions.Exit(1)
