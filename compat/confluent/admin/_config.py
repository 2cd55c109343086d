"""Configs as confluent-kafka's admin API has them: :class:`ConfigEntry` (a
described setting, or one change of ``incremental_alter_configs``) and
:class:`ConfigResource` (a topic, broker or group, with the changes to make
or, from ``describe_configs``, what it holds)."""

from __future__ import annotations

import functools
from typing import Any

from ._enums import AlterConfigOpType, ConfigSource, ResourceType

__all__ = ["ConfigEntry", "ConfigResource"]


class ConfigEntry:
    """A setting: its name and value, where the value comes from, its flags and
    synonyms (``describe_configs``), or one change to make with
    ``incremental_operation`` (``incremental_alter_configs``)."""

    def __init__(
        self,
        name: str,
        value: str | None,
        source: ConfigSource = ConfigSource.UNKNOWN_CONFIG,
        is_read_only: bool = False,
        is_default: bool = False,
        is_sensitive: bool = False,
        is_synonym: bool = False,
        synonyms: dict[str, ConfigEntry] | None = None,
        incremental_operation: AlterConfigOpType | None = None,
    ) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.is_read_only = bool(is_read_only)
        self.is_default = bool(is_default)
        self.is_sensitive = bool(is_sensitive)
        self.is_synonym = bool(is_synonym)
        self.synonyms = {} if synonyms is None else synonyms
        self.incremental_operation = incremental_operation

    def __repr__(self) -> str:
        return f'ConfigEntry({self.name}="{self.value}")'

    def __str__(self) -> str:
        return f'{self.name}="{self.value}"'


@functools.total_ordering
class ConfigResource:
    """A resource with configs: its type (a :class:`ResourceType`, its number or
    its name in any case) and name (a broker's id for BROKER).

    Args:
        set_config: the settings ``alter_configs`` gives it (the others go back
            to their defaults).
        incremental_configs: the changes (:class:`ConfigEntry` with an
            ``incremental_operation``) ``incremental_alter_configs`` makes.
        described_configs, error: what ``describe_configs`` found.

    Raises:
        ValueError: an unknown type name or number, or a name that is None.
    """

    Type = ResourceType

    def __init__(
        self,
        restype: ResourceType | str | int,
        name: str,
        set_config: dict[str, str] | None = None,
        described_configs: dict[str, ConfigEntry] | None = None,
        error: Any = None,
        incremental_configs: list[ConfigEntry] | None = None,
    ) -> None:
        if name is None:
            raise ValueError("Expected resource name to be a string")
        if isinstance(restype, str):
            try:
                restype = ResourceType[restype.upper()]
            except KeyError:
                raise ValueError(
                    f'Unknown resource type "{restype}": should be a ConfigResource.Type'
                ) from None
        elif isinstance(restype, int):
            restype = ResourceType(restype)
        self.restype: ResourceType = restype
        self.restype_int = int(restype.value)
        self.name = name
        self.set_config_dict: dict[str, str] = dict(set_config) if set_config is not None else {}
        self.incremental_configs: list[ConfigEntry] = list(incremental_configs or [])
        self.configs = described_configs
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"ConfigResource({self.restype},{self.name},{self.error!r})"
        return f"ConfigResource({self.restype},{self.name})"

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return (self.restype, self.name) == (other.restype, other.name)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        # confluent-kafka's order: a lower type first, else by name alone.
        less: bool = self.restype < other.restype or self.name < other.name
        return less

    def __len__(self) -> int:
        """How many settings ``alter_configs`` would give it."""
        return len(self.set_config_dict)

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        """Give setting ``name`` this value (kept as it is when set and not ``overwrite``)."""
        if overwrite or name not in self.set_config_dict:
            self.set_config_dict[name] = value

    def add_incremental_config(self, config_entry: ConfigEntry) -> None:
        """Add a change for ``incremental_alter_configs``."""
        self.incremental_configs.append(config_entry)
