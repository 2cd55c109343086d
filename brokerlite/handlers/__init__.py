"""brokerlite's request handlers: one module per API key, franz-go style.

Each module (``k03_metadata`` for Metadata, key 3) states in its docstring
which versions it serves and how, and exports ``SPEC``, a
:class:`~._base.HandlerSpec` with its key, versions, ``handle`` and
``error_response``. :data:`HANDLERS` is the registry the broker dispatches on
and advertises in ApiVersions: an API is advertised exactly when it is here.

The version ranges are Kafka 4.0's (what kafka-python infers the broker
release from), capped at what the codec knows.
"""

from __future__ import annotations

from . import (
    k00_produce,
    k01_fetch,
    k02_list_offsets,
    k03_metadata,
    k08_offset_commit,
    k09_offset_fetch,
    k10_find_coordinator,
    k11_join_group,
    k12_heartbeat,
    k13_leave_group,
    k14_sync_group,
    k15_describe_groups,
    k16_list_groups,
    k18_api_versions,
    k19_create_topics,
    k20_delete_topics,
    k21_delete_records,
    k22_init_producer_id,
    k23_offset_for_leader_epoch,
    k24_add_partitions_to_txn,
    k25_add_offsets_to_txn,
    k26_end_txn,
    k28_txn_offset_commit,
    k32_describe_configs,
    k33_alter_configs,
    k37_create_partitions,
    k42_delete_groups,
    k44_incremental_alter_configs,
    k60_describe_cluster,
    k61_describe_producers,
    k65_describe_transactions,
    k66_list_transactions,
)
from ._base import HandlerSpec

__all__ = ["HANDLERS", "HandlerSpec"]

_MODULES = (
    k00_produce,
    k01_fetch,
    k02_list_offsets,
    k03_metadata,
    k08_offset_commit,
    k09_offset_fetch,
    k10_find_coordinator,
    k11_join_group,
    k12_heartbeat,
    k13_leave_group,
    k14_sync_group,
    k15_describe_groups,
    k16_list_groups,
    k18_api_versions,
    k19_create_topics,
    k20_delete_topics,
    k21_delete_records,
    k22_init_producer_id,
    k23_offset_for_leader_epoch,
    k24_add_partitions_to_txn,
    k25_add_offsets_to_txn,
    k26_end_txn,
    k28_txn_offset_commit,
    k32_describe_configs,
    k33_alter_configs,
    k37_create_partitions,
    k42_delete_groups,
    k44_incremental_alter_configs,
    k60_describe_cluster,
    k61_describe_producers,
    k65_describe_transactions,
    k66_list_transactions,
)

HANDLERS: dict[int, HandlerSpec] = {module.SPEC.api_key: module.SPEC for module in _MODULES}
