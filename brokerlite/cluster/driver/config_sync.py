"""The entities' dynamic configs through ZooKeeper: users' SCRAM credentials,
client quotas, brokers' configs and share groups' configs, all kept under
``/config`` and announced by one notification path, ``/config/changes``.

What each kind's znodes hold, and how a change is written, is in its own
module of functions: :mod:`.scram_sync`, :mod:`.quota_sync`,
:mod:`.broker_config_sync`, :mod:`.group_config_sync`. :class:`ConfigSync`
watches ``/config/changes`` and, on each new notification (and when the
broker joins, before it serves), reads all four kinds again and hands each to
its store; a task changing one kind writes it, then reads back that kind.
The cluster's finalized feature levels (``/feature``, :mod:`.feature_sync`)
are read with them, and a data watch on ``/feature`` reads them again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from trafka.codec.sasl import ScramCredential

from ...quotas import Entity, Quotas
from ...security.scram import ScramCredentials
from ...security.zk_scram import CONFIG_CHANGES
from ..replication_quotas import ReplicationQuotas
from ..zk_layout import FEATURE
from .broker_config_sync import read_broker_configs, write_broker_config
from .feature_sync import read_features, write_features
from .group_config_sync import read_all_group_configs, write_group_configs
from .metadata_sync import Kick, MetadataSync, RunSoon
from .quota_sync import read_all_quotas, write_quotas
from .scram_sync import read_all_scram, write_scram

if TYPE_CHECKING:
    from ...features import FeatureStore
    from ...groups.group_configs import GroupConfigs

__all__ = ["ConfigSync"]


class ConfigSync(MetadataSync):
    """The entities' configs, followed into their stores: ``scram`` (the SCRAM
    credentials), ``quotas`` (client quotas), ``replication_quotas`` (this broker's
    ``node_id`` and the default broker's dynamic configs: the throttles' rates)
    ``group_configs`` (share groups' configs) and ``features`` (the finalized
    feature levels); the other arguments are :class:`MetadataSync`'s."""

    changes = (CONFIG_CHANGES,)
    what = "configs"

    def __init__(
        self,
        zk: Any,
        run_soon: RunSoon,
        kick: Kick,
        clock: Callable[[], int],
        *,
        node_id: int,
        scram: ScramCredentials,
        quotas: Quotas,
        replication_quotas: ReplicationQuotas,
        group_configs: GroupConfigs,
        features: FeatureStore,
    ) -> None:
        super().__init__(zk, run_soon, kick, clock)
        self._features = features
        self._node_id = node_id
        self._scram = scram
        self._quotas = quotas
        self._replication_quotas = replication_quotas
        self._group_configs = group_configs

    def watch(self) -> None:
        """As :class:`MetadataSync`'s, and a data watch on ``/feature``."""
        super().watch()
        self.zk.DataWatch(FEATURE, self._on_change)

    async def _apply(self) -> None:
        await self._load_scram()
        await self._load_quotas()
        await self._load_broker_configs()
        await self._load_group_configs()
        await self._load_features()

    async def _load_features(self) -> None:
        found = await trio.to_thread.run_sync(read_features, self.zk)
        if found is not None and self._features.follow(*found):
            self._kick()

    async def change_features(self, changes: Mapping[str, int]) -> None:
        """An UpdateFeatures task: write the levels, read them back."""
        base = self._features.levels()
        await trio.to_thread.run_sync(write_features, self.zk, changes, base)
        await self._load_features()

    async def _load_scram(self) -> None:
        self._scram.use_cluster(await trio.to_thread.run_sync(read_all_scram, self.zk))

    async def _load_quotas(self) -> None:
        self._quotas.use_cluster(await trio.to_thread.run_sync(read_all_quotas, self.zk))
        self._kick()

    async def _load_broker_configs(self) -> None:
        own, default = await trio.to_thread.run_sync(read_broker_configs, self.zk, self._node_id)
        self._replication_quotas.use_broker_configs(own, default)
        self._kick()

    async def _load_group_configs(self) -> None:
        configs = await trio.to_thread.run_sync(read_all_group_configs, self.zk)
        self._group_configs.use_cluster(configs)
        self._kick()

    async def change_scram(
        self, sets: dict[str, ScramCredential], deletes: list[tuple[str, str]]
    ) -> None:
        """An AlterUserScramCredentials task: write it, read the credentials back."""
        await trio.to_thread.run_sync(write_scram, self.zk, sets, deletes)
        await self._load_scram()

    async def change_quotas(
        self, changes: list[tuple[Entity, dict[str, float], list[str]]]
    ) -> None:
        """An AlterClientQuotas task: write it, read the quotas back."""
        await trio.to_thread.run_sync(write_quotas, self.zk, changes)
        await self._load_quotas()

    async def change_broker_config(
        self, entity: str, changes: Mapping[str, str | None], replace: bool
    ) -> None:
        """A broker resource's (Incremental)AlterConfigs task: write it, read back."""
        await trio.to_thread.run_sync(write_broker_config, self.zk, entity, changes, replace)
        await self._load_broker_configs()

    async def change_group_configs(self, group: str, configs: dict[str, str]) -> None:
        """A group resource's configs task: write them, read every group's back."""
        await trio.to_thread.run_sync(write_group_configs, self.zk, group, configs)
        await self._load_group_configs()
