"""The admin client: topics, partitions, configs, groups, offsets, records, transactions,
users' SCRAM credentials, ACLs, client quotas and delegation tokens.

Open it with :func:`open_admin`; every call is a method of :class:`Admin`.

The package follows the SDK's layering. :mod:`.client` is the driver: the
:class:`Admin` class owns connections, retries and routing (to the controller,
a coordinator, each partition's leader, every broker). It is composed of one
class per capability over a shared request core (:mod:`.client_core`):
:mod:`.client_topics`, :mod:`.client_configs`, :mod:`.client_groups`,
:mod:`.client_security`, :mod:`.client_cluster` and :mod:`.client_transactions`.
What goes on the wire and what an answer means is decided per area, without
I/O, in modules that tests use directly:

* :mod:`.cluster`: DescribeCluster, feature levels (KIP-584);
* :mod:`.topics`: Metadata, CreateTopics, DeleteTopics, CreatePartitions;
* :mod:`.partitions`: ElectLeaders, partition reassignments;
* :mod:`.log_dirs`: DescribeLogDirs, AlterReplicaLogDirs;
* :mod:`.configs`: DescribeConfigs, (Incremental)AlterConfigs, client-metrics resources;
* :mod:`.records`: ListOffsets, DeleteRecords;
* :mod:`.groups`: consumer groups, their members and committed offsets;
* :mod:`.share_groups`: share groups (KIP-932) and their offsets;
* :mod:`.transactions`: producers, transactions, hanging transactions (KIP-664);
* :mod:`.acls`, :mod:`.quotas`, :mod:`.delegation_tokens`: the wire side of
  the values in :mod:`trafka.sdk.acls`, :mod:`trafka.sdk.quotas` and
  :mod:`trafka.sdk.delegation_tokens`;
* :mod:`.scram`: users' SCRAM credentials (KIP-554).

Every name this package exports is also importable from here, as it was when
the admin client was one module.
"""

from .client import Admin, open_admin
from .cluster import ClusterDescription, FeatureMetadata, FeatureUpdate, UpgradeType

# Importable from here as before, though never in __all__.
from .configs import BROKER_RESOURCE as BROKER_RESOURCE
from .configs import CLIENT_METRICS_RESOURCE as CLIENT_METRICS_RESOURCE
from .configs import GROUP_RESOURCE as GROUP_RESOURCE
from .configs import TOPIC_RESOURCE as TOPIC_RESOURCE
from .groups import DEFAULT_LEAVE_GROUP_REASON, GroupDescription, GroupListing, MemberDescription
from .log_dirs import LogDirDescription as LogDirDescription
from .log_dirs import ReplicaLogDirInfo, TopicPartitionReplica
from .partitions import PartitionReassignment
from .scram import (
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from .share_groups import ShareGroupDescription, ShareMemberDescription, SharePartitionOffsetInfo
from .topics import NewPartitions, NewTopic
from .transactions import (
    LIVE_TRANSACTION_STATES,
    ProducerState,
    TransactionDescription,
    TransactionListing,
)

__all__ = [
    "Admin",
    "ClusterDescription",
    "DEFAULT_LEAVE_GROUP_REASON",
    "FeatureMetadata",
    "FeatureUpdate",
    "GroupDescription",
    "GroupListing",
    "LIVE_TRANSACTION_STATES",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "PartitionReassignment",
    "ProducerState",
    "ReplicaLogDirInfo",
    "ScramCredentialInfo",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsetInfo",
    "TopicPartitionReplica",
    "TransactionDescription",
    "TransactionListing",
    "UpgradeType",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "open_admin",
]
