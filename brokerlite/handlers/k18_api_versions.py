"""ApiVersions (key 18), versions 0-4: the APIs and version ranges brokerlite serves.

The list comes from the handler registry, so a version is advertised exactly
when a handler serves it. A request for a version this broker does not know is
answered by :meth:`~trafka.brokerlite.broker.Broker.handle_frame` with a v0
body carrying UNSUPPORTED_VERSION and the ApiVersions range (KIP-511), which
is how clients discover the version to retry with. Client software name and
version (v3+) are accepted as sent.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as m

from ._base import HandlerSpec, RequestContext

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: m.ApiVersionsRequest) -> m.ApiVersionsResponse:
    keys = [
        m.ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in ctx.broker.api_versions()
    ]
    return m.ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys)


def error_response(
    request: m.ApiVersionsRequest | None, version: int, code: ErrorCode
) -> m.ApiVersionsResponse:
    return m.ApiVersionsResponse(
        error_code=code,
        api_keys=[
            m.ApiVersionsResponse.ApiVersion(
                api_key=API_KEY, min_version=MIN_VERSION, max_version=MAX_VERSION
            )
        ],
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
