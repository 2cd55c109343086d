"""ListConfigResources (key 74, ListConfigResources before Kafka 4.1),
version 0: the client-metrics resources.

The names of the client-metrics config resources (KIP-714 subscriptions, set
with IncrementalAlterConfigs on resource type 16) that have at least one
setting, sorted by name. Needs DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED with no names, as Kafka 4.0 answers.

Kafka 4.1 renamed the API ListConfigResources (KIP-1142): v1 asks for resources
of given types (topics, brokers, groups, client metrics); brokerlite serves v0,
whose only resources are client metrics.
"""

from __future__ import annotations

from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k74_list_config_resources as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.LIST_CONFIG_RESOURCES
MIN_VERSION = 0
MAX_VERSION = 0

Resource = m.ListConfigResourcesResponse.ConfigResource


def handle(
    ctx: RequestContext, request: m.ListConfigResourcesRequest
) -> m.ListConfigResourcesResponse:
    if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, AclResourceType.CLUSTER, CLUSTER_NAME):
        return m.ListConfigResourcesResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return m.ListConfigResourcesResponse(
        error_code=ErrorCode.NONE,
        config_resources=[Resource(resource_name=name) for name in ctx.telemetry.resource_names()],
    )


def error_response(
    request: m.ListConfigResourcesRequest | None, version: int, code: ErrorCode
) -> m.ListConfigResourcesResponse:
    return m.ListConfigResourcesResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="authorizer telemetry"
)
