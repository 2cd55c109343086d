"""One counter for the names tests give topics, groups and transactional ids.

A worker's brokers (Kafka's above all) are shared by every test file it runs,
so a name must be unique across files, not only within one: each file that
numbers its names takes the numbers from here.
"""

from __future__ import annotations

import itertools

#: The process's counter (one per pytest-xdist worker, as the shared brokers are).
names = itertools.count()
