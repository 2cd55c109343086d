"""A brokerlite and a console of its own for the console's tests; the helpers
they share are in console_helpers.py.

The console's cluster checks may take 30 s here, not the 1.5 s a person is
promised (trafka.console.health): these tests look at what pages show and
change, and a check that a loaded machine answered late would stop a page
at work (CI's run once did). tests/console/test_dead_cluster.py checks the
promise with the default timeout.

The broker runs on a thread of its own (``broker_in_thread``), so the tests
speak plain blocking HTTP to the console, as a browser does; each test seeds
the data it looks at with the async SDK under a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from console_helpers import Site, console_in_thread

from trafka.brokerlite.cli import STANDARD_AUTHORIZER
from trafka.brokerlite.server import broker_in_thread


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """One broker (with an authorizer that allows what no ACL names, so ACLs can
    be listed and made) and its console, shared by a module's tests."""
    from trafka.console import ConsoleSettings

    with broker_in_thread(
        data_dir=tmp_path_factory.mktemp("console-broker"),
        port=0,
        group_initial_rebalance_delay_ms=0,
        authorizer_class_name=STANDARD_AUTHORIZER,
        allow_everyone_if_no_acl_found=True,
        num_partitions=1,
        # A generous start: CI's run once took over 30 s here, late in the suite.
        startup_timeout=120,
    ) as running:
        client = {"bootstrap.servers": running.bootstrap_servers}
        with console_in_thread(ConsoleSettings(client, "127.0.0.1:0", check_timeout=30.0)) as site:
            yield site
