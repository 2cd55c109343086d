"""Fixtures for the SDK tests: anyio backends and the scripted fake broker.

Integration tests against brokerlite live in ``test_sdk_integration.py`` and
``test_sdk_interop.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sdk_fakebroker import FakeBroker, serving


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    async with serving(FakeBroker(topics={"t": 3, "one": 1})) as broker:
        yield broker
