"""``Admin.describe_features`` (KIP-584): brokerlite's levels, read the same way
kafka-python's admin reads them; a broker before ApiVersions v3 knows no
features; an epoch of -1 is "none"; and ``trafka features`` prints them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec.messages import k18_api_versions as av
from trafka.sdk import FeatureMetadata, open_admin
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path_factory.mktemp("f")) as r:
        yield r


async def _describe(bootstrap: str) -> FeatureMetadata:
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        return await admin.describe_features()


def test_brokerlite_features_agree_with_kafka_python(running: RunningBroker) -> None:
    ours = anyio.run(_describe, running.bootstrap_servers)
    peer = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
    try:
        theirs = peer.describe_features()
    finally:
        peer.close()
    assert ours.supported == {name: f["supported"] for name, f in theirs.items()}
    assert ours.finalized == {name: f["finalized"] for name, f in theirs.items()}
    assert {ours.finalized_epoch} == {f["finalized_epoch"] for f in theirs.values()}
    # What brokerlite implements: KIP-848 and KIP-932 groups.
    assert set(ours.finalized) == {"group.version", "share.version"}


def test_the_cli_prints_them(running: RunningBroker) -> None:
    bootstrap = running.bootstrap_servers
    table = CliRunner().invoke(main, ["features", "-b", bootstrap])
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["FEATURE", "SUPPORTED", "FINALIZED", "EPOCH"]
    assert lines[1].split() == ["group.version", "0-1", "1", "1"]
    as_json = CliRunner().invoke(main, ["features", "-b", bootstrap, "--json"])
    assert as_json.exit_code == 0, as_json.output
    found = json.loads(as_json.stdout)
    assert found["finalized_epoch"] == 1
    assert found["features"]["share.version"] == {"supported": [0, 1], "finalized": [1, 1]}


def _answer_with(broker: FakeBroker, change: Any) -> None:
    plain = broker.handler_for(18)
    assert plain is not None
    broker.handlers[18] = lambda header, body: change(plain(header, body))


@pytest.mark.anyio
async def test_a_broker_before_kip584_knows_no_features(fake_broker: FakeBroker) -> None:
    def at_most_v2(answer: Any) -> Any:
        keys = [
            dataclasses.replace(e, max_version=2) if e.api_key == 18 else e for e in answer.api_keys
        ]
        return dataclasses.replace(answer, api_keys=keys)

    _answer_with(fake_broker, at_most_v2)
    found = await _describe(fake_broker.bootstrap)
    assert found == FeatureMetadata({}, None, {})
    # Only the handshake was sent: a v2 answer could not have carried features.
    assert [k for k, _, _ in fake_broker.requests].count(18) == 1


@pytest.mark.anyio
async def test_no_finalized_epoch_is_none(fake_broker: FakeBroker) -> None:
    def supported_only(answer: Any) -> Any:
        feature = av.ApiVersionsResponse.SupportedFeatureKey(
            name="transaction.version", min_version=0, max_version=2
        )
        return dataclasses.replace(
            answer, supported_features=[feature], finalized_features_epoch=-1
        )

    _answer_with(fake_broker, supported_only)
    found = await _describe(fake_broker.bootstrap)
    assert found == FeatureMetadata({}, None, {"transaction.version": (0, 2)})
