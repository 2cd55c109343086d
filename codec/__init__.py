"""trafka.codec: Kafka's wire protocol as construct declarations.

Stateless: bytes in, typed messages out, and back. No sockets, no clocks.

The most used names are re-exported here; see the modules for the rest:
:mod:`.protocol` (requests, responses, headers), :mod:`.framing` (frame
reader), :mod:`.records` (record batches), :mod:`.compression`,
:mod:`.errors`, :mod:`.primitives` (construct classes) and the generated
:mod:`.messages` package (one module per API).
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    CodecError,
    DecodeError,
    EncodeError,
    ErrorCode,
    FrameTooLargeError,
    KafkaError,
    TrafkaError,
    UnsupportedVersionError,
)

# The rest loads when first named (PEP 562), as trafka.common.lazy does for the
# layers above (the codec imports nothing of them): a program that needs only
# the errors (the SDK's error classes derive from them, the command line
# catches them) does not pay for the protocol tables and construct (issue #60).
_LAZY = {
    "DEFAULT_MAX_FRAME_SIZE": ".framing",
    "FrameReader": ".framing",
    "ApiKey": ".messages",
    "ApiInfo": ".protocol",
    "RequestFramer": ".protocol",
    "RequestHeader": ".protocol",
    "ResponseHeader": ".protocol",
    "all_apis": ".protocol",
    "api": ".protocol",
    "decode_request": ".protocol",
    "decode_request_body": ".protocol",
    "decode_request_header": ".protocol",
    "decode_response": ".protocol",
    "decode_response_body": ".protocol",
    "decode_response_frame": ".protocol",
    "decode_versioned": ".protocol",
    "encode_request": ".protocol",
    "encode_request_body": ".protocol",
    "encode_request_parts": ".protocol",
    "encode_response": ".protocol",
    "encode_response_body": ".protocol",
    "peek_correlation_id": ".protocol",
}

if TYPE_CHECKING:
    from .framing import DEFAULT_MAX_FRAME_SIZE, FrameReader
    from .messages import ApiKey
    from .protocol import (
        ApiInfo,
        RequestFramer,
        RequestHeader,
        ResponseHeader,
        all_apis,
        api,
        decode_request,
        decode_request_body,
        decode_request_header,
        decode_response,
        decode_response_body,
        decode_response_frame,
        decode_versioned,
        encode_request,
        encode_request_body,
        encode_request_parts,
        encode_response,
        encode_response_body,
        peek_correlation_id,
    )


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ApiInfo",
    "ApiKey",
    "CodecError",
    "DecodeError",
    "EncodeError",
    "ErrorCode",
    "FrameReader",
    "FrameTooLargeError",
    "KafkaError",
    "RequestFramer",
    "RequestHeader",
    "ResponseHeader",
    "TrafkaError",
    "UnsupportedVersionError",
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
    "encode_request_parts",
    "encode_request_body",
    "encode_response",
    "encode_response_body",
    "peek_correlation_id",
]
