"""trafka.console: a web console for any Kafka cluster (issue #36).

It shows brokers, topics (partitions, offsets, sizes, leaders, replicas, ISR),
consumer groups (members, lag per partition and a lag chart), browses and
produces messages, creates and deletes topics and manages ACLs, talking to the
cluster only through the Kafka protocol (trafka's admin client, consumer and
producer). :mod:`.model` builds what the pages show without I/O; :mod:`.app`
is the HTTP driver (Starlette, Jinja2) and :mod:`.server` serves it with
hypercorn on trio. Run it with ``trafka console`` or brokerlite's
``--console-listen``; it needs ``pip install 'trafka[console]'``.
"""

from .server import ConsoleSettings, serve_console

__all__ = ["ConsoleSettings", "serve_console"]
