"""Development launchers, kept out of the broker: a private ZooKeeper server
(:mod:`.zookeeper_server`) and whole local clusters (:mod:`.local_cluster`) for
tests, the demo and ``trafka cluster``.

Rules: the broker never imports this package; it sits above the drivers and
starts them as a user would.
"""
