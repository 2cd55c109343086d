"""The console's model: what the pages show, built from the admin client's answers.

A module per thing modelled: :mod:`.topics` (the overview, brokers and
topics), :mod:`.groups` (consumer and share groups, offset resets),
:mod:`.lag` (lag history and its chart), :mod:`.messages` (the browser and
bytes as shown), :mod:`.forms` (what a person types) and :mod:`.acls`. Every
name is offered here too, as ``trafka.console.model.NAME``.

Rules:

* No I/O and no clock here: every function takes what the cluster answered (the
  SDK's dataclasses and plain dicts) and ``now`` where time matters, and returns
  frozen view data that a template only lays out. The drivers
  (:mod:`..cluster`, :mod:`..app`) gather the answers; tests build views from
  hand-made answers.
* What a person types is parsed here, and every refusal is an
  :class:`InputError` whose message names the field and says what is wanted;
  the driver shows it on an error page (status 400), never a traceback.
* A module here imports only the SDK's data types and its siblings (forms and
  topics below groups), never a driver.
"""

from __future__ import annotations

from .acls import (
    ACL_OPERATIONS,
    ACL_PATTERN_TYPES,
    ACL_PERMISSIONS,
    ACL_RESOURCE_TYPES,
    acl_rows,
    parse_acl_form,
)
from .forms import (
    TOPIC_NAME,
    ConfigChange,
    InputError,
    NewTopicForm,
    ProduceForm,
    PurgeForm,
    int_field,
    offset_or_time,
    pairs,
    parse_config_form,
    parse_new_topic_form,
    parse_partition_count,
    parse_produce_form,
    parse_purge_form,
    parse_refresh,
    parse_timestamp,
    topic_name,
)
from .groups import (
    INACTIVE_STATES,
    RESET_TARGETS,
    GroupPartitionRow,
    GroupRow,
    GroupView,
    ResetForm,
    ResetRow,
    group_rows,
    group_view,
    parse_reset_form,
    plan_reset,
    refuse_unless_inactive,
    share_group_view,
)
from .lag import ChartSeries, LagChart, LagHistory, LagSample, lag_chart
from .messages import (
    DECODE_MODES,
    MAX_BROWSE,
    SHOW_BYTES,
    SORTS,
    BrowseQuery,
    DecodeMode,
    MessageRow,
    Rendered,
    format_timestamp,
    merge_messages,
    message_row,
    parse_browse_query,
    plan_reads,
    render_bytes,
    sort_rows,
)
from .topics import (
    BrokerRow,
    Overview,
    PartitionRow,
    TopicRow,
    TopicView,
    human_bytes,
    offset_of,
    overview,
    partition_sizes,
    topic_rows,
    topic_view,
    under_replicated,
)

__all__ = [
    "ACL_OPERATIONS",
    "ACL_PATTERN_TYPES",
    "ACL_PERMISSIONS",
    "ACL_RESOURCE_TYPES",
    "DECODE_MODES",
    "INACTIVE_STATES",
    "MAX_BROWSE",
    "RESET_TARGETS",
    "SHOW_BYTES",
    "SORTS",
    "TOPIC_NAME",
    "BrokerRow",
    "BrowseQuery",
    "ChartSeries",
    "ConfigChange",
    "DecodeMode",
    "GroupPartitionRow",
    "GroupRow",
    "GroupView",
    "InputError",
    "LagChart",
    "LagHistory",
    "LagSample",
    "MessageRow",
    "NewTopicForm",
    "Overview",
    "PartitionRow",
    "ProduceForm",
    "PurgeForm",
    "Rendered",
    "ResetForm",
    "ResetRow",
    "TopicRow",
    "TopicView",
    "acl_rows",
    "format_timestamp",
    "group_rows",
    "group_view",
    "human_bytes",
    "int_field",
    "lag_chart",
    "merge_messages",
    "message_row",
    "offset_of",
    "offset_or_time",
    "overview",
    "pairs",
    "parse_acl_form",
    "parse_browse_query",
    "parse_config_form",
    "parse_new_topic_form",
    "parse_partition_count",
    "parse_produce_form",
    "parse_purge_form",
    "parse_refresh",
    "parse_reset_form",
    "parse_timestamp",
    "partition_sizes",
    "plan_reads",
    "plan_reset",
    "refuse_unless_inactive",
    "render_bytes",
    "share_group_view",
    "sort_rows",
    "topic_name",
    "topic_rows",
    "topic_view",
    "under_replicated",
]
