"""ListConfigResources (key 74, ListClientMetricsResources before Kafka 4.1),
versions 0-1: the config resources there are.

v0 lists the client-metrics resources: the names of the KIP-714 subscriptions
(set with IncrementalAlterConfigs on resource type 16) that have at least one
setting. v1 (KIP-1142) lists the resources of the types asked, each with its
type, as Kafka 4.4 answers:

* topics (2): every topic, the internal ones Kafka would have made included;
* brokers (4) and broker loggers (8): each live broker's id;
* client metrics (16): as v0;
* groups (32): the groups with at least one group config set (a group
  without one is not a config resource);
* no type asked: all of those; a type that is none of them:
  UNSUPPORTED_VERSION and no resources.

Needs DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED with
no resources, as Kafka 4.0 answers v0. Resources are answered by type in the
order asked, names sorted (Kafka's order is its registries').
"""

from __future__ import annotations

from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k74_list_config_resources as m

from ._base import HandlerSpec, RequestContext
from ._configs import ResourceType

API_KEY = ApiKey.LIST_CONFIG_RESOURCES
MIN_VERSION = 0
MAX_VERSION = 1
LISTED = (
    ResourceType.TOPIC,
    ResourceType.BROKER,
    ResourceType.BROKER_LOGGER,
    ResourceType.CLIENT_METRICS,
    ResourceType.GROUP,
)

Resource = m.ListConfigResourcesResponse.ConfigResource


def handle(
    ctx: RequestContext, request: m.ListConfigResourcesRequest
) -> m.ListConfigResourcesResponse:
    if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, AclResourceType.CLUSTER, CLUSTER_NAME):
        return m.ListConfigResourcesResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    kinds = [ResourceType.CLIENT_METRICS]
    if ctx.version >= 1:
        asked = list(dict.fromkeys(request.resource_types)) or list(LISTED)
        if any(kind not in LISTED for kind in asked):
            return m.ListConfigResourcesResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
        kinds = [ResourceType(kind) for kind in asked]
    return m.ListConfigResourcesResponse(
        error_code=ErrorCode.NONE,
        config_resources=[
            Resource(resource_name=name, resource_type=kind)
            for kind in kinds
            for name in _names(ctx, kind)
        ],
    )


def _names(ctx: RequestContext, kind: ResourceType) -> list[str]:
    if kind == ResourceType.TOPIC:
        return sorted(info.name for info in ctx.logs.topics())
    if kind in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
        cluster = ctx.cluster
        nodes = [ctx.node_id] if cluster is None else sorted(cluster.image.brokers)
        return [str(node) for node in nodes]
    if kind == ResourceType.GROUP:
        return ctx.share_groups.configured_groups()
    return list(ctx.telemetry.resource_names())


def error_response(
    request: m.ListConfigResourcesRequest | None, version: int, code: ErrorCode
) -> m.ListConfigResourcesResponse:
    return m.ListConfigResourcesResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="authorizer telemetry logs cluster share_groups",
)
