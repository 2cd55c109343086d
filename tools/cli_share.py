"""``trafka share-consume``: read topics as a member of a share group (KIP-932 "queues"),
the counterpart of Kafka's ``kafka-console-share-consumer.sh``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.cli_client` (``-b``, ``-X``, ``-m``; data on stdout, notes
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
  ends the loop and the command commits and leaves as above (exit status 0);
  a second one, while it does, quits at once (the broker then gives the
  records back when their acquisition locks expire). A SIGINT the command
  started with ignored (a background job of a script) stays ignored.
* An acknowledgement the broker refused or never answered (an expired lock,
  a timeout...) is reported on stderr, and the exit status is 1: those
  records will be delivered again.
* A topic that does not exist is an error at once and is not created (as
  ``consume``; ``-X allow.auto.create.topics=true`` to change).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from typing import Any

import anyio
import anyio.abc
import click

from .cli_client import (
    _check_reachable,
    _check_topics,
    _client_config,
    _common,
    _make,
    _parse_pairs,
    _run,
    _writer,
    parse_delimiter,
    record_to_json,
)

__all__ = ["ACK_TYPES", "share_consume_command", "share_record_to_json"]

#: ``--ack`` choices, as Kafka's acknowledgement types.
ACK_TYPES = ("accept", "release", "reject")
_ACK_MODE_KEY = "share.acknowledgement.mode"


def share_record_to_json(record: Any) -> dict[str, Any]:
    """A record delivered by a share group as a JSON-able dict: ``consume``'s
    object (:func:`~trafka.tools.cli_client.record_to_json`) plus
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


@dataclasses.dataclass(slots=True)
class _Outcome:
    """What a run did: records printed, acknowledgements refused, whether a signal stopped it."""

    printed: int = 0
    released_unprinted: int = 0
    failures: list[tuple[str, int, int, BaseException]] = dataclasses.field(default_factory=list)
    signalled: str | None = None
    broken_pipe: bool = False


async def _stop_on_signals(
    stop: anyio.CancelScope,
    outcome: _Outcome,
    quiet: bool,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Cancel ``stop`` at the first SIGINT or SIGTERM, then give the signals back
    their usual handlers, so that a second one quits at once. An ignored SIGINT
    (a background job of a shell script) stays ignored."""
    wanted = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        wanted.append(signal.SIGINT)
    with anyio.open_signal_receiver(*wanted) as signals:
        task_status.started()
        async for signum in signals:
            outcome.signalled = signal.Signals(signum).name
            if not quiet:
                click.echo(
                    f"{outcome.signalled}: committing the acknowledgements and leaving "
                    "(again to quit at once)",
                    err=True,
                )
            stop.cancel()
            return


async def _poll_loop(consumer: Any, opts: _ShareOptions, outcome: _Outcome) -> None:
    """Poll, print and acknowledge until -c, the idle timeout or a broken pipe."""
    from trafka.sdk import AcknowledgeType

    kind = AcknowledgeType[opts.ack.upper()]
    out = sys.stdout.buffer
    write = _writer(opts, out, share_record_to_json)
    idle_since: float | None = None
    while True:
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
                    return
                timeout_ms = idle_left * 1000
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

    config = _make(ShareConsumerConfig, cfg)
    outcome = _Outcome()

    def heard(offsets: dict[Any, set[int]], error: BaseException | None) -> None:
        if error is not None:
            for tp, acked in offsets.items():
                outcome.failures.append((tp.topic, tp.partition, len(acked), error))

    stop = anyio.CancelScope()
    try:
        async with anyio.create_task_group() as tg:
            # Signal handlers can only be installed by the main thread (not, e.g., by a
            # test runner's worker thread, where Ctrl-C cannot arrive anyway).
            if threading.current_thread() is threading.main_thread():
                await tg.start(_stop_on_signals, stop, outcome, opts.quiet)
            async with ShareConsumer(config) as consumer:
                consumer.set_acknowledgement_commit_callback(heard)
                await _check_reachable(consumer.cluster)
                await _check_topics(consumer.cluster, opts.topics)
                consumer.subscribe(opts.topics)
                with stop:
                    await _poll_loop(consumer, opts, outcome)
                # Explicit mode: everything delivered is acknowledged by now; this
                # sends what the last fetch did not carry and waits for the broker's
                # answer (refusals reach `heard`). Closing finds nothing left to send.
                await consumer.commit()
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The signal task raises nothing, so the one error is the consumer's: let it
        # out as itself, for _run to turn into one line.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    return outcome


@click.command("share-consume")
@click.argument("topics", nargs=-1, required=True)
@_common
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
    given = _parse_pairs(properties, "-X")
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
    cfg = _client_config(bootstrap, properties, defaults)
    outcome = _run(_share_consume, opts, cfg)
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
    if outcome.failures:
        raise click.exceptions.Exit(1)
