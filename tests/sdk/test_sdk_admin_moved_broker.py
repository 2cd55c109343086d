"""An admin client whose broker moved (restarted on another address, as a
container rescheduled) finds it again: its calls to the broker by id, refused
at the old address, reach it at the new one within their deadline, the new
address learnt from a bootstrap server when no known broker answers (Java's
AdminClient requests a metadata update on a disconnect,
AdminMetadataManager.requestUpdate)."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import pytest

from trafka.brokerlite.server import broker_in_thread
from trafka.sdk import open_admin

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_an_admin_client_follows_its_broker_to_a_new_address(tmp_path: Path) -> None:
    first, second = _free_port(), _free_port()
    servers = f"127.0.0.1:{first},127.0.0.1:{second}"
    data = tmp_path / "broker"
    # (Brokers in threads of their own, started and stopped from a worker thread:
    # the test's trio loop runs the admin client.)
    before = broker_in_thread(port=first, host="127.0.0.1", data_dir=data)
    after = broker_in_thread(port=second, host="127.0.0.1", data_dir=data)
    await anyio.to_thread.run_sync(before.__enter__)
    running = [before]
    try:
        async with open_admin(bootstrap_servers=servers, request_timeout_ms=5_000) as admin:
            (node,) = [b.node_id for b in (await admin.describe_cluster()).brokers]
            assert (await admin.describe_configs(brokers=[node]))[str(node)]
            running.pop()
            await anyio.to_thread.run_sync(before.__exit__, None, None, None)
            # The same broker (its data, its id) on the second address.
            await anyio.to_thread.run_sync(after.__enter__)
            running.append(after)
            with anyio.fail_after(60):
                # Asked of each broker by id (ListGroups): its old address is refused.
                assert await admin.list_groups(timeout_ms=50_000) == []
            brokers = (await admin.describe_cluster()).brokers
            assert [(b.node_id, b.port) for b in brokers] == [(node, second)]
    finally:
        for broker in running:
            await anyio.to_thread.run_sync(broker.__exit__, None, None, None)
