"""The kit the client commands share (``trafka produce``, ``consume``, ``topics``,
``groups``, ``acls``, ``quotas``...): their connection options, how they run
and report, and the small pure pieces of their output.

Rules:

* Every command talks to ``-b/--bootstrap-server`` (:func:`client_options`),
  which defaults to the ``TRAFKA_BOOTSTRAP_SERVERS`` environment variable and
  then to ``127.0.0.1:9092`` (where ``trafka broker`` listens). Client
  settings pass through as ``-X key=value`` with Kafka's names; an unknown key
  is a usage error naming it (:func:`make_config`).
* Each command runs one ``trio.run`` over the SDK (:func:`run_client`; Ctrl-C
  cancels it, see :mod:`~trafka.tools.cli_faults`) and
  connects first (:func:`check_reachable`), so an unreachable broker fails at
  once with one line on stderr, not after a metadata timeout. Client errors
  exit 1 with one line (``Error: ...``); usage errors exit 2 (click's
  convention). A broker going out of reach meanwhile is said on stderr
  (:func:`client_settings` gives every client a
  :class:`~trafka.tools.cli_faults.BrokerNotices` as its ``error_cb``). A
  broker that accepts connections but answers nothing (hung, a frozen host) is
  out of reach once a connect has taken 5 s (``socket.connection.setup.timeout.ms``,
  which ``-X`` can change; the SDK's default is 10 s), so that a person at the
  terminal hears of it within 10 s of the command's start.
* Data goes to stdout; progress, summaries and dry-run notes go to stderr
  (:func:`echo_err`), so the output can be piped.
* The admin commands take the same options (:func:`admin_options`) and run
  one call on an admin client (:func:`with_admin`); tables are aligned
  columns with ``-`` for what is unknown (:func:`format_table`).

The pure pieces (:func:`parse_delimiter`, :func:`parse_timestamp`,
:func:`record_to_json`, :func:`compile_format`) are tested on their own.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import IO, Any, Protocol, TypeVar

import click

from trafka.codec import ErrorCode, KafkaError, TrafkaError

from .cli_faults import BrokerNotices, run_interruptible

__all__ = [
    "CLIENT_ID",
    "SETUP_TIMEOUT_MS",
    "DEFAULT_BOOTSTRAP",
    "ENV_BOOTSTRAP",
    "OutputFormat",
    "admin_options",
    "check_reachable",
    "check_topics_exist",
    "client_options",
    "client_settings",
    "compile_format",
    "echo_err",
    "format_table",
    "found_offset",
    "make_config",
    "parse_delimiter",
    "parse_pairs",
    "parse_timestamp",
    "record_to_json",
    "record_writer",
    "run_client",
    "with_admin",
]


DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
ENV_BOOTSTRAP = "TRAFKA_BOOTSTRAP_SERVERS"
CLIENT_ID = "trafka-cli"
#: The commands' ``socket.connection.setup.timeout.ms`` (the SDK's is 10 s): see the rules.
SETUP_TIMEOUT_MS = 5000


T = TypeVar("T")


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


def parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict (the last of a key wins).

    Raises:
        click.BadParameter: an item without ``=`` or a key, naming the option ``what``.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint=what)
        out[key.strip()] = value
    return out


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Aligned columns under ``headers``, two spaces apart; None prints as ``-``."""
    rows = [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def run_client(
    fn: Callable[..., Awaitable[T]],
    *args: Any,
    explain: Callable[[KafkaError], click.ClickException] | None = None,
) -> T:
    """Run ``fn`` under trio; client errors become one-line click errors (exit 1),
    a broker's refusal worded by ``explain`` when given. Ctrl-C cancels the run
    and raises KeyboardInterrupt after it (:func:`~trafka.tools.cli_faults.run_interruptible`),
    which the ``trafka`` group reports."""
    try:
        return run_interruptible(fn, *args)
    except KafkaError as exc:
        if explain is not None:
            raise explain(exc) from None
        raise click.ClickException(str(exc)) from None  # it names the error
    except TrafkaError as exc:
        raise click.ClickException(str(exc)) from None


def echo_err(text: str) -> None:
    """One line on stderr (notes, warnings, summaries: never data)."""
    click.echo(text, err=True)


def client_settings(
    bootstrap: str, extra: Sequence[str], defaults: dict[str, Any]
) -> dict[str, Any]:
    """A client's settings: ``defaults`` under the ``-X`` pairs ``extra``, with
    the bootstrap servers, the CLI's client id and an ``error_cb`` that says
    on stderr when a broker goes out of reach (:class:`BrokerNotices`)."""
    cfg: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": CLIENT_ID,
        "socket.connection.setup.timeout.ms": SETUP_TIMEOUT_MS,
    }
    cfg.update(defaults)
    cfg.update(parse_pairs(extra, "-X"))
    # A broker going out of reach is said at once, though the client retries.
    cfg["error_cb"] = BrokerNotices(echo_err)
    return cfg


def make_config(cls: Any, cfg: dict[str, Any]) -> Any:
    """``cls.from_dict(cfg)`` (an SDK config class).

    Raises:
        click.UsageError: a setting the SDK refuses (an unknown key is named).
    """
    from trafka.sdk import ConfigError

    try:
        return cls.from_dict(cfg)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def client_options(fn: Callable[..., Any]) -> Callable[..., Any]:
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


async def check_reachable(cluster: Any) -> None:
    """Connect to some broker of ``cluster`` (an SDK client's) now.

    Fail fast: a refused connection is reported at once, not after max.block.ms.
    """
    await cluster.any_connection()


class OutputFormat(Protocol):
    """How records are printed: consume's -J/-f, -D, -K and -Z (share-consume's too)."""

    json: bool
    delimiter: bytes
    key_delimiter: bytes | None
    null_str: bytes


def record_writer(
    opts: OutputFormat,
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


async def check_topics_exist(cluster: Any, topics: Sequence[str]) -> None:
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


def found_offset(hit: Any) -> Any:
    """A partial list_offsets result: ``(offset, timestamp)``, or None (none
    found, or the partition could not be asked)."""
    return None if isinstance(hit, TrafkaError) else hit


async def with_admin(cfg: dict[str, Any], fn: Callable[[Any], Awaitable[T]]) -> T:
    """``await fn(admin)`` on an admin client of ``cfg``, once a broker is reached."""
    from trafka.sdk import AdminConfig, open_admin

    config = make_config(AdminConfig, cfg)
    async with open_admin(config) as admin:
        await check_reachable(admin.cluster)
        return await fn(admin)


def admin_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the connection options to an admin subcommand; it receives them as ``cfg``."""

    @functools.wraps(fn)
    def wrapper(bootstrap: str, timeout: float, properties: tuple[str, ...], **kwargs: Any) -> Any:
        cfg = client_settings(
            bootstrap, properties, {"default.api.timeout.ms": int(timeout * 1000)}
        )
        return fn(cfg=cfg, **kwargs)

    return client_options(wrapper)
