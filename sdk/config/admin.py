"""The admin client's settings: :class:`AdminConfig`.

The rules of every client's settings are the package's (:mod:`trafka.sdk.config`), where
``trafka.sdk.config.AdminConfig`` loads this module when first named, as
``trafka.sdk`` loads the admin client (issue #48).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from .._validate import INT32_MAX
from .client import ClientConfig
from .values import _bool, _field, _int

__all__ = ["AdminConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdminConfig(ClientConfig):
    """Admin client settings (plus the connection settings of :class:`ClientConfig`).

    Attributes:
        default_api_timeout_ms: each admin call's deadline; a call's own
            ``timeout_ms`` overrides it.
        enable_metrics_push: as :class:`ClientConfig`'s, but off unless asked for:
            Java's ``AdminClientConfig`` defines ``enable.metrics.push`` with the
            default false (the producer's and consumer's configs, true).
    """

    auto_create_topics_default: ClassVar[bool] = False

    default_api_timeout_ms: int = _field(60_000, _int(0, INT32_MAX))
    enable_metrics_push: bool = _field(False, _bool)
