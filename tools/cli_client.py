"""``trafka produce``, ``consume``, ``topics`` and ``groups``: kcat-style tools built on trafka.sdk.

Rules:

* Every command talks to ``-b/--bootstrap-server``, which defaults to the
  ``TRAFKA_BOOTSTRAP_SERVERS`` environment variable and then to
  ``127.0.0.1:9092`` (where ``trafka broker`` listens). Client settings pass
  through as ``-X key=value`` with Kafka's names; an unknown key is a usage
  error naming it.
* Each command runs one ``trio.run`` over the SDK and connects first, so an
  unreachable broker fails at once with one line on stderr, not after a
  metadata timeout. Client errors exit 1 with one line (``Error: ...``); usage
  errors exit 2 (click's convention).
* Data goes to stdout; progress, summaries and dry-run notes go to stderr, so
  the output can be piped. A closed stdout (``| head``) ends ``consume``
  quietly.
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
  printed when it exits.
* ``groups reset-offsets`` is a dry run unless ``--execute`` is given, and
  refuses a group with active members, as Kafka's tool does.
* ``groups list`` shows each group's type (classic, consumer, share; ``-t``
  filters). ``groups describe`` of a share group (DescribeGroups does not know
  one) prints what ShareGroupDescribe says instead of offsets and lag: state,
  epochs and members with their subscriptions and assignments. Other groups
  print as before.
* ``features`` alone (or ``features describe``) prints the feature levels;
  ``features upgrade``/``downgrade``/``disable`` change them, as
  kafka-features.sh does (``--feature``, ``--unsafe``, ``--dry-run``). The
  controller applies a change whole or not at all: a refusal exits 1.
* ``groups remove-members`` removes static members by ``--instance-id`` (or
  ``--all`` members) through Admin.remove_members_from_consumer_group, one line
  per member on stderr; it exits 1 when any member was not removed.
* ``groups configs`` and ``groups set-config`` read and change group configs
  (ConfigResource GROUP: ``share.auto.offset.reset``...). ``set-config``
  changes only the keys given (IncrementalAlterConfigs); the broker validates
  them, and a refusal, which changes nothing, is one line naming its reason.
  ``share-consume`` lives in :mod:`trafka.tools.cli_share`.

The small pure pieces (:class:`MessageSplitter`, :func:`parse_delimiter`,
:func:`parse_offset_spec`, :func:`parse_timestamp`, :func:`record_to_json`)
are tested on their own.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import functools
import json
import logging
import os
import stat
import sys
import time
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import IO, Any, Protocol, TextIO, TypeVar

import anyio
import anyio.to_thread
import click

from trafka.codec import ErrorCode, KafkaError, TrafkaError

from .cli_faults import BrokerNotices, Interrupts, PartitionWatch, beside, signals_watched

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "GROUP_TYPES",
    "MessageSplitter",
    "OffsetSpec",
    "consume_command",
    "groups_command",
    "parse_delimiter",
    "parse_offset_spec",
    "parse_timestamp",
    "produce_command",
    "record_to_json",
    "topics_command",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
ENV_BOOTSTRAP = "TRAFKA_BOOTSTRAP_SERVERS"
CLIENT_ID = "trafka-cli"
_CHUNK = 1 << 18
_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Kafka's group types (``groups list --type``).
GROUP_TYPES = ("classic", "consumer", "share", "streams")

T = TypeVar("T")

# -- pure helpers -------------------------------------------------------------------------


def parse_delimiter(text: str) -> bytes:
    """A delimiter as kcat writes it: literal text with ``\\n``, ``\\r``, ``\\t``, ``\\0``,
    ``\\\\`` and ``\\xNN`` escapes.

    Raises:
        click.BadParameter: an empty delimiter or a bad escape.
    """
    out = bytearray()
    i = 0
    raw = text.encode("utf-8")
    simple = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("0"): 0, ord("\\"): 92}
    while i < len(raw):
        c = raw[i]
        if c != 92:  # backslash
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(raw):
            raise click.BadParameter(f"{text!r} ends with a lone backslash")
        e = raw[i + 1]
        if e in simple:
            out.append(simple[e])
            i += 2
        elif e == ord("x"):
            digits = raw[i + 2 : i + 4]
            try:
                if len(digits) != 2:
                    raise ValueError
                out.append(int(digits, 16))
            except ValueError:
                raise click.BadParameter(f"{text!r}: \\x needs two hex digits") from None
            i += 4
        else:
            raise click.BadParameter(f"{text!r}: unknown escape \\{chr(e)}")
    if not out:
        raise click.BadParameter("the delimiter must not be empty")
    return bytes(out)


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


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from digits, or from an ISO 8601 date-time.

    A date-time without a zone is taken as UTC (the same on every machine).

    Raises:
        click.BadParameter: neither form.
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither milliseconds nor an ISO date-time (2024-05-01T12:00:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


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


def _text_or_b64(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


_TS_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def record_to_json(record: Any) -> dict[str, Any]:
    """A consumed record as a JSON-able dict.

    Keys, values and header values that are valid UTF-8 become strings; other
    bytes become ``{"base64": "..."}``; null stays null.
    """
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": _TS_TYPES.get(record.timestamp_type, "NoTimestampType"),
        "key": _text_or_b64(record.key),
        "value": _text_or_b64(record.value),
        "headers": [[k, _text_or_b64(v)] for k, v in record.headers],
    }


# kcat's -f tokens: what each prints of a record (null keys and values as -Z's text).
_FORMAT_TOKENS = "ksSKtpoTh%"


def compile_format(template: str, null: bytes = b"") -> Callable[[Any], bytes]:
    """A kcat-style output format: ``%s`` value, ``%S`` value length, ``%k`` key,
    ``%K`` key length (-1 for null), ``%t`` topic, ``%p`` partition, ``%o``
    offset, ``%T`` timestamp (ms), ``%h`` headers (``k=v,k2=v2``), ``%%`` a
    percent sign; the escapes of :func:`parse_delimiter` (``\\n``, ``\\t`` ...)
    anywhere. Nothing is added after a record but what the format says.

    Returns:
        ``record -> bytes``.

    Raises:
        click.BadParameter: an unknown token, or a ``%`` at the end.
    """
    parts: list[bytes | str] = []  # literal bytes, or a token letter
    text = parse_delimiter(template) if template else b""
    i = 0
    literal = bytearray()
    while i < len(text):
        c = text[i]
        if c != ord("%"):
            literal.append(c)
            i += 1
            continue
        if i + 1 >= len(text) or chr(text[i + 1]) not in _FORMAT_TOKENS:
            token = chr(text[i + 1]) if i + 1 < len(text) else ""
            raise click.BadParameter(
                f"unknown format token %{token} (known: "
                + " ".join(f"%{t}" for t in _FORMAT_TOKENS)
                + ")",
                param_hint="-f",
            )
        token = chr(text[i + 1])
        if token == "%":
            literal.append(ord("%"))
        else:
            if literal:
                parts.append(bytes(literal))
                literal.clear()
            parts.append(token)
        i += 2
    if literal:
        parts.append(bytes(literal))

    def value_of(token: str, record: Any) -> bytes:
        if token == "s":
            return null if record.value is None else record.value
        if token == "k":
            return null if record.key is None else record.key
        if token == "S":
            return b"-1" if record.value is None else b"%d" % len(record.value)
        if token == "K":
            return b"-1" if record.key is None else b"%d" % len(record.key)
        if token == "t":
            return str(record.topic).encode()
        if token == "h":
            return b",".join(
                k.encode() + b"=" + (null if v is None else v) for k, v in record.headers
            )
        number = {"p": record.partition, "o": record.offset, "T": record.timestamp}[token]
        return b"%d" % number

    def render(record: Any) -> bytes:
        return b"".join(p if isinstance(p, bytes) else value_of(p, record) for p in parts)

    return render


def _parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint=what)
        out[key.strip()] = value
    return out


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


# -- running ------------------------------------------------------------------------------


def _run(
    fn: Callable[..., Awaitable[T]],
    *args: Any,
    explain: Callable[[KafkaError], click.ClickException] | None = None,
) -> T:
    """Run ``fn`` under trio; client errors become one-line click errors (exit 1),
    a broker's refusal worded by ``explain`` when given."""
    import trio

    try:
        return trio.run(fn, *args)
    except KafkaError as exc:
        if explain is not None:
            raise explain(exc) from None
        raise click.ClickException(str(exc)) from None  # it names the error
    except TrafkaError as exc:
        raise click.ClickException(str(exc)) from None


def _say(text: str) -> None:
    click.echo(text, err=True)


def _client_config(
    bootstrap: str, extra: Sequence[str], defaults: dict[str, Any]
) -> dict[str, Any]:
    cfg: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": CLIENT_ID}
    cfg.update(defaults)
    cfg.update(_parse_pairs(extra, "-X"))
    # A broker going out of reach is said at once, though the client retries.
    cfg["error_cb"] = BrokerNotices(_say)
    return cfg


def _make(cls: Any, cfg: dict[str, Any]) -> Any:
    from trafka.sdk import ConfigError

    try:
        return cls.from_dict(cfg)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options every client command takes."""
    fn = click.option(
        "-X",
        "--property",
        "properties",
        multiple=True,
        metavar="KEY=VALUE",
        help="A client setting by its Kafka name (repeatable), e.g. -X linger.ms=20.",
    )(fn)
    fn = click.option(
        "-m",
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        help="Seconds to wait for metadata and other blocking calls.",
    )(fn)
    fn = click.option(
        "-b",
        "--bootstrap-server",
        "bootstrap",
        envvar=ENV_BOOTSTRAP,
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        metavar="HOST:PORT[,...]",
        help=f"Broker(s) to start from, or zeroconf[:cluster=ID] to find them on the "
        f"local network (also ${ENV_BOOTSTRAP}).",
    )(fn)
    return fn


async def _check_reachable(cluster: Any) -> None:
    # Fail fast: a refused connection is reported now, not after max.block.ms.
    await cluster.any_connection()


# -- produce ------------------------------------------------------------------------------


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
    #: The input was not sent to its end (send blocked for max.block.ms).
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


async def _produce(opts: _ProduceOptions, cfg: dict[str, Any]) -> _ProduceOutcome:
    from trafka.sdk import ProducerBlockedError, ProducerConfig, TopicPartition, open_producer

    config = _make(ProducerConfig, cfg)
    notices: BrokerNotices = cfg["error_cb"]
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
    progress = _Progress(total, enabled and not opts.quiet)
    outcome = _ProduceOutcome()
    pending: deque[Any] = deque()
    # Ctrl-C ends the input (what was read is still delivered); a second one
    # ends the wait for the deliveries.
    reading, waiting = anyio.CancelScope(), anyio.CancelScope()

    def interrupted(count: int, signum: Any) -> None:
        if count == 1:
            _say(f"{signum.name}: delivering what was read (again to stop waiting)")
        else:
            _say(f"{signum.name}: not waiting for the deliveries still open")

    watch = PartitionWatch(
        0.0, _say, "records for it wait for a leader (at most delivery.timeout.ms)"
    )

    async def keep_watching(producer: Any) -> None:
        # The producer retries by itself; what it waits for is said meanwhile.
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

    kd, null_empty, fixed_key = opts.key_delimiter, opts.null_empty, opts.fixed_key
    try:
        async with (
            signals_watched(outcome.interrupts, [reading, waiting], interrupted),
            open_producer(config) as producer,
            beside(functools.partial(keep_watching, producer)),
        ):
            # A signal ends the reading wherever it is, connecting included.
            with reading:
                await _check_reachable(producer.cluster)
                await _check_topics(producer.cluster, [opts.topic])
                async with contextlib.aclosing(_messages(opts, progress)) as messages:
                    async for message in messages:
                        if opts.count is not None and outcome.sent >= opts.count:
                            break
                        key = fixed_key
                        value: bytes | None = message
                        if kd is not None:
                            k, sep, v = message.partition(kd)
                            if sep:
                                key, value = k, v
                        if null_empty:
                            key = key or None
                            value = value or None
                        # Cancelled only before the record is taken: once send
                        # returns, the record is in a batch and counted.
                        try:
                            future = await producer.send(
                                opts.topic,
                                value,
                                key,
                                partition=opts.partition,
                                headers=opts.headers,
                            )
                        except ProducerBlockedError as exc:
                            # No room or no metadata for max.block.ms: stop reading,
                            # and still deliver (and count) what was taken.
                            _say(f"Error: {exc}; the rest of the input is not sent")
                            outcome.blocked = True
                            break
                        pending.append(future)
                        outcome.sent += 1
                        if outcome.sent & 1023 == 0:
                            outcome.settle(pending)
                            progress.advance(1024)
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
        _say(f"first delivery error: {outcome.first_error}")
    return outcome


@click.command("produce")
@click.argument("topic")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@_common
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
) -> None:
    """Send messages to TOPIC: lines of stdin, or FILES (one message each; -l for lines).

    \b
    Examples:
      seq 100 | trafka produce numbers
      printf 'user-1:clicked\\n' | trafka produce events -K: -H source=cli
      trafka produce blobs image.png -z zstd
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
    )
    cfg = _client_config(
        bootstrap,
        properties,
        {
            "acks": acks,
            "compression.type": compression,
            "max.block.ms": int(timeout * 1000),
            "linger.ms": 5,
        },
    )
    with _sdk_warnings_on_stderr("trafka.sdk.producer"):
        outcome = _run(_produce, opts, cfg)
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


# -- consume ------------------------------------------------------------------------------


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
    #: Seconds -e waits for an unreachable partition before giving it up (-m).
    grace: float = 10.0


@dataclasses.dataclass(slots=True)
class _ConsumeOutcome:
    printed: int = 0
    #: The partitions -e gave up on, with why.
    unreached: dict[Any, str] = dataclasses.field(default_factory=dict)
    interrupts: Interrupts = dataclasses.field(default_factory=Interrupts)


class _OutputFormat(Protocol):
    """How records are printed: consume's -J/-f, -D, -K and -Z (share-consume's too)."""

    json: bool
    delimiter: bytes
    key_delimiter: bytes | None
    null_str: bytes


def _writer(
    opts: _OutputFormat,
    out: IO[bytes],
    to_json: Callable[[Any], dict[str, Any]] = record_to_json,
) -> Callable[[Any], None]:
    """Prints a record to ``out``: a line of JSON (``to_json``'s object) or raw."""
    if opts.json:

        def write_json(record: Any) -> None:
            out.write(json.dumps(to_json(record), ensure_ascii=False).encode() + b"\n")

        return write_json
    delim, kd, null = opts.delimiter, opts.key_delimiter, opts.null_str
    template = getattr(opts, "template", None)
    if template is not None:
        render = compile_format(template, null)

        def write_formatted(record: Any) -> None:
            out.write(render(record))

        return write_formatted

    def write_raw(record: Any) -> None:
        if kd is not None:
            out.write(null if record.key is None else record.key)
            out.write(kd)
        value = record.value
        out.write((null if value is None else value) + delim)

    return write_raw


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
    # "stored": the consumer looks up the committed offsets itself.


def _at_end(consumer: Any, given_up: Mapping[Any, str]) -> bool:
    """Whether every assigned partition is read to its end, or given up."""
    tps = consumer.assignment()
    return bool(tps) and all(tp in given_up or consumer.lag(tp) == 0 for tp in tps)


async def _check_topics(cluster: Any, topics: Sequence[str]) -> None:
    """A topic that does not exist is an error at once (and is not created)."""
    md = cluster.metadata
    await cluster.refresh_metadata(topics)
    missing = [
        t
        for t in topics
        if md.partition_count(t) is None
        and md.topic_errors.get(t) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ]
    if missing:
        raise click.ClickException(f"no such topic: {', '.join(missing)}")


async def _consume(opts: _ConsumeOptions, cfg: dict[str, Any]) -> _ConsumeOutcome:
    from trafka.sdk import ConsumerConfig, TopicPartition, open_consumer

    config = _make(ConsumerConfig, cfg)
    notices: BrokerNotices = cfg["error_cb"]
    out = sys.stdout.buffer
    write = _writer(opts, out)
    outcome = _ConsumeOutcome()
    then = f"giving it up after {opts.grace:g} s (-m)" if opts.exit_at_end else "waiting for it"
    watch = PartitionWatch(opts.grace, _say, then)
    stop = anyio.CancelScope()

    def interrupted(count: int, signum: Any) -> None:
        commit = " and committing what was printed" if opts.group is not None else ""
        _say(f"{signum.name}: stopping{commit} (again to quit at once)")

    async with (
        signals_watched(outcome.interrupts, [stop], interrupted),
        open_consumer(config=config) as consumer,
    ):
        cluster = consumer.cluster
        # A signal ends the command wherever it is, connecting included.
        with stop:
            await _check_reachable(cluster)
            await _check_topics(cluster, opts.topics)
            if opts.group is not None and not opts.partitions:
                consumer.subscribe(list(opts.topics))
            else:
                tps = []
                for topic in opts.topics:
                    parts = opts.partitions or tuple(await consumer.partitions_for(topic))
                    tps += [TopicPartition(topic, p) for p in parts]
                consumer.assign(tps)
                await _position(consumer, tps, opts.offset or OffsetSpec("beginning"))
            while True:
                limit = None if opts.count is None else opts.count - outcome.printed
                if limit == 0:
                    break
                batch = await consumer.getmany(timeout_ms=200, max_records=limit)
                for records in batch.values():
                    for record in records:
                        write(record)
                    outcome.printed += len(records)
                if batch:
                    out.flush()
                # What the client retries by itself is said, and -e gives up on
                # partitions it cannot reach rather than wait for them for ever.
                now = anyio.current_time()
                unreachable = cluster.unreachable_brokers
                notices.check(unreachable)
                watch.update(consumer.assignment(), cluster.metadata, unreachable, now)
                if opts.exit_at_end:
                    given_up = watch.given_up(now)
                    if _at_end(consumer, given_up):
                        outcome.unreached = given_up
                        break
    return outcome


@click.command("consume")
@click.argument("topics", nargs=-1, required=True)
@_common
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
) -> None:
    """Print records of TOPICS to stdout.

    \b
    Examples:
      trafka consume events -e                    # everything there now
      trafka consume events -o -10 -J             # the last 10 per partition, as JSON
      trafka consume events -G audit              # as group "audit", from its commits
      trafka consume events -p 0 -o s@2024-05-01T00:00:00 -c 5
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
    cfg = _client_config(bootstrap, properties, defaults)
    try:
        outcome = _run(_consume, opts, cfg)
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
    status = outcome.interrupts.exit_status
    if status is not None:
        raise click.exceptions.Exit(status)
    if outcome.unreached:
        raise click.exceptions.Exit(1)


# -- topics -------------------------------------------------------------------------------


def _found(hit: Any) -> Any:
    """A partial list_offsets result: ``(offset, timestamp)``, or None (none
    found, or the partition could not be asked)."""
    return None if isinstance(hit, TrafkaError) else hit


async def _with_admin(cfg: dict[str, Any], fn: Callable[[Any], Awaitable[T]]) -> T:
    from trafka.sdk import AdminConfig, open_admin

    config = _make(AdminConfig, cfg)
    async with open_admin(config) as admin:
        await _check_reachable(admin.cluster)
        return await fn(admin)


def _admin_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the connection options to an admin subcommand; it receives them as ``cfg``."""

    @functools.wraps(fn)
    def wrapper(bootstrap: str, timeout: float, properties: tuple[str, ...], **kwargs: Any) -> Any:
        cfg = _client_config(bootstrap, properties, {"default.api.timeout.ms": int(timeout * 1000)})
        return fn(cfg=cfg, **kwargs)

    return _common(wrapper)


@click.group("topics")
def topics_command() -> None:
    """List, create, describe and delete topics."""


@topics_command.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_admin_options
def topics_list(cfg: dict[str, Any], internal: bool, as_json: bool) -> None:
    """Every topic and its partition count."""

    async def run(admin: Any) -> dict[str, int]:
        result: dict[str, int] = await admin.list_topics(include_internal=internal)
        return result

    topics = _run(_with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps(dict(sorted(topics.items()))))
    elif topics:
        click.echo(_table(["TOPIC", "PARTITIONS"], sorted(topics.items())))


@topics_command.command("create")
@click.argument("names", nargs=-1, required=True)
@click.option("-p", "--partitions", type=click.IntRange(min=1), help="Default: the broker's.")
@click.option("-r", "--replication-factor", type=click.IntRange(min=1), help="Default: broker's.")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--if-not-exists", is_flag=True, help="An existing topic is not an error.")
@_admin_options
def topics_create(
    cfg: dict[str, Any],
    names: tuple[str, ...],
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
) -> None:
    """Create topics."""
    from trafka.sdk import NewTopic

    settings = _parse_pairs(configs, "-c")
    new = [NewTopic(n, partitions or -1, replication_factor or -1, settings) for n in names]

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

    for name in _run(_with_admin, cfg, run):
        click.echo(f"created {name}", err=True)


@topics_command.command("delete")
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="A missing topic is not an error.")
@_admin_options
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

    for name in _run(_with_admin, cfg, run):
        click.echo(f"deleted {name}", err=True)


@topics_command.command("describe")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_admin_options
def topics_describe(cfg: dict[str, Any], names: tuple[str, ...], as_json: bool) -> None:
    """Partitions (leader, replicas, ISR, offsets, size on disk) and config
    overrides of topics."""
    from trafka.codec import UnsupportedVersionError
    from trafka.sdk import TopicPartition

    async def run(admin: Any) -> list[dict[str, Any]]:
        infos = await admin.describe_topics(names)
        configs = await admin.describe_configs(topics=names, overrides_only=True)
        tps = [TopicPartition(n, p.partition) for n in names for p in infos[n].partitions]
        # A partition without a leader is described as it is (kafka-topics'
        # "Leader: none"): nobody can tell its offsets, and nobody is asked.
        led = [
            TopicPartition(n, p.partition)
            for n in names
            for p in infos[n].partitions
            if p.leader >= 0
        ]
        earliest = await admin.list_offsets(dict.fromkeys(led, "earliest"), partial=True)
        latest = await admin.list_offsets(dict.fromkeys(led, "latest"), partial=True)
        for tp, hit in latest.items():
            if isinstance(hit, TrafkaError):
                _say(f"warning: the offsets of {tp.topic}-{tp.partition} are unknown: {hit}")
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
        for n in names:
            info = infos[n]
            parts = []
            for p in info.partitions:
                tp = TopicPartition(n, p.partition)
                lo, hi = _found(earliest.get(tp)), _found(latest.get(tp))
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

    described = _run(_with_admin, cfg, run)
    offline = [
        f"{t['topic']}-{p['partition']}"
        for t in described
        for p in t["partitions"]
        if p["leader"] < 0
    ]
    if offline:
        _say(f"warning: offline (no leader): {', '.join(offline)}")
    if as_json:
        click.echo(json.dumps(described))
        return
    for i, t in enumerate(described):
        if i:
            click.echo()
        rf = len(t["partitions"][0]["replicas"]) if t["partitions"] else 0
        click.echo(
            f"Topic: {t['topic']}  TopicId: {t['topic_id']}  "
            f"PartitionCount: {len(t['partitions'])}  ReplicationFactor: {rf}"
        )
        if t["configs"]:
            click.echo("Configs: " + ", ".join(f"{k}={v}" for k, v in sorted(t["configs"].items())))
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
            for p in t["partitions"]
        ]
        click.echo(
            _table(["PARTITION", "LEADER", "REPLICAS", "ISR", "EARLIEST", "LATEST", "SIZE"], rows)
        )


# -- features -----------------------------------------------------------------------------


def _level_range(levels: tuple[int, int] | None) -> str | None:
    if levels is None:
        return None
    low, high = levels
    return str(high) if low == high else f"{low}-{high}"


def _describe_features(cfg: dict[str, Any], as_json: bool) -> None:
    async def run(admin: Any) -> Any:
        return await admin.describe_features()

    found = _run(_with_admin, cfg, run)
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
        click.echo("the broker reports no features (it predates KIP-584)", err=True)
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
    click.echo(_table(["FEATURE", "SUPPORTED", "FINALIZED", "EPOCH"], rows))


@click.group("features", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (describe).")
@_admin_options
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
@_admin_options
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

    outcome = _run(_with_admin, cfg, run, explain=lambda exc: _explain_features(exc, verb))
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
@_admin_options
def features_upgrade(cfg: dict[str, Any], features: tuple[str, ...], dry_run: bool) -> None:
    """Raise (or keep) feature levels."""
    _update_features(cfg, _feature_levels(features), "UPGRADE", dry_run, "upgrade")


@features_command.command("downgrade")
@click.option("--feature", "features", multiple=True, required=True, help=_FEATURE_HELP)
@click.option("--unsafe", is_flag=True, help=_UNSAFE_HELP)
@click.option("--dry-run", is_flag=True, help=_DRY_RUN_HELP)
@_admin_options
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
@_admin_options
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


# -- groups -------------------------------------------------------------------------------


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
@_admin_options
def groups_list(cfg: dict[str, Any], types: tuple[str, ...], as_json: bool) -> None:
    """Every group: id, state, protocol type and group type (classic, consumer or share)."""

    async def run(admin: Any) -> list[Any]:
        result: list[Any] = await admin.list_groups(types=[t.lower() for t in types] or None)
        return result

    groups = sorted(_run(_with_admin, cfg, run), key=lambda g: g.group_id)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(g) for g in groups]))
    elif groups:
        click.echo(
            _table(
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
            _say(f"warning: the lag of {tp.topic}-{tp.partition} is unknown: {hit}")
    rows = []
    for tp in tps:
        end = _found(latest.get(tp))
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
@_admin_options
def groups_describe(cfg: dict[str, Any], group_ids: tuple[str, ...], as_json: bool) -> None:
    """State, members, committed offsets and lag of groups; of a share group its
    state, epochs, members with their subscriptions and assignments, and each
    partition's start offset and lag."""

    async def run(admin: Any) -> list[dict[str, Any]]:
        return [await _describe_group(admin, g) for g in group_ids]

    described = _run(_with_admin, cfg, run)
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
                _table(
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
            _table(["CONSUMER-ID", "HOST", "CLIENT-ID", "EPOCH", "SUBSCRIBED", "ASSIGNMENT"], rows)
        )
    # The share-partitions, as kafka-share-groups.sh --describe --offsets shows them.
    if g["partitions"]:
        click.echo(
            _table(
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
@_admin_options
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

        desc, share = await _classic_or_share(admin, group_id)
        if share is not None:
            if share.members:
                raise click.ClickException(
                    f"share group {group_id!r} is {share.state} with {len(share.members)} "
                    "members; its offsets can only be reset while it is empty"
                )
            starts = await admin.list_share_group_offsets(group_id)
            committed = {tp: info.start_offset for tp, info in starts.items() if info}
            known = sorted(starts)
        else:
            if desc.state in _ACTIVE_STATES or desc.members:
                raise click.ClickException(
                    f"group {group_id!r} is {desc.state} with {len(desc.members)} members; "
                    "offsets can only be reset while it is inactive"
                )
            committed = await admin.list_consumer_group_offsets(group_id)
            known = sorted(committed)
        if all_topics:
            tps = known
        else:
            names = [t for t, _ in wanted]
            infos = await admin.describe_topics(names)
            tps = []
            for t, parts in wanted:
                present = {p.partition for p in infos[t].partitions}
                for p in parts if parts is not None else sorted(present):
                    if p not in present:
                        raise click.ClickException(f"{t} has no partition {p}")
                    tps.append(TopicPartition(t, p))
        if not tps:
            return [], share is not None
        earliest = await admin.list_offsets(dict.fromkeys(tps, "earliest"), partial=True)
        latest = await admin.list_offsets(dict.fromkeys(tps, "latest"), partial=True)
        by_time: dict[TopicPartition, Any] = {}
        if when is not None:
            by_time = await admin.list_offsets(dict.fromkeys(tps, when), partial=True)
        # The plan needs every partition's log bounds: one that cannot be asked
        # (offline) stops the whole reset, at once and naming it.
        unknown = {
            tp: hit
            for found in (earliest, latest, by_time)
            for tp, hit in found.items()
            if isinstance(hit, TrafkaError)
        }
        if unknown:
            which = "; ".join(
                f"{tp.topic}-{tp.partition}: {e}" for tp, e in sorted(unknown.items())
            )
            raise click.ClickException(
                f"cannot plan the reset, nothing changed: the offsets of {which} are unknown"
            )
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
            if share is not None:
                await admin.alter_share_group_offsets(group_id, new_offsets)
            else:
                await admin.alter_consumer_group_offsets(group_id, new_offsets)
        return plan, share is not None

    plan, is_share = _run(_with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps(plan))
    elif plan:
        click.echo(
            _table(
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
@_admin_options
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

    click.echo(_run(_with_admin, cfg, run), err=True)


@groups_command.command("delete")
@click.argument("group_ids", nargs=-1, required=True)
@_admin_options
def groups_delete(cfg: dict[str, Any], group_ids: tuple[str, ...]) -> None:
    """Delete empty groups and their committed offsets."""

    async def run(admin: Any) -> None:
        await admin.delete_groups(group_ids)

    _run(_with_admin, cfg, run)
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
@_admin_options
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

    results = _run(_with_admin, cfg, run)

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
@_admin_options
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

    described = _run(_with_admin, cfg, run)
    if as_json:
        click.echo(json.dumps(described))
        return
    for i, g in enumerate(described):
        if i:
            click.echo()
        click.echo(f"Group: {g['group']}")
        if g["configs"]:
            rows = [(c["name"], c["value"], c["source"]) for c in g["configs"]]
            click.echo(_table(["NAME", "VALUE", "SOURCE"], rows))


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
@_admin_options
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
    changes: dict[str, str | None] = dict(_parse_pairs(settings, "KEY=VALUE"))
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

    _run(_with_admin, cfg, run)
    for key, value in changes.items():
        if value is None:
            click.echo(f"deleted {key} of group {group_id}", err=True)
        else:
            click.echo(f"set {key}={value} for group {group_id}", err=True)
