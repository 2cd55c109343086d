"""A filter with settings, for the tests of ``trafka proxy``'s configuration
and its SIGHUP reload: it names the cluster in Metadata answers as its
``cluster_id`` setting says, and logs each answer it sees at DEBUG."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from trafka.proxy import Filter, FilterContext

log = logging.getLogger("trafka.proxy.settings_filter")

METADATA = 3


class ClusterIdFilter(Filter):
    api_keys = frozenset({METADATA})

    def __init__(self) -> None:
        self.cluster_id: str | None = None

    def configure(self, settings: Mapping[str, Any]) -> None:
        unknown = sorted(set(settings) - {"cluster_id"})
        if unknown:
            raise ValueError(f"unknown setting {unknown[0]!r}")
        cluster_id = settings.get("cluster_id")
        if cluster_id is not None and not isinstance(cluster_id, str):
            raise ValueError("cluster_id must be a string")
        self.cluster_id = cluster_id

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        log.debug("settings_filter: a Metadata answer (v%d)", ctx.api_version)
        if self.cluster_id is None:
            return body
        return dataclasses.replace(body, cluster_id=self.cluster_id)
