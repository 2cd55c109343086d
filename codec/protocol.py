"""Requests and responses: the API table, headers and whole-frame encode/decode.

Rules (from Kafka's protocol guide and message specs):

* A frame is an int32 size followed by that many bytes; :mod:`.framing` splits
  a byte stream into frames. Functions here take frames *without* the size
  prefix and produce frames *with* it.
* Request header v0 is (api_key, api_version, correlation_id); v1 adds a
  nullable client_id (a classic int16 string, even in v2); v2 adds tagged
  fields. A request uses v2 when its API version is flexible, else v1.
* Response header v0 is (correlation_id); v1 adds tagged fields and is used
  for flexible versions, except ApiVersions responses which always use v0 so
  that a client can read them before it knows what the broker speaks.
* A body must be consumed exactly: trailing bytes are a protocol error.

Schemas are compiled on first use and cached. Compiled schemas run an inlined
fast path; any input or value it refuses is re-run through the interpreted path,
so errors and strictness are always the interpreted path's.
"""

from __future__ import annotations

import dataclasses
import importlib
import struct
from collections.abc import Mapping
from functools import cache
from io import BytesIO
from types import ModuleType
from typing import Any

from . import _wire
from .errors import CodecError, DecodeError, EncodeError, UnsupportedVersionError
from .messages import API_MODULES, ApiKey
from .messages.headers import RequestHeader, ResponseHeader

__all__ = [
    "ApiInfo",
    "EncodedRequest",
    "RequestFramer",
    "RequestHeader",
    "ResponseHeader",
    "all_apis",
    "api",
    "decode_request",
    "decode_request_body",
    "decode_request_header",
    "decode_response",
    "decode_response_body",
    "decode_response_frame",
    "decode_versioned",
    "encode_request",
    "encode_request_body",
    "encode_response",
    "encode_response_body",
    "peek_produce_acks",
]

API_VERSIONS_KEY = ApiKey.API_VERSIONS

_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_KEYVER = struct.Struct(">hhi")
_SIZE_CORR = struct.Struct(">ii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class ApiInfo:
    """What the codec knows of one API: its versions and message types."""

    key: int
    name: str
    min_version: int
    max_version: int
    first_flexible_version: int | None
    deprecated_versions: tuple[int, int] | None
    latest_version_unstable: bool
    request_type: type
    response_type: type
    module: ModuleType = dataclasses.field(repr=False)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.first_flexible_version is not None and version >= self.first_flexible_version

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        if self.key == API_VERSIONS_KEY:
            return 0
        return 1 if self.is_flexible(version) else 0

    def check_version(self, version: int) -> None:
        if not self.supports(version):
            raise UnsupportedVersionError(
                f"{self.name} v{version} is not supported (versions {self.min_version}-{self.max_version})"
            )


@cache
def api(key: int) -> ApiInfo:
    """The :class:`ApiInfo` for an API key.

    Raises:
        UnsupportedVersionError: the key is not a client-facing API the codec knows.
    """
    entry = API_MODULES.get(key)
    if entry is None:
        raise UnsupportedVersionError(f"unknown API key {key}")
    module = importlib.import_module(f"{__package__}.messages.{entry[0]}")
    return ApiInfo(
        key=key,
        name=entry[1],
        min_version=module.MIN_VERSION,
        max_version=module.MAX_VERSION,
        first_flexible_version=module.FIRST_FLEXIBLE_VERSION,
        deprecated_versions=module.DEPRECATED_VERSIONS,
        latest_version_unstable=module.LATEST_VERSION_UNSTABLE,
        request_type=module.Request,
        response_type=module.Response,
        module=module,
    )


def all_apis() -> list[ApiInfo]:
    """Every API the codec implements, by key."""
    return [api(k) for k in sorted(API_MODULES)]


def _schema(key: int, version: int, response: bool) -> tuple[Any, ApiInfo]:
    info = api(key)
    info.check_version(version)
    schemas = info.module.RESPONSE_SCHEMAS if response else info.module.REQUEST_SCHEMAS
    return schemas[version], info


@cache
def _compiled(key: int, version: int, response: bool) -> tuple[Any, Any, str]:
    schema, info = _schema(key, version, response)
    compiled = schema.compile()
    kind = "Response" if response else "Request"
    return compiled.parsefunc, compiled.buildfunc, f"{info.name}{kind} v{version}"


@cache
def _parts_builder(key: int, version: int, response: bool) -> Any:
    """The schema's fast builder, which hands its parts to a callback (None if none)."""
    schema, _ = _schema(key, version, response)
    return getattr(schema, "parts_builder", lambda: None)()


def _decode(
    parse: Any, data: bytes | memoryview, name: str, start: int = 0, allow_trailing: bool = False
) -> Any:
    # A BytesIO over bytes shares them (no copy); the body starts at ``start``.
    io = BytesIO(data)
    if start:
        io.seek(start)
    try:
        body = parse(io, None)
        left = _wire.remaining(io)
        if left and not allow_trailing:
            raise DecodeError(f"{left} trailing bytes after the body")
    except CodecError as exc:
        exc.message_name = name
        raise
    except Exception as exc:  # a bug of ours must still surface as a codec error
        raise DecodeError(f"internal decoder error: {exc!r}", message_name=name) from exc
    return body


def _encode(build: Any, body: Any, io: BytesIO, name: str) -> None:
    try:
        build(body, io, None)
    except CodecError as exc:
        exc.message_name = name
        raise
    except Exception as exc:
        raise EncodeError(f"cannot encode: {exc!r}", message_name=name) from exc


def decode_request_body(
    key: int,
    version: int,
    data: bytes | memoryview,
    *,
    allow_trailing: bool = False,
    start: int = 0,
) -> Any:
    """Decode a request body (after the header) of API ``key`` at ``version``.

    Args:
        start: where the body starts in ``data`` (a whole frame from
            :func:`decode_request_header`, read in place rather than sliced).
        allow_trailing: ignore bytes after the body instead of raising. Kafka's
            broker never checks for them, and some clients rely on that
            (librdkafka's "all topics" Metadata request carries stray zero bytes);
            a server that must accept what Kafka accepts passes True.
    """
    parse, _, name = _compiled(key, version, False)
    return _decode(parse, data, name, start, allow_trailing)


def decode_response_body(key: int, version: int, data: bytes | memoryview) -> Any:
    """Decode a response body (after the header) of API ``key`` at ``version``."""
    parse, _, name = _compiled(key, version, True)
    return _decode(parse, data, name)


def encode_request_body(key: int, version: int, body: Any) -> bytes:
    """Encode a request body (``body``: the message, or an :class:`EncodedRequest`)."""
    _, build, name = _compiled(key, version, False)
    if isinstance(body, EncodedRequest):
        return b"".join(body.parts_at(version))
    io = BytesIO()
    _encode(build, body, io, name)
    return io.getvalue()


def encode_response_body(key: int, version: int, body: Any) -> bytes:
    _, build, name = _compiled(key, version, True)
    io = BytesIO()
    _encode(build, body, io, name)
    return io.getvalue()


# -- headers (hand-written hot path; tests check it against the generated schemas) --


def _header_tags(
    frame: bytes | memoryview, pos: int, name: str
) -> tuple[list[tuple[int, bytes]], int]:
    """A flexible header's tagged fields at ``pos``, and where the body starts.

    Never copies the frame (a Produce or Fetch body can be megabytes) unless the
    header has tags and the frame is not ``bytes``.
    """
    if pos < len(frame) and frame[pos] == 0:
        return [], pos + 1  # no tags: the usual case
    io = BytesIO(frame if isinstance(frame, bytes) else bytes(frame))
    io.seek(pos)
    unknown: list[tuple[int, bytes]] = []
    try:
        for _ in range(_wire.r_uvarint(io)):
            unknown.append(_wire.r_tag_header(io))
    except CodecError as exc:
        exc.message_name, exc.field = name, "_tagged_fields"
        raise
    return unknown, io.tell()


def decode_request_header(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    """Decode a request header; return it and the offset where the body starts.

    The header version follows from the API key and version inside it. An unknown
    API key or unsupported version is *not* an error here: a broker must still
    answer (ApiVersions with UNSUPPORTED_VERSION), so it needs the correlation id.
    """
    if len(frame) < 8:
        raise DecodeError(
            f"truncated: needed 8 bytes, {len(frame)} left", message_name="RequestHeader"
        )
    key, version, corr = _KEYVER.unpack_from(frame, 0)
    info = API_MODULES.get(key)
    flexible = False
    if info is not None:
        mod = api(key)
        flexible = mod.supports(version) and mod.is_flexible(version)
    # client_id: a classic nullable string in header v1 and v2.
    if len(frame) < 10:
        raise DecodeError("truncated client_id", message_name="RequestHeader", field="client_id")
    (n,) = _I16.unpack_from(frame, 8)
    pos = 10
    client_id: str | None
    if n == -1:
        client_id = None
    elif n < 0 or pos + n > len(frame):
        raise DecodeError(f"invalid length {n}", message_name="RequestHeader", field="client_id")
    else:
        try:
            client_id = bytes(frame[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError(
                "invalid UTF-8", message_name="RequestHeader", field="client_id"
            ) from None
        pos += n
    unknown: list[tuple[int, bytes]] = []
    if flexible:
        unknown, pos = _header_tags(frame, pos, "RequestHeader")
    header = RequestHeader(
        request_api_key=key,
        request_api_version=version,
        correlation_id=corr,
        client_id=client_id,
        unknown_tagged_fields=unknown,
    )
    return header, pos


def _checked_tags(items: Any) -> list[tuple[int, bytes]]:
    out = []
    for item in items:
        tag, data = item
        if type(tag) is not int or not 0 <= tag <= 0xFFFFFFFF:
            raise EncodeError(f"tag {tag!r} is not an unsigned 32-bit int")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise EncodeError(f"tagged field {tag} holds {type(data).__name__}, not bytes")
        out.append((tag, bytes(data)))
    return out


def decode_request(
    frame: bytes | memoryview, *, allow_trailing: bool = False
) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame (without its size prefix).

    ``allow_trailing`` is as for :func:`decode_request_body`.

    Raises:
        UnsupportedVersionError: unknown API key or version; ``exc.header`` holds
            the decoded header so that a server can still reply.
        DecodeError: the frame is malformed.
    """
    header, pos = decode_request_header(frame)
    key, version = header.request_api_key, header.request_api_version
    try:
        api(key).check_version(version)
    except UnsupportedVersionError as exc:
        exc.header = header  # type: ignore[attr-defined]
        raise
    parse, _, name = _compiled(key, version, False)
    return header, _decode(parse, frame, name, pos, allow_trailing)


# A byte field this long (a Produce's record batch) is a frame part of its own:
# written as it is, never copied into the frame.
_BIG_PART = 8192


def encode_request(header: RequestHeader, body: Any) -> bytes:
    """Encode a request frame, size prefix included."""
    parts = encode_request_parts(header, body)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_request_parts(header: RequestHeader, body: Any) -> list[bytes]:
    """:func:`encode_request`'s frame as parts to write in order (``sendmsg``);
    ``body``: the message, or an :class:`EncodedRequest`.

    Byte fields of 8 KiB or more, such as a Produce's record batches, are parts
    of their own: the very objects in ``body``, not copies. Everything between
    them is joined, so a request without such a field is one part.
    """
    key, version = header.request_api_key, header.request_api_version
    info = api(key)
    _, build, name = _compiled(key, version, False)
    head = _request_header(header, info, version)
    if isinstance(body, EncodedRequest):
        return _frame_parts([head, *body.parts_at(version)])
    collect = _parts_builder(key, version, False)
    if collect is not None:
        parts: list[Any] = [head]
        try:
            collect(body, parts.append)
        except Exception:
            pass  # the interpreted path below raises the precise EncodeError
        else:
            return _frame_parts(parts)
    io = BytesIO()
    io.write(b"\0\0\0\0")
    io.write(head)
    _encode(build, body, io, name)
    buf = io.getbuffer()
    struct.pack_into(">i", buf, 0, len(buf) - 4)
    del buf
    return [io.getvalue()]


class EncodedRequest:
    """A request body that writes itself on bytes at the version it is sent at
    (:class:`~.produce_request.ProduceRequestData`): :meth:`RequestFramer.parts`
    writes the header before its parts instead of encoding a message."""

    __slots__ = ()

    def parts_at(self, version: int) -> list[Any]:
        """The body at ``version``, as parts to write in order (a big records
        field a part of its own, not copied)."""
        raise NotImplementedError


class RequestFramer:
    """Frames one client's requests as :func:`encode_request_parts` does, for
    headers without tagged fields: the header's bytes after the correlation id
    (client id, tags) are worked out once per API key and version, so a request
    costs its body's encoding and one pack.

    Args:
        client_id: the header's ``client_id``.
    """

    __slots__ = ("_plans", "client_id")

    def __init__(self, client_id: str | None) -> None:
        self.client_id = client_id
        self._plans: dict[tuple[int, int], tuple[bytes, Any]] = {}

    def parts(self, key: int, version: int, correlation_id: int, body: Any) -> list[bytes]:
        """The frame of ``body``, API ``key`` at ``version``, as parts to write in order
        (``body``: the message, or an :class:`EncodedRequest` of it).

        Raises:
            UnsupportedVersionError: an API or version the codec does not know.
            EncodeError: the header or body cannot be encoded.
        """
        plan = self._plans.get((key, version))
        if plan is None:
            plan = self._plan(key, version)
        tail, collect = plan
        if isinstance(body, EncodedRequest):
            head = _KEYVER.pack(key, version, correlation_id) + tail
            return _frame_parts([head, *body.parts_at(version)])
        if collect is not None:
            try:
                parts: list[Any] = [_KEYVER.pack(key, version, correlation_id) + tail]
                collect(body, parts.append)
            except Exception:
                pass  # the general path below raises the precise EncodeError
            else:
                return _frame_parts(parts)
        return encode_request_parts(self._header(key, version, correlation_id), body)

    def _header(self, key: int, version: int, correlation_id: int) -> RequestHeader:
        return RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=self.client_id,
        )

    def _plan(self, key: int, version: int) -> tuple[bytes, Any]:
        collect = _parts_builder(key, version, False)  # an unknown API or version raises
        head = _request_header(self._header(key, version, 0), api(key), version)
        plan = (head[_KEYVER.size :], collect)
        self._plans[key, version] = plan
        return plan


def _request_header(header: RequestHeader, info: ApiInfo, version: int) -> bytes:
    io = BytesIO()
    field = "correlation_id"
    try:
        io.write(_KEYVER.pack(header.request_api_key, version, header.correlation_id))
        field = "client_id"
        _wire.w_nstring(io, header.client_id)
        if info.request_header_version(version) >= 2:
            field = "_tagged_fields"
            _wire.w_tagged(io, _checked_tags(header.unknown_tagged_fields))
    except EncodeError as exc:
        exc.message_name, exc.field = "RequestHeader", field
        raise
    except (struct.error, TypeError, ValueError) as exc:
        raise EncodeError(
            f"invalid value: {exc}", message_name="RequestHeader", field=field
        ) from None
    return io.getvalue()


def _frame_parts(parts: list[Any]) -> list[bytes]:
    """The size prefix, then ``parts`` with each run of small ones joined."""
    sizes = list(map(len, parts))
    if max(sizes) < _BIG_PART:  # most requests: one part, joined in C
        body = b"".join(parts)
        return [_I32.pack(len(body)) + body]
    out: list[bytes] = []
    run: list[Any] = [_I32.pack(sum(sizes))]
    for part in parts:
        if len(part) >= _BIG_PART:
            out.append(b"".join(run))
            out.append(part)
            run = []
        else:
            run.append(part)
    if run:
        out.append(b"".join(run))
    return out


def encode_response(correlation_id: int, key: int, version: int, body: Any) -> bytes:
    """Encode a response frame, size prefix included."""
    info = api(key)
    _, build, name = _compiled(key, version, True)
    io = BytesIO()
    try:
        io.write(_SIZE_CORR.pack(0, correlation_id))
    except (struct.error, TypeError) as exc:
        raise EncodeError(
            f"invalid correlation id {correlation_id!r}: {exc}",
            message_name="ResponseHeader",
            field="correlation_id",
        ) from None
    if info.response_header_version(version) >= 1:
        io.write(b"\0")  # no tagged fields in the header
    _encode(build, body, io, name)
    buf = io.getbuffer()
    struct.pack_into(">i", buf, 0, len(buf) - 4)
    del buf
    return io.getvalue()


def decode_response(
    frame: bytes | memoryview, key: int, version: int
) -> tuple[ResponseHeader, Any]:
    """Decode a response frame (without its size prefix) to API ``key`` at ``version``.

    The caller knows ``key`` and ``version`` from the request it sent (matched by
    correlation id; see :func:`peek_correlation_id`).
    """
    tagged, parse, name = _response_plan(key, version)
    corr = peek_correlation_id(frame)
    pos = 4
    unknown: list[tuple[int, bytes]] = []
    if tagged:
        unknown, pos = _header_tags(frame, pos, "ResponseHeader")
    header = ResponseHeader(correlation_id=corr, unknown_tagged_fields=unknown)
    return header, _decode(parse, frame, name, pos)


@cache
def _response_plan(key: int, version: int) -> tuple[bool, Any, str]:
    """Whether the response header has tagged fields, the body's parser and name."""
    info = api(key)
    info.check_version(version)
    parse, _, name = _compiled(key, version, True)
    return info.response_header_version(version) >= 1, parse, name


def decode_response_frame(frame: bytes | memoryview, key: int, version: int) -> Any:
    """The body of a response frame (without its size prefix), as
    :func:`decode_response` reads it, for a caller that has the correlation id
    already (:func:`peek_correlation_id`) and ignores the header's tags."""
    tagged, parse, name = _response_plan(key, version)
    _check_correlation_id(frame)
    pos = _header_tags(frame, 4, "ResponseHeader")[1] if tagged else 4
    return _decode(parse, frame, name, pos)


def decode_versioned(schemas: Mapping[int, Any], data: bytes, message_name: str) -> Any:
    """Decode a message that carries its own int16 version first (the consumer
    protocol's subscriptions and assignments, in group metadata).

    A version newer than any of ``schemas`` is read with the newest (its fields
    come first; the rest is ignored), as Kafka reads them.

    Raises:
        DecodeError: shorter than its version, a negative version, or a body
            that does not parse.
    """
    if len(data) < 2:
        raise DecodeError(f"{message_name} shorter than its version", message_name=message_name)
    (version,) = _I16.unpack_from(data, 0)
    if version < 0:
        raise DecodeError(f"negative version {version}", message_name=message_name)
    schema = schemas[min(version, max(schemas))].compile()
    try:
        return schema.parse_stream(BytesIO(data[2:]))
    except DecodeError:
        raise
    except Exception as exc:  # construct errors: translate at the boundary
        raise DecodeError(f"cannot parse: {exc}", message_name=message_name) from None


def peek_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id of a response frame, read before knowing its API."""
    _check_correlation_id(frame)
    return int.from_bytes(frame[:4], "big", signed=True)


def peek_produce_acks(frame: bytes | memoryview, start: int, version: int) -> int | None:
    """The ``acks`` of a Produce request whose body starts at ``start`` of
    ``frame`` (as :func:`decode_request_header` tells), read without decoding
    the rest (the records can be megabytes; a proxy forwarding them needs only
    this); None when it cannot be read (an unknown version, a truncated body).
    """
    produce = api(ApiKey.PRODUCE)
    if not produce.supports(version):
        return None
    pos = start
    try:
        if version >= 3:  # transactional_id first: a nullable string
            if produce.is_flexible(version):
                n, pos = _wire.b_uvarint(bytes(frame[pos : pos + 5]), 0)
                pos += start
                length = n - 1
            else:
                (length,) = _I16.unpack_from(frame, pos)
                pos += 2
            if length < -1:
                return None
            pos += max(length, 0)
        if pos + 2 > len(frame):
            return None
        (acks,) = _I16.unpack_from(frame, pos)
    except (CodecError, struct.error, ValueError):
        return None
    return int(acks)


def _check_correlation_id(frame: bytes | memoryview) -> None:
    if len(frame) < 4:
        raise DecodeError(
            "truncated: needed 4 bytes", message_name="ResponseHeader", field="correlation_id"
        )
