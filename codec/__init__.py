"""trafka.codec: Kafka's wire protocol as construct declarations.

Stateless: bytes in, typed messages out, and back. No sockets, no clocks.

The most used names are re-exported here; see the modules for the rest:
:mod:`.protocol` (requests, responses, headers), :mod:`.framing` (frame
reader), :mod:`.records` (record batches), :mod:`.compression`,
:mod:`.errors`, :mod:`.primitives` (construct classes) and the generated
:mod:`.messages` package (one module per API).
"""

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
