"""Key routing: the proxy's filter that places each keyed record on the
partition its key hashes to (:class:`KeyRouting`), and what it is made of.

=======================  ==================================================================
module                   what it holds
=======================  ==================================================================
:mod:`.filter`           the filter: chooses each Produce's path, drives the plain one
:mod:`.plan`             I/O-free: where each record goes; the plain, spans and
                         single-connection plans
:mod:`.place`            where a plan runs (at once, or on a worker thread)
:mod:`.coalesce`         plain producers' pieces sharing upstream requests, per leader
:mod:`.idempotent_plan`  I/O-free: the idempotent (and transactional) plan
:mod:`.sequences`        I/O-free: the proxy's sequence numbers per producer and partition
:mod:`.exactly_once`     the driver of idempotent and transactional producers
:mod:`.answers`          I/O-free: the one answer the client expects, from the parts'
:mod:`.stats`            the counters (:class:`RouteStats`)
:mod:`.journal`          placements journaled in a directory (exactly once over restarts)
:mod:`.journal_peers`    ... reading sibling workers' directories too
:mod:`.journal_pipeline` journal writes pipelined with a producer's next request
:mod:`.journal_topic`    placements journaled in a topic of the upstream cluster
:mod:`.sync_grace`       when a producer's sequences may be asked of the leaders
:mod:`.worker_lives`     which producers a restarted worker may sync at once
=======================  ==================================================================

It uses only the public filter API (:mod:`trafka.proxy.filters`): the proxy's
core does not know it by type.
"""

from .filter import KeyRouting
from .stats import RouteStats

__all__ = ["KeyRouting", "RouteStats"]
