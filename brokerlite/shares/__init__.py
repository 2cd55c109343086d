"""Share groups' partition side (KIP-932): the share-partition leader.

:mod:`.partition` is one share-partition's record states (sans-IO, no log, no
clock); :mod:`.fetcher` (``ShareFetcher``) serves ShareFetch and
ShareAcknowledge over the partition logs, and the offsets admin
(:mod:`.offsets_admin`); :mod:`.state_store` is the share-state journal and
:mod:`.share_config` what a share-partition needs of its group's configs. The
membership side of share groups is the group coordinator's
(:mod:`trafka.brokerlite.groups.share_groups`).

Rules: no import of the broker core, the handlers or a driver.
"""
