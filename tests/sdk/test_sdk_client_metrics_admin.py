"""The admin client's client-metrics calls (KIP-714 subscriptions, ConfigResource
CLIENT_METRICS) against brokerlite: alter (set, delete, and deleting the last
setting deletes the resource), describe (defaults and overrides), list, and the
broker's refusals as KafkaError."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import open_admin

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "client-metrics")


def test_alter_describe_list_and_delete(broker: RunningBroker) -> None:
    name = fresh("subscription")

    async def main() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            assert name not in await admin.list_client_metrics_resources()
            defaults = await admin.describe_client_metrics_configs([name])
            assert defaults == {name: {"interval.ms": "300000", "match": "", "metrics": ""}}
            await admin.alter_client_metrics_configs(
                name,
                {
                    "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.",
                    "interval.ms": "1000",
                    "match": "client_id=app-.*",
                },
            )
            assert name in await admin.list_client_metrics_resources()
            described = await admin.describe_client_metrics_configs([name])
            assert described[name]["interval.ms"] == "1000"
            assert described[name]["match"] == "client_id=app-.*"
            await admin.alter_client_metrics_configs(name, {"match": None})
            overrides = await admin.describe_client_metrics_configs([name], overrides_only=True)
            assert set(overrides[name]) == {"metrics", "interval.ms"}
            await admin.alter_client_metrics_configs(name, {"metrics": None, "interval.ms": None})
            assert name not in await admin.list_client_metrics_resources()

    anyio.run(main)


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"interval.ms": "50"}, ErrorCode.INVALID_REQUEST),
        ({"metric": "x"}, ErrorCode.INVALID_REQUEST),
        ({"match": "client_colour=red"}, ErrorCode.INVALID_CONFIG),
    ],
)
def test_refusals_are_kafka_errors(
    broker: RunningBroker, changes: dict[str, str], code: ErrorCode
) -> None:
    async def main() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            with pytest.raises(KafkaError) as info:
                await admin.alter_client_metrics_configs(fresh("bad"), changes)
            assert info.value.code == code

    anyio.run(main)
