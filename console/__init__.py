"""trafka.console: a web console for any Kafka cluster (issue #36).

It shows brokers, topics (partitions, offsets, sizes, leaders, replicas, ISR,
configs and which of them the topic overrides), consumer groups (members, lag
per partition and a lag chart), browses, searches and produces messages,
creates, changes (configs, partitions, records) and deletes topics, resets a
group's offsets and deletes groups, and manages ACLs, talking to the cluster
only through the Kafka protocol (trafka's admin client, consumer and
producer). Who may use it is :mod:`.access`'s policy (a password, a proxy's
header, read-only); whether the cluster answers, :mod:`.health`'s checks.
:mod:`.model` and :mod:`.search` build what the pages show without I/O;
:mod:`.app` is the HTTP driver (Starlette, Jinja2) and :mod:`.server` serves
it with hypercorn on trio. Run it with ``trafka console`` or brokerlite's
``--console-listen``; it needs ``pip install 'trafka[console]'``.
"""

from .server import ConsoleSettings, serve_console

__all__ = ["ConsoleSettings", "serve_console"]
