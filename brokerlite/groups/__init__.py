"""The group coordinator: classic consumer groups, KIP-848 consumer groups, share
groups' membership, and the committed offsets they keep.

:mod:`.coordinator` (``GroupCoordinator``) answers the group APIs, composed of
:mod:`.rebalance` (the classic rebalance), :mod:`.classic` (its requests),
:mod:`.offset_requests` and :mod:`.group_admin`, over the state machines of
:mod:`.state` (classic), :mod:`.consumer_groups` (KIP-848) and
:mod:`.share_groups` (KIP-932's membership side, its configs in
:mod:`.group_configs`); :mod:`.offsets` keeps committed offsets in a journal
file, :mod:`.replicated_offsets` in the replicated ``__consumer_offsets`` topic
(cluster mode), one state behind either port.

Rules: sans-IO (the time comes in as ``now_ms``, timers fire from ``tick``); no
import of the broker core, the handlers or a driver.
"""
