"""``trafka decode``: Kafka frames from a captured byte stream, as JSON lines.

Rules and invariants:

* The input is a stream of frames as they cross the wire: an int32 size, then
  that many bytes. By default they are requests (client to broker); with
  ``responses=(api_key, api_version)`` every frame is a response of that API and
  version, since a response does not say what it answers.
* Each frame gives exactly one JSON object, numbered from 0 in stream order:
  either the decoded frame or ``{"frame": i, "error": ...}``.
* A frame whose body fails to decode is skipped by its size prefix and decoding
  goes on with the next one; the error names the message and the field path.
  A broken size prefix (negative, or above ``max_frame_size``) loses the framing:
  it yields one error and the rest of the stream is ignored. Input that ends
  inside a frame yields one error for that frame.
* Record sets (fields whose dataclass metadata has ``kafka_type == "records"``)
  become a list of their entries (batches, or legacy messages), each with its
  header fields and records, checksums verified. A broken entry fails the frame,
  and the error's field path gives the entry's index (``records[1].crc``). A
  partial entry at the end of a record set is legal in fetch responses (the
  broker cuts at ``max_bytes``) and shows as a last ``{"partial_batch_bytes": n}``
  entry instead of an error.
* Anything else going wrong inside the decoder is reported on that frame as an
  internal error and decoding goes on.
* ``bytes`` become base64 strings, UUIDs their canonical string, non-finite
  floats the strings ``"NaN"``/``"Infinity"``/``"-Infinity"``, and
  ``unknown_tagged_fields`` is only shown when non-empty.

:class:`StreamDecoder` (and :class:`HexDecoder` for hex text) is I/O-free: feed
bytes, get JSON-able dicts. :func:`decode_stream` runs both on a whole input.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import click

from trafka.codec import protocol
from trafka.codec.errors import CodecError, DecodeError, TrafkaError
from trafka.codec.framing import DEFAULT_MAX_FRAME_SIZE, FrameReader

__all__ = [
    "HexDecoder",
    "StreamDecoder",
    "command",
    "decode_frame",
    "decode_stream",
    "format_json",
    "resolve_api_key",
    "to_json",
]

JSON = Any  # what json.dumps accepts: dict/list/str/int/float/bool/None


# -- values -> JSON ------------------------------------------------------------------


def _b64(data: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(data).decode("ascii")


def to_json(value: Any, path: str = "") -> JSON:
    """Convert a decoded message (or any part of it) to JSON-able values.

    Args:
        value: a message dataclass, list, bytes, UUID or scalar.
        path: the field path of ``value`` inside its message, used to name the
            field when an embedded record set fails to decode.

    Returns:
        dicts (dataclasses, by field name), lists, strings, numbers, booleans and None.

    Raises:
        DecodeError: a record set is malformed; ``field`` holds its path.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        return _b64(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [to_json(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, JSON] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            sub = f"{path}.{f.name}" if path else f.name
            if f.name == "unknown_tagged_fields":
                if item:
                    out[f.name] = [{"tag": tag, "data": _b64(data)} for tag, data in item]
            elif f.metadata.get("kafka_type") == "records":
                out[f.name] = records_to_json(item, sub)
            else:
                out[f.name] = to_json(item, sub)
        return out
    raise TypeError(f"cannot convert {type(value).__name__} at {path or 'top level'} to JSON")


def records_to_json(blob: bytes | None, path: str = "records") -> JSON:
    """Expand a record set into its batches and records (see the module rules).

    Raises:
        DecodeError: a batch is malformed or fails its checksum; ``field`` is
            ``path`` plus the batch index.
    """
    if blob is None:
        return None
    return _expand_records(bytes(blob), path)


def _expand_records(blob: bytes, path: str) -> JSON:
    # Imported here: the CLI must still start (and decode everything else) if the
    # record module is broken, and most frames carry no records at all.
    from trafka.codec import records as rec

    batches: list[JSON] = []
    consumed = 0  # where the entry being decoded starts; len(batches) is its index
    try:
        for header, view in rec.iter_batches(blob):
            batches.append(_entry_to_json(rec, header, view))
            consumed += len(view)
    except CodecError as exc:
        index = len(batches)
        where = f"{exc.message_name or 'Records'} at byte {consumed}"
        raise DecodeError(
            f"{where}: {exc.detail}",
            field=f"{path}[{index}].{exc.field}" if exc.field else f"{path}[{index}]",
        ) from None
    if consumed < len(blob):
        batches.append({"partial_batch_bytes": len(blob) - consumed})
    return batches


def _header_fields(header: Any) -> dict[str, JSON]:
    if hasattr(header, "_asdict"):  # NamedTuple headers
        items = header._asdict()
    else:
        items = {f.name: getattr(header, f.name) for f in dataclasses.fields(header)}
    return {name: to_json(value) for name, value in items.items()}


def _entry_to_json(rec: Any, header: Any, view: memoryview) -> dict[str, JSON]:
    out = _header_fields(header)
    out["compression"] = header.compression.name.lower()
    out["timestamp_type"] = header.timestamp_type.name
    if header.magic == 2:
        out["is_transactional"] = header.is_transactional
        out["is_control"] = header.is_control
        records = rec.decode_batch(view).records
    else:
        from trafka.codec import legacy

        records = legacy.decode_legacy_entry(view, verify=True)
    out["records"] = [_record_to_json(rec, r, header) for r in records]
    return out


def _record_to_json(rec: Any, record: Any, header: Any) -> dict[str, JSON]:
    out: dict[str, JSON] = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": None if record.key is None else _b64(record.key),
        "value": None if record.value is None else _b64(record.value),
        "headers": [
            {"key": key, "value": None if value is None else _b64(value)}
            for key, value in record.headers
        ],
    }
    if header.magic == 2 and header.is_control:
        control = rec.decode_control_record(record)
        kind = control.type
        out["control"] = {
            "type": kind.name if isinstance(kind, enum.Enum) else kind,
            "version": control.version,
            "coordinator_epoch": control.coordinator_epoch,
        }
    return out


def format_json(value: JSON, width: int = 100, indent: int = 0, lead: int = 0) -> str:
    """JSON text that keeps whatever fits in ``width`` columns on one line.

    Lists and objects too wide for one line are broken one item per line,
    indented by two spaces; the result parses back to ``value``.

    Args:
        value: what to format.
        width: the line length to stay within where possible.
        indent: the column the value's closing bracket goes to.
        lead: how many columns the first line already uses (a key, say).
    """
    flat = json.dumps(value, ensure_ascii=False)
    if len(flat) + indent + lead <= width or not isinstance(value, dict | list) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = json.dumps(k, ensure_ascii=False) + ": "
            items.append(pad + key + format_json(v, width, indent + 2, len(key)))
        body = ",\n".join(items)
        return "{\n" + body + "\n" + " " * indent + "}"
    body = ",\n".join(pad + format_json(v, width, indent + 2) for v in value)
    return "[\n" + body + "\n" + " " * indent + "]"


# -- frames ----------------------------------------------------------------------------


def _error(index: int, offset: int, exc: BaseException, **known: Any) -> dict[str, JSON]:
    out: dict[str, JSON] = {"frame": index, "offset": offset, **known, "error": str(exc)}
    if isinstance(exc, CodecError) and exc.field:
        out["field"] = exc.field
    return out


def decode_frame(
    frame: bytes,
    index: int = 0,
    *,
    offset: int = 0,
    responses: tuple[int, int] | None = None,
) -> dict[str, JSON]:
    """Decode one frame (without its size prefix) into a JSON-able dict.

    Args:
        frame: the frame's bytes.
        index: the frame's position in the stream, reported as ``"frame"``.
        offset: where the frame's size prefix starts in the stream, reported on errors.
        responses: ``(api_key, api_version)`` to decode a response; ``None`` for a request.

    Returns:
        ``{"frame", "api_key", "api_name", "api_version", "header", "body"}``, or
        ``{"frame", "offset", ..., "error", "field"?}`` when the frame is malformed;
        never raises for bad input.
    """
    known: dict[str, Any] = {}
    try:
        if responses is not None:
            key, version = responses
            known = {"api_key": key, "api_version": version}
            header: Any
            header, body = protocol.decode_response(frame, key, version)
            known["correlation_id"] = header.correlation_id
        else:
            header, _ = protocol.decode_request_header(frame)
            key, version = header.request_api_key, header.request_api_version
            known = {
                "api_key": key,
                "api_version": version,
                "correlation_id": header.correlation_id,
            }
            header, body = protocol.decode_request(frame)
        info = protocol.api(key)
        try:
            body_json = to_json(body)
        except CodecError as exc:  # a record set inside the body
            kind = "Response" if responses is not None else "Request"
            exc.message_name = exc.message_name or f"{info.name}{kind} v{version}"
            raise
        return {
            "frame": index,
            "api_key": key,
            "api_name": info.name,
            "api_version": version,
            "header": to_json(header),
            "body": body_json,
        }
    except TrafkaError as exc:
        return _error(index, offset, exc, **known)
    except Exception as exc:  # a bug of ours must not end the stream it is decoding
        return _error(index, offset, RuntimeError(f"internal error: {exc!r}"), **known)


class StreamDecoder:
    """Split a byte stream into frames and decode each one; I/O-free.

    Args:
        responses: ``(api_key, api_version)`` when the stream holds responses.
        max_frame_size: the largest frame accepted; a larger size prefix ends the stream.

    Attributes:
        frames: frames seen so far (decoded or not).
        errors: how many of them produced an error line.
        broken: the framing was lost; further input is ignored.
    """

    def __init__(
        self,
        *,
        responses: tuple[int, int] | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.responses = responses
        self._reader = FrameReader(max_frame_size)
        self._offset = 0
        self.frames = 0
        self.errors = 0
        self.broken = False

    def feed(self, data: bytes) -> list[dict[str, JSON]]:
        """Add bytes; return a result for each frame they complete (often none)."""
        results: list[dict[str, JSON]] = []
        if self.broken:
            return results
        self._reader.feed(data)
        while True:
            try:
                frame = self._reader.next_frame()
            except DecodeError as exc:
                results.append(self.fail(exc))
                return results
            if frame is None:
                return results
            result = decode_frame(frame, self.frames, offset=self._offset, responses=self.responses)
            self._offset += 4 + len(frame)
            results.append(self._count(result))

    def close(self) -> list[dict[str, JSON]]:
        """End of input: return an error if it stopped inside a frame."""
        if self.broken:
            return []
        try:
            self._reader.close()
        except DecodeError as exc:
            return [self.fail(exc)]
        return []

    def fail(self, exc: BaseException) -> dict[str, JSON]:
        """Report an input error outside the framing (such as bad hex); ends the stream."""
        self.broken = True
        return self._count(_error(self.frames, self._offset, exc))

    def _count(self, result: dict[str, JSON]) -> dict[str, JSON]:
        self.frames += 1
        if "error" in result:
            self.errors += 1
        return result


class HexDecoder:
    """Incremental hex text -> bytes, ignoring whitespace; I/O-free.

    A digit pair may be split across calls to :meth:`feed`. At the first
    character that is neither a hex digit nor whitespace, :attr:`error` is set,
    the digits before it are still returned, and all later input is ignored.
    """

    _WHITESPACE = b" \t\r\n\v\f"
    _DIGITS = frozenset(b"0123456789abcdefABCDEF")

    def __init__(self) -> None:
        self._carry = b""
        self._digits_seen = 0
        self.error: DecodeError | None = None

    def feed(self, text: bytes) -> bytes:
        """Return the bytes that the new text completes."""
        if self.error is not None:
            return b""
        digits = self._carry + text.translate(None, self._WHITESPACE)
        bad = next((i for i, c in enumerate(digits) if c not in self._DIGITS), None)
        if bad is not None:
            self.error = DecodeError(
                f"invalid hex character {chr(digits[bad])!r} after "
                f"{self._digits_seen + bad} hex digits",
                message_name="hex input",
            )
            digits = digits[:bad]
        whole = len(digits) - len(digits) % 2
        self._carry = digits[whole:]
        self._digits_seen += whole
        return bytes.fromhex(digits[:whole].decode("ascii"))

    def close(self) -> None:
        """Raises DecodeError if an odd number of hex digits was fed."""
        if self.error is None and self._carry:
            self.error = DecodeError("odd number of hex digits", message_name="hex input")
        if self.error is not None:
            raise self.error


def decode_stream(
    chunks: bytes | Iterable[bytes],
    *,
    hex_input: bool = False,
    responses: tuple[int, int] | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> Iterator[dict[str, JSON]]:
    """Decode a whole stream of frames, yielding one JSON-able dict per frame.

    Args:
        chunks: the input, whole or in pieces (any split).
        hex_input: the input is hex text (whitespace ignored) rather than bytes.
        responses: ``(api_key, api_version)`` when the frames are responses.
        max_frame_size: the largest frame accepted.

    Yields:
        One dict per frame, in order; errors are dicts with an ``"error"`` key
        (see the module rules). Bad hex ends the stream with an error after the
        frames completed before it. Never raises for bad input.
    """
    if isinstance(chunks, bytes | bytearray | memoryview):
        chunks = [bytes(chunks)]
    decoder = StreamDecoder(responses=responses, max_frame_size=max_frame_size)
    hexer = HexDecoder() if hex_input else None
    for chunk in chunks:
        data = chunk if hexer is None else hexer.feed(chunk)
        yield from decoder.feed(data)
        if decoder.broken:
            return
        if hexer is not None and hexer.error is not None:
            yield decoder.fail(hexer.error)
            return
    if hexer is not None:
        try:
            hexer.close()
        except DecodeError as exc:
            yield decoder.fail(exc)
            return
    yield from decoder.close()


# -- command line ------------------------------------------------------------------------


def resolve_api_key(text: str) -> int:
    """An API key from its number or its name (``Produce``, ``fetch``...).

    Raises:
        ValueError: no such API.
    """
    try:
        key = int(text)
    except ValueError:
        names: dict[str, int] = {info.name.lower(): info.key for info in protocol.all_apis()}
        found = names.get(text.replace("-", "").replace("_", "").lower())
        if found is None:
            raise ValueError(f"unknown API {text!r}") from None
        return found
    protocol.api(key)  # raises for an unknown key
    return key


def _read_chunks(stream: IO[bytes], size: int = 1 << 16) -> Iterator[bytes]:
    # read1 returns what a pipe has now instead of waiting for a full buffer, so
    # frames show up as soon as they arrive when following a live capture.
    read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
    while chunk := read(size):
        yield chunk


@click.command(name="decode")
@click.argument("file", type=click.File("rb"), default="-")
@click.option("--hex", "hex_input", is_flag=True, help="Input is hex text; whitespace is ignored.")
@click.option(
    "--responses",
    is_flag=True,
    help="Frames are responses (broker to client) of --api-key at --api-version.",
)
@click.option("--api-key", metavar="KEY", help="API key (number or name) of the responses.")
@click.option("--api-version", type=int, metavar="V", help="API version of the responses.")
@click.option(
    "--max-frame-size",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_FRAME_SIZE,
    show_default=True,
    help="Largest frame accepted, in bytes; a larger size prefix ends the stream.",
)
@click.option(
    "--pretty", is_flag=True, help="Indent each frame's JSON over several lines instead of one."
)
def command(
    file: IO[bytes],
    hex_input: bool,
    pretty: bool,
    responses: bool,
    api_key: str | None,
    api_version: int | None,
    max_frame_size: int,
) -> None:
    """Decode Kafka frames from FILE (default: stdin) into JSON, one line per frame.

    The input is the byte stream as it crosses the wire: size-prefixed frames,
    requests unless --responses is given. Bytes are shown as base64 and record
    sets are expanded into batches and records. A frame that fails to decode
    prints {"frame": N, "error": ...} and decoding goes on; the exit status is 1
    if any frame failed.
    """
    response_api: tuple[int, int] | None = None
    if responses:
        if api_key is None or api_version is None:
            raise click.UsageError("--responses needs --api-key and --api-version")
        try:
            key = resolve_api_key(api_key)
            protocol.api(key).check_version(api_version)
        except (ValueError, TrafkaError) as exc:
            raise click.UsageError(str(exc)) from None
        response_api = (key, api_version)
    elif api_key is not None or api_version is not None:
        raise click.UsageError("--api-key and --api-version are for --responses")

    failed = False
    try:
        for result in decode_stream(
            _read_chunks(file),
            hex_input=hex_input,
            responses=response_api,
            max_frame_size=max_frame_size,
        ):
            failed = failed or "error" in result
            # click.echo flushes, so frames of a live capture show up as they arrive.
            click.echo(format_json(result) if pretty else json.dumps(result, ensure_ascii=False))
    except BrokenPipeError:
        # The reader went away (`trafka decode capture.bin | head`): stop quietly,
        # and keep Python from failing again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    if failed:
        sys.exit(1)
