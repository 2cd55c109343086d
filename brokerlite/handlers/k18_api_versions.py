"""ApiVersions (key 18), versions 0-4: the APIs and version ranges brokerlite serves.

The list comes from the handler registry, so a version is advertised exactly
when a handler serves it. A request for a version this broker does not know is
answered by :meth:`~trafka.brokerlite.broker.Broker.handle_frame` with a v0
body carrying UNSUPPORTED_VERSION and the ApiVersions range (KIP-511), which
is how clients discover the version to retry with. Client software name and
version (v3+) are accepted as sent.

From v3 the answer also lists the feature levels (KIP-584) that brokerlite
implements, each supported from 0 and finalized at its highest level, with
finalized-features epoch 1 (they never change):

* ``group.version`` 1: the consumer group protocol of KIP-848
  (ConsumerGroupHeartbeat);
* ``share.version`` 1: share groups (KIP-932).

``transaction.version`` is left out, which clients read as 0: transactions
follow the protocol before KIP-890's second part, as brokerlite serves them.
``metadata.version`` and ``kraft.version`` describe a KRaft controller quorum,
which brokerlite does not have.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as m

from ._base import HandlerSpec, RequestContext

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

# name -> the highest level implemented (supported from 0, finalized at it).
FEATURES = {"group.version": 1, "share.version": 1}
FEATURES_EPOCH = 1


def handle(ctx: RequestContext, request: m.ApiVersionsRequest) -> m.ApiVersionsResponse:
    keys = [
        m.ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in ctx.broker.api_versions()
    ]
    if ctx.version < 3:
        return m.ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys)
    return m.ApiVersionsResponse(
        error_code=ErrorCode.NONE,
        api_keys=keys,
        supported_features=[
            m.ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=0, max_version=level)
            for name, level in FEATURES.items()
        ],
        finalized_features_epoch=FEATURES_EPOCH,
        finalized_features=[
            m.ApiVersionsResponse.FinalizedFeatureKey(
                name=name, max_version_level=level, min_version_level=level
            )
            for name, level in FEATURES.items()
        ],
    )


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
