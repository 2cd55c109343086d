"""Cluster mode, Kafka's ZooKeeper-era design: I/O-free decisions beside thin drivers.

Decisions (no I/O, tested without sockets): :mod:`.controller` (elections,
placement, reassignments), :mod:`.replica_manager` (leaders, followers, the high
watermark, ISR changes), :mod:`.view` (the cluster as the broker core sees it)
and :mod:`.zk_layout` (Kafka's znodes and their JSON).

Drivers (trio, sockets): :mod:`.driver` (ZooKeeper through kazoo, the only
module that imports it), :mod:`.replica_fetcher` (followers' fetches) over
:mod:`.inter_broker` (one broker's connection to another).

Rules: a decision module never imports a driver; the drivers only move data.
"""
