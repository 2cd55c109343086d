"""``trafka produce`` and ``consume``: kcat-style tools built on trafka.sdk.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2). A closed stdout
  (``| head``) ends ``consume`` quietly.
* ``produce`` splits its input into messages with the delimiter (``-D``,
  default newline), reading stdin or files (``-l``) in chunks, so input of any
  size streams through ``buffer.memory``; without ``-l`` each file is one
  message (kcat's rule). ``-K`` splits a message into key and value at the
  first key delimiter; a message without one has no key (or ``-k``'s).
  The errors the producer retries (NOT_ENOUGH_REPLICAS, a lost leader...) are
  printed on stderr as they happen, once per kind of error and half minute (the
  SDK's rate-limited warnings), as kcat does, rather than only as the timeout
  they turn into after ``delivery.timeout.ms``; a record that finally fails is
  reported with the last error it was retried after, and ``produce`` exits 1.
* ``consume`` without ``-G`` (or with ``-p``) assigns partitions itself and
  starts at ``-o`` (default ``beginning``); with ``-G`` and no ``-p`` it joins
  the group, starts at the committed offsets (``-o beginning``/``end`` set
  ``auto.offset.reset`` for partitions without one) and commits what it
  printed when it exits. ``share-consume`` lives in
  :mod:`trafka.tools.cli_share`.

The small pure pieces (:class:`MessageSplitter`, :func:`parse_offset_spec`)
are tested on their own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import stat
import sys
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import IO, Any, TextIO, TypeVar

import anyio
import anyio.abc
import anyio.to_thread
import click

from .cli_consume_end import ReadToEnd, at_end
from .cli_faults import (
    BrokerNotices,
    GroupWatch,
    Interrupts,
    PartitionWatch,
    beside,
    no_coordinator_error,
    signals_watched,
    tasks_beside,
)
from .cli_serdes import FieldFormats, InputError, format_options
from .clikit import (
    check_reachable,
    check_topics_exist,
    client_options,
    client_settings,
    compile_format,
    echo_err,
    make_config,
    parse_delimiter,
    parse_timestamp,
    run_client,
)

log = logging.getLogger("trafka.tools.cli")

__all__ = [
    "MessageSplitter",
    "OffsetSpec",
    "consume_command",
    "parse_offset_spec",
    "produce_command",
]


T = TypeVar("T")
_CHUNK = 1 << 18
_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


class MessageSplitter:
    """Splits a byte stream into messages at a delimiter, across chunk boundaries.

    A delimiter at the very end does not start an empty last message
    (``b"a\\nb\\n"`` is two messages); delimiters in a row do (``b"a\\n\\nb"``
    is three, the middle one empty).

    Args:
        delimiter: the separator, one or more bytes.
    """

    def __init__(self, delimiter: bytes) -> None:
        if not delimiter:
            raise ValueError("empty delimiter")
        self.delimiter = delimiter
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The messages that ``chunk`` completes."""
        data = self._pending + chunk if self._pending else chunk
        parts = data.split(self.delimiter)
        self._pending = parts.pop()
        return parts

    def finish(self) -> list[bytes]:
        """The last message, when the input did not end with the delimiter."""
        rest, self._pending = self._pending, b""
        return [rest] if rest else []


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where ``consume`` starts.

    Attributes:
        kind: ``beginning``, ``end``, ``stored``, ``absolute``, ``relative``
            (that many records before the end) or ``timestamp`` (milliseconds).
        value: the offset, count or timestamp (0 for the named kinds).
    """

    kind: str
    value: int = 0


def parse_offset_spec(text: str) -> OffsetSpec:
    """``beginning``, ``end``, ``stored``, ``N``, ``-N`` (N before the end), ``s@TIME``.

    Raises:
        click.BadParameter: anything else.
    """
    t = text.strip().lower()
    if t in ("beginning", "earliest"):
        return OffsetSpec("beginning")
    if t in ("end", "latest"):
        return OffsetSpec("end")
    if t == "stored":
        return OffsetSpec("stored")
    if t.startswith("s@"):
        return OffsetSpec("timestamp", parse_timestamp(text.strip()[2:]))
    if t.startswith("-") and t[1:].isdigit():
        return OffsetSpec("relative", int(t[1:]))
    if t.isdigit():
        return OffsetSpec("absolute", int(t))
    raise click.BadParameter(
        f"{text!r}: use beginning, end, stored, an offset, -N (N before the end) or s@TIME"
    )


def _input_size(stream: IO[bytes]) -> int | None:
    try:
        st = os.fstat(stream.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


class _Progress:
    """Progress on stderr: a bar when the input size is known and stderr is a
    terminal, else a counter line (rewritten in place on a terminal).

    The reader adds to :attr:`bytes`; the sender calls :meth:`advance`.
    ``clock`` is monotonic seconds, of any origin.
    """

    def __init__(
        self,
        total: int | None,
        enabled: bool,
        *,
        clock: Callable[[], float] = time.monotonic,
        err: TextIO | None = None,
    ) -> None:
        self.enabled = enabled
        self.total = total
        self.records = 0
        self.bytes = 0
        self._shown_bytes = 0
        self._err = sys.stderr if err is None else err
        self._tty = self._err.isatty()
        self._bar: Any = None
        self._clock = clock
        self._last: float | None = None  # when a line was last shown (None: never)
        self._start = clock()
        if enabled and total and self._tty:
            self._bar = click.progressbar(
                length=total, label="producing", file=self._err, show_eta=True
            )
            self._bar.__enter__()

    def advance(self, records: int) -> None:
        self.records += records
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self.bytes - self._shown_bytes)
            self._shown_bytes = self.bytes
            return
        now = self._clock()
        # Rate-limited so that a fast producer is not slowed down by its own progress.
        if self._last is None or now - self._last >= (0.25 if self._tty else 2.0):
            self._last = now
            self._show(end="\r" if self._tty else "\n")

    def _show(self, end: str) -> None:
        rate = self.records / max(self._clock() - self._start, 1e-9)
        of = f" of {self.total}" if self.total else ""
        self._err.write(f"{self.records} records, {self.bytes}{of} bytes ({rate:.0f}/s){end}")
        self._err.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self.bytes - self._shown_bytes)
            self._bar.__exit__(None, None, None)
        else:
            self._show(end="\n")


async def _read_chunks(stream: IO[bytes]) -> AsyncIterator[bytes]:
    read = getattr(stream, "read1", stream.read)
    if stream is sys.stdin.buffer:
        # The descriptor itself, not the buffered reader: a read abandoned on
        # Ctrl-C keeps waiting in its thread, and one holding the reader's lock
        # aborts the interpreter at exit ("could not acquire lock for <stdin>").
        # Nothing has read through the buffer before, so it holds no data.
        with contextlib.suppress(OSError, ValueError):  # no descriptor (a test's stdin)
            read = functools.partial(os.read, stream.fileno())
    while True:
        # A thread, so that waiting on a slow pipe does not stall the sender task.
        chunk = await anyio.to_thread.run_sync(read, _CHUNK, abandon_on_cancel=True)
        if not chunk:
            return
        yield chunk


@dataclasses.dataclass(slots=True)
class _ProduceOptions:
    topic: str
    files: tuple[str, ...]
    delimiter: bytes
    key_delimiter: bytes | None
    fixed_key: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None
    lines: bool
    null_empty: bool
    count: int | None
    progress: bool | None
    quiet: bool
    #: Encodes (key, value, where, headers) as --key-format/--value-format say; None: as read.
    encode: Callable[..., tuple[bytes | None, bytes | None]] | None = None


async def _messages(opts: _ProduceOptions, progress: _Progress) -> AsyncGenerator[bytes]:
    """Every message of the input, in order; progress counts input bytes."""
    sources = opts.files or ("-",)
    stdin = sys.stdin.buffer
    for name in sources:
        stream = stdin if name == "-" else open(name, "rb")  # noqa: SIM115 - closed below
        try:
            if name != "-" and not opts.lines:
                data = await anyio.to_thread.run_sync(stream.read)
                progress.bytes += len(data)
                yield data
                continue
            splitter = MessageSplitter(opts.delimiter)
            async for chunk in _read_chunks(stream):
                progress.bytes += len(chunk)
                for message in splitter.feed(chunk):
                    yield message
            for message in splitter.finish():
                yield message
        finally:
            if stream is not stdin:
                stream.close()


async def _aenumerate(items: AsyncIterator[T], start: int = 0) -> AsyncIterator[tuple[int, T]]:
    """``enumerate`` of an async iterator."""
    n = start
    async for item in items:
        yield n, item
        n += 1


class _StderrWarnings(logging.Handler):
    """The SDK's warnings (the producer's retries) as ``warning: ...`` lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(f"warning: {record.getMessage()}", err=True)
        except Exception:  # a log line must never break the command
            self.handleError(record)


@contextlib.contextmanager
def _sdk_warnings_on_stderr(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    handler = _StderrWarnings(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@dataclasses.dataclass(slots=True)
class _ProduceOutcome:
    """What a run sent: records handed to the producer, and of those the ones
    the brokers acknowledged and the ones that failed (the rest, after a second
    signal, are unconfirmed: they may or may not have been written)."""

    sent: int = 0
    delivered: int = 0
    failed: int = 0
    first_error: BaseException | None = None
    #: The input was not sent to its end (send blocked for max.block.ms, or a
    #: message could not be encoded).
    blocked: bool = False
    interrupts: Interrupts = dataclasses.field(default_factory=Interrupts)

    @property
    def unconfirmed(self) -> int:
        return self.sent - self.delivered - self.failed

    def settle(self, futures: deque[Any], *, everything: bool = False) -> None:
        """Count the futures that are done (from the front; ``everything``: all
        the done ones, leaving the others in ``futures``)."""
        if everything:
            open_ = deque(f for f in futures if not f.done())
            done = [f for f in futures if f.done()]
            futures.clear()
            futures.extend(open_)
        else:
            done = []
            while futures and futures[0].done():
                done.append(futures.popleft())
        for future in done:
            error = future.exception()
            if error is None:
                self.delivered += 1
            else:
                self.failed += 1
                self.first_error = self.first_error or error


class _GiveUp(Exception):
    """A second signal: leave without waiting for the deliveries still open."""


def _produce_progress(opts: _ProduceOptions) -> _Progress:
    """The progress line: shown (unless quiet or chosen) when stderr is a terminal,
    the input is not typed on one, and it is large or of unknown size."""
    total = None
    if opts.files:
        total = sum(os.path.getsize(f) for f in opts.files if f != "-") or None
    else:
        total = _input_size(sys.stdin.buffer)
    enabled = opts.progress
    if enabled is None:
        stderr_tty = sys.stderr.isatty()
        stdin_tty = not opts.files and sys.stdin.buffer.isatty()
        enabled = stderr_tty and not stdin_tty and (total is None or total >= 1 << 20)
    return _Progress(total, enabled and not opts.quiet)


def _key_and_value(opts: _ProduceOptions, message: bytes) -> tuple[bytes | None, bytes | None]:
    """One input message as a record's key and value (the key split off at the
    key delimiter when given, empty ones null with ``null_empty``)."""
    key = opts.fixed_key
    value: bytes | None = message
    if opts.key_delimiter is not None:
        k, sep, v = message.partition(opts.key_delimiter)
        if sep:
            key, value = k, v
    if opts.null_empty:
        key = key or None
        value = value or None
    return key, value


async def _watch_partitions(producer: Any, opts: _ProduceOptions, notices: BrokerNotices) -> None:
    """Say meanwhile what the producer waits for (it retries by itself): the
    topic's partitions without a reachable leader, the brokers unreachable."""
    from trafka.sdk import TopicPartition

    watch = PartitionWatch(
        0.0, echo_err, "records for it wait for a leader (at most delivery.timeout.ms)"
    )
    cluster = producer.cluster
    while True:
        md = cluster.metadata
        count = md.partition_count(opts.topic) or 0
        parts = [opts.partition] if opts.partition is not None else range(count)
        unreachable = cluster.unreachable_brokers
        notices.check(unreachable)
        tps = [TopicPartition(opts.topic, p) for p in parts]
        watch.update(tps, md, unreachable, anyio.current_time())
        await anyio.sleep(0.5)


async def _send_input(
    producer: Any,
    opts: _ProduceOptions,
    progress: _Progress,
    outcome: _ProduceOutcome,
    pending: deque[Any],
) -> None:
    """Send the input's messages (at most ``count``) until it ends or send blocks;
    their futures join ``pending`` and are counted in ``outcome`` as they settle."""
    from trafka.sdk import ProducerBlockedError

    unit = "line" if opts.delimiter == b"\n" and (opts.lines or not opts.files) else "message"
    async with contextlib.aclosing(_messages(opts, progress)) as messages:
        async for number, message in _aenumerate(messages, 1):
            if opts.count is not None and outcome.sent >= opts.count:
                break
            key, value = _key_and_value(opts, message)
            if opts.encode is not None:
                try:
                    key, value = opts.encode(key, value, f"input {unit} {number}", opts.headers)
                except InputError as exc:
                    echo_err(f"Error: {exc}; the rest of the input is not sent")
                    outcome.blocked = True
                    break
            # Cancelled only before the record is taken: once send
            # returns, the record is in a batch and counted.
            try:
                future = await producer.send(
                    opts.topic, value, key, partition=opts.partition, headers=opts.headers
                )
            except ProducerBlockedError as exc:
                # No room or no metadata for max.block.ms: stop reading,
                # and still deliver (and count) what was taken.
                echo_err(f"Error: {exc}; the rest of the input is not sent")
                outcome.blocked = True
                break
            pending.append(future)
            outcome.sent += 1
            if outcome.sent & 1023 == 0:
                outcome.settle(pending)
                progress.advance(1024)


async def _produce(opts: _ProduceOptions, cfg: dict[str, Any]) -> _ProduceOutcome:
    from trafka.sdk import ProducerConfig, open_producer

    config = make_config(ProducerConfig, cfg)
    notices: BrokerNotices = cfg["error_cb"]
    progress = _produce_progress(opts)
    outcome = _ProduceOutcome()
    pending: deque[Any] = deque()
    # Ctrl-C ends the input (what was read is still delivered); a second one
    # ends the wait for the deliveries.
    reading, waiting = anyio.CancelScope(), anyio.CancelScope()

    def interrupted(count: int, signum: Any) -> None:
        if count == 1:
            echo_err(f"{signum.name}: delivering what was read (again to stop waiting)")
        else:
            echo_err(f"{signum.name}: not waiting for the deliveries still open")

    try:
        async with (
            signals_watched(outcome.interrupts, [reading, waiting], interrupted),
            open_producer(config) as producer,
            beside(functools.partial(_watch_partitions, producer, opts, notices)),
        ):
            # A signal ends the reading wherever it is, connecting included.
            with reading:
                await check_reachable(producer.cluster)
                await check_topics_exist(producer.cluster, [opts.topic])
                await _send_input(producer, opts, progress, outcome, pending)
            with waiting:
                await producer.flush()
            outcome.settle(pending, everything=True)
            if pending:
                # A second signal: what is still open stays unconfirmed (closing
                # fails it unsent, and must not wait for it either).
                pending.clear()
                raise _GiveUp
    except _GiveUp:
        pass
    progress.records = outcome.sent
    progress.close()
    if outcome.first_error is not None:
        echo_err(f"first delivery error: {outcome.first_error}")
    return outcome


@click.command("produce")
@click.argument("topic")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@client_options
@click.option(
    "-D", "--delimiter", default="\\n", show_default=True, help="Message delimiter of the input."
)
@click.option("-K", "--key-delimiter", help="Split each message into KEY<delim>VALUE.")
@click.option("-k", "--key", "fixed_key", help="A key for every message (-K's keys win).")
@click.option("-H", "--header", "headers", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Default: the partitioner's.")
@click.option("-z", "--compression", type=click.Choice(_COMPRESSIONS), default="none")
@click.option(
    "-a", "--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True
)
@click.option("-l", "--lines", is_flag=True, help="Split FILES into messages too (as stdin).")
@click.option("-Z", "--null-empty", is_flag=True, help="Send empty keys and values as null.")
@click.option("-c", "--count", type=click.IntRange(min=0), help="Stop after this many messages.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show progress on stderr [default: for large or piped input on a terminal].",
)
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@format_options(produce=True)
def produce_command(
    topic: str,
    files: tuple[str, ...],
    bootstrap: str,
    timeout: float,
    properties: tuple[str, ...],
    delimiter: str,
    key_delimiter: str | None,
    fixed_key: str | None,
    headers: tuple[str, ...],
    partition: int | None,
    compression: str,
    acks: str,
    lines: bool,
    null_empty: bool,
    count: int | None,
    progress: bool | None,
    quiet: bool,
    formats: FieldFormats,
) -> None:
    """Send messages to TOPIC: lines of stdin, or FILES (one message each; -l for lines).

    \b
    Examples:
      seq 100 | trafka produce numbers
      printf 'user-1:clicked\\n' | trafka produce events -K: -H source=cli
      trafka produce blobs image.png -z zstd
      echo '{"name": "ada"}' | trafka produce users --value-format avro -r http://localhost:8081
    """
    hdrs: list[tuple[str, bytes | None]] = []
    for h in headers:
        name, sep, val = h.partition("=")
        if not name:
            raise click.BadParameter(f"{h!r} has no name", param_hint="-H")
        hdrs.append((name, val.encode() if sep else None))
    opts = _ProduceOptions(
        topic=topic,
        files=files,
        delimiter=parse_delimiter(delimiter),
        key_delimiter=parse_delimiter(key_delimiter) if key_delimiter is not None else None,
        fixed_key=fixed_key.encode() if fixed_key is not None else None,
        headers=hdrs,
        partition=partition,
        lines=lines,
        null_empty=null_empty,
        count=count,
        progress=progress,
        quiet=quiet,
        encode=None if formats.plain else formats.encoders(topic),
    )
    cfg = client_settings(
        bootstrap,
        properties,
        {
            "acks": acks,
            "compression.type": compression,
            "max.block.ms": int(timeout * 1000),
            "linger.ms": 5,
        },
    )
    if any(k.replace("_", ".") == "transactional.id" for k in cfg):
        # The SDK would refuse the first send ("call init_transactions() first"):
        # the command runs no transactions, so the setting is a usage error.
        raise click.UsageError(
            "-X transactional.id is not for this command: it sends without transactions "
            "(each message is acknowledged on its own)"
        )
    with _sdk_warnings_on_stderr("trafka.sdk.producer"):
        outcome = run_client(_produce, opts, cfg)
    if not quiet:
        unconfirmed = outcome.unconfirmed
        more = f" ({unconfirmed} not confirmed)" if unconfirmed else ""
        click.echo(
            f"{outcome.delivered} of {outcome.sent} messages delivered to {topic}{more}", err=True
        )
    status = outcome.interrupts.exit_status
    if status is not None:
        raise click.exceptions.Exit(status)
    if outcome.failed or outcome.unconfirmed or outcome.blocked:
        raise click.exceptions.Exit(1)


@dataclasses.dataclass(slots=True)
class _ConsumeOptions:
    topics: tuple[str, ...]
    group: str | None
    partitions: tuple[int, ...]
    offset: OffsetSpec | None
    json: bool
    delimiter: bytes
    key_delimiter: bytes | None
    count: int | None
    exit_at_end: bool
    null_str: bytes
    template: str | None = None
    formats: FieldFormats = dataclasses.field(default_factory=FieldFormats)
    #: Seconds -e waits for an unreachable partition before giving it up (-m).
    grace: float = 10.0


@dataclasses.dataclass(slots=True)
class _ConsumeOutcome:
    printed: int = 0
    #: The partitions -e gave up on, with why.
    unreached: dict[Any, str] = dataclasses.field(default_factory=dict)
    #: Why -e gave the group up (it found no coordinator), or "".
    no_coordinator: str = ""
    #: The record that stopped the command (it did not deserialize), or "".
    undecodable: str = ""
    interrupts: Interrupts = dataclasses.field(default_factory=Interrupts)


async def _position(consumer: Any, tps: list[Any], spec: OffsetSpec) -> None:
    if spec.kind == "beginning":
        consumer.seek_to_beginning(*tps)
    elif spec.kind == "end":
        consumer.seek_to_end(*tps)
    elif spec.kind == "absolute":
        for tp in tps:
            consumer.seek(tp, spec.value)
    elif spec.kind == "relative":
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(end[tp] - spec.value, begin[tp]))
    elif spec.kind == "timestamp":
        found = await consumer.offsets_for_times({tp: spec.value for tp in tps})
        late = [tp for tp, hit in found.items() if hit is None]
        for tp, hit in found.items():
            if hit is not None:
                consumer.seek(tp, hit[0])
        if late:
            consumer.seek_to_end(*late)


async def _consume(opts: _ConsumeOptions, cfg: dict[str, Any]) -> _ConsumeOutcome:
    from trafka.sdk import (
        ConsumerConfig,
        PartitionEOF,
        SerializationError,
        TopicPartition,
        open_consumer,
    )

    config = make_config(ConsumerConfig, cfg)
    notices: BrokerNotices = cfg["error_cb"]
    out = sys.stdout.buffer
    write = opts.formats.writer(opts, out)
    outcome = _ConsumeOutcome()
    then = f"giving it up after {opts.grace:g} s (-m)" if opts.exit_at_end else "waiting for it"
    watch = PartitionWatch(opts.grace, echo_err, then)
    group = None if opts.group is None else GroupWatch(opts.group, opts.grace, echo_err, then)
    stop = anyio.CancelScope()

    def interrupted(count: int, signum: Any) -> None:
        commit = " and committing what was printed" if opts.group is not None else ""
        echo_err(f"{signum.name}: stopping{commit} (again to quit at once)")

    async with (
        signals_watched(outcome.interrupts, [stop], interrupted),
        open_consumer(config=config) as consumer,
        tasks_beside() as tg,
    ):
        cluster = consumer.cluster
        to_end = None
        if opts.exit_at_end and not config.enable_partition_eof:
            to_end = ReadToEnd(consumer, tg)
        # A signal ends the command wherever it is, connecting included.
        with stop:
            await check_reachable(cluster)
            await check_topics_exist(cluster, opts.topics)
            if opts.group is not None and not opts.partitions:
                consumer.subscribe(list(opts.topics), listener=to_end)
            else:
                tps = []
                for topic in opts.topics:
                    present = await consumer.partitions_for(topic)
                    for p in opts.partitions or present:
                        if p not in present:
                            # It would never be read: -e would wait for its end for ever.
                            raise click.ClickException(f"{topic} has no partition {p}")
                        tps.append(TopicPartition(topic, p))
                consumer.assign(tps)
                if to_end is not None:
                    to_end.hold(tps)
                await _position(consumer, tps, opts.offset or OffsetSpec("beginning"))
                if to_end is not None:
                    to_end.bound(tps)
            while True:
                limit = None if opts.count is None else opts.count - outcome.printed
                if limit == 0:
                    break
                batch = {}
                try:
                    # (a poll cancelled takes nothing: it only waits while nothing is at hand)
                    with to_end.polling() if to_end else contextlib.nullcontext():
                        batch = await consumer.getmany(timeout_ms=200, max_records=limit)
                except SerializationError as exc:
                    # Left as a stop, so that -G commits what was printed (not past it).
                    outcome.undecodable = str(exc)
                    break
                for records in batch.values():
                    for record in records:
                        if isinstance(record, PartitionEOF):
                            # -X enable.partition.eof=true: said on stderr, as kcat does.
                            echo_err(
                                f"% reached the end of {record.topic} [{record.partition}] "
                                f"at offset {record.offset}"
                            )
                            continue
                        write(record)
                        outcome.printed += 1
                if batch:
                    out.flush()
                # What the client retries by itself is said, and -e gives up on
                # partitions it cannot reach rather than wait for them for ever.
                now = anyio.current_time()
                unreachable = cluster.unreachable_brokers
                notices.check(unreachable)
                watch.update(consumer.assignment(), cluster.metadata, unreachable, now)
                if group is not None:
                    # Only a member holding nothing waits on its coordinator (a
                    # statistics snapshot per batch would cost a busy consume).
                    stats = None if consumer.assignment() else consumer.statistics().group
                    group.update(stats.coordinator_problem if stats is not None else "", now)
                    if opts.exit_at_end and stats is not None:
                        outcome.no_coordinator = group.given_up(now)
                        if outcome.no_coordinator:
                            break
                if opts.exit_at_end:
                    given_up = watch.given_up(now)
                    if await to_end.at_end(given_up) if to_end else at_end(consumer, given_up):
                        outcome.unreached = given_up
                        break
    return outcome


@click.command("consume")
@click.argument("topics", nargs=-1, required=True)
@client_options
@click.option("-G", "--group", help="Consume as a member of this group (commits on exit).")
@click.option(
    "-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True, help="Repeatable."
)
@click.option(
    "-o",
    "--offset",
    help="beginning (default without -G), end, stored (default with -G), N, -N "
    "(N before the end) or s@TIME (ms or ISO date-time, UTC when no zone).",
)
@click.option(
    "-f",
    "--format",
    "fmt",
    default="raw",
    show_default=True,
    help="raw, json, or a kcat format string: %s value, %k key, %S/%K their lengths, "
    "%t topic, %p partition, %o offset, %T timestamp, %h headers, \\n escapes "
    "(e.g. -f '%p:%o %k=%s\\n').",
)
@click.option("-J", "json_flag", is_flag=True, help="Same as --format json.")
@click.option("-D", "--delimiter", default="\\n", show_default=True, help="After each value (raw).")
@click.option("-K", "--key-delimiter", help="Print keys before values, then this (raw).")
@click.option("-c", "--count", type=click.IntRange(min=1), help="Exit after this many records.")
@click.option("-e", "--exit-at-end", is_flag=True, help="Exit once every partition is read.")
@click.option("-Z", "--null-str", default="", help="Print null keys and values as this (raw).")
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@format_options(produce=False)
def consume_command(
    topics: tuple[str, ...],
    bootstrap: str,
    timeout: float,
    properties: tuple[str, ...],
    group: str | None,
    partitions: tuple[int, ...],
    offset: str | None,
    fmt: str,
    json_flag: bool,
    delimiter: str,
    key_delimiter: str | None,
    count: int | None,
    exit_at_end: bool,
    null_str: str,
    quiet: bool,
    formats: FieldFormats,
) -> None:
    """Print records of TOPICS to stdout.

    \b
    Examples:
      trafka consume events -e                    # everything there now
      trafka consume events -o -10 -J             # the last 10 per partition, as JSON
      trafka consume events -G audit              # as group "audit", from its commits
      trafka consume events -p 0 -o s@2024-05-01T00:00:00 -c 5
      trafka consume users -s value=avro -r http://localhost:8081 -J
    """
    spec = parse_offset_spec(offset) if offset is not None else None
    subscribing = group is not None and not partitions
    if subscribing and spec is not None and spec.kind not in ("beginning", "end", "stored"):
        raise click.UsageError(
            "with -G (and no -p) -o accepts beginning, end or stored; "
            "the group's committed offsets decide the rest"
        )
    if spec is not None and spec.kind == "stored" and group is None:
        raise click.UsageError("-o stored needs a group (-G)")
    reset = "latest" if spec is not None and spec.kind == "end" else "earliest"
    template = None if fmt in ("raw", "json") else fmt
    if template is not None:
        compile_format(template)  # a bad format fails before anything is read
    opts = _ConsumeOptions(
        topics=topics,
        group=group,
        partitions=partitions,
        offset=spec,
        json=json_flag or fmt == "json",
        delimiter=parse_delimiter(delimiter),
        key_delimiter=parse_delimiter(key_delimiter) if key_delimiter is not None else None,
        count=count,
        exit_at_end=exit_at_end,
        null_str=null_str.encode(),
        template=template,
        formats=formats,
        grace=timeout,
    )
    defaults: dict[str, Any] = {
        "auto.offset.reset": reset,
        "default.api.timeout.ms": int(timeout * 1000),
        # As kcat: reading a misspelt topic must not create it (-X to change).
        "allow.auto.create.topics": False,
    }
    if group is not None:
        defaults["group.id"] = group
    defaults.update(formats.deserializers())
    cfg = client_settings(bootstrap, properties, defaults)
    try:
        # (-X deserialization.error.handler=skip says what it skips)
        skips = (
            contextlib.nullcontext()
            if formats.plain
            else _sdk_warnings_on_stderr("trafka.sdk.consumer")
        )
        with skips:
            outcome = run_client(_consume, opts, cfg)
    except BrokenPipeError:
        # The reader went away (| head): not an error. Point stdout at /dev/null
        # so that the interpreter's final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return
    if not quiet:
        click.echo(f"{outcome.printed} records consumed", err=True)
    for tp, why in outcome.unreached.items():
        name = f"{tp.topic}-{tp.partition}"
        click.echo(f"Error: partition {name} was not read to its end: {why}", err=True)
    if outcome.no_coordinator:
        click.echo(no_coordinator_error(str(group), timeout, outcome.no_coordinator), err=True)
    if outcome.undecodable:
        click.echo(f"Error: {outcome.undecodable}", err=True)
    status = outcome.interrupts.exit_status
    if status is not None:
        raise click.exceptions.Exit(status)
    if outcome.unreached or outcome.no_coordinator or outcome.undecodable:
        raise click.exceptions.Exit(1)
