"""Fixtures for the SDK tests: anyio backends and the scripted fake broker.

Integration tests against brokerlite live in ``test_sdk_integration.py`` and
``test_sdk_interop.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc
import pytest
from sdk_fakebroker import FakeBroker


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    broker = FakeBroker(topics={"t": 3, "one": 1})
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    broker.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, broker.serve)
        yield broker
        tg.cancel_scope.cancel()
