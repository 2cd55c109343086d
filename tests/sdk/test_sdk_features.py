"""``Admin.describe_features`` and ``Admin.update_features`` (KIP-584): brokerlite's
levels, read the same way kafka-python's admin reads them; a broker before
ApiVersions v3 knows no features; an epoch of -1 is "none"; ``trafka features``
prints them. Updates end to end against brokerlite (validate_only, refusals that
apply nothing), the request version the broker allows (v0's AllowDowngrade),
kafka-python's ``update_features`` against brokerlite, and the CLI's upgrade,
downgrade and disable."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient
from kafka.errors import InvalidUpdateVersionError
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec import ErrorCode, KafkaError, UnsupportedVersionError
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k57_update_features as uf
from trafka.sdk import FeatureMetadata, FeatureUpdate, UpgradeType, open_admin
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
    # What brokerlite implements: KIP-848 and KIP-932 groups, KIP-890 part 2's
    # transactions.
    assert set(ours.finalized) == {"group.version", "share.version", "transaction.version"}


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
    assert found["features"]["share.version"] == {"supported": [0, 2], "finalized": [2, 2]}


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


# -- update_features (KIP-584) ------------------------------------------------------------


@pytest.fixture
def own(tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker of the test's own: updates change it."""
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=tmp_path / "data", group_initial_rebalance_delay_ms=0
    ) as r:
        yield r


async def _update(bootstrap: str, updates: dict[str, FeatureUpdate], **kw: Any) -> Any:
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        return await admin.update_features(updates, **kw)


def test_update_features_against_brokerlite(own: RunningBroker) -> None:
    servers = own.bootstrap_servers
    down = FeatureUpdate(0, UpgradeType.SAFE_DOWNGRADE)
    # validate_only checks and changes nothing.
    checked = anyio.run(partial(_update, servers, {"group.version": down}, validate_only=True))
    assert checked == {"group.version": None}
    assert anyio.run(_describe, servers).finalized_epoch == 1
    applied = anyio.run(
        _update,
        servers,
        {"share.version": FeatureUpdate(0, UpgradeType.UNSAFE_DOWNGRADE), "group.version": down},
    )
    assert applied == {"share.version": None, "group.version": None}
    found = anyio.run(_describe, servers)
    assert (found.finalized, found.finalized_epoch) == ({"transaction.version": (2, 2)}, 2)
    assert found.supported == {
        "group.version": (0, 1),
        "share.version": (0, 2),
        "transaction.version": (0, 2),
    }
    # A refusal names the feature and applies nothing (share.version stays at 0).
    with pytest.raises(KafkaError) as caught:
        anyio.run(
            _update,
            servers,
            {"share.version": FeatureUpdate(2), "group.version": FeatureUpdate(3)},
        )
    assert caught.value.code == ErrorCode.INVALID_UPDATE_VERSION
    assert "group.version" in str(caught.value)
    assert anyio.run(_describe, servers).finalized_epoch == 2
    anyio.run(
        _update, servers, {"group.version": FeatureUpdate(1), "share.version": FeatureUpdate(2)}
    )
    found = anyio.run(_describe, servers)
    assert (found.finalized, found.finalized_epoch) == (
        {"group.version": (1, 1), "share.version": (2, 2), "transaction.version": (2, 2)},
        3,
    )


def test_feature_update_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="downgrade"):
        FeatureUpdate(0)
    with pytest.raises(ValueError, match="max_version_level must be >= 0"):
        FeatureUpdate(-1, UpgradeType.SAFE_DOWNGRADE)


def _cap_update_features(broker: FakeBroker, top: int) -> None:
    def capped(answer: Any) -> Any:
        keys = [
            dataclasses.replace(e, max_version=top) if e.api_key == 57 else e
            for e in answer.api_keys
        ]
        return dataclasses.replace(answer, api_keys=keys)

    _answer_with(broker, capped)


@pytest.mark.anyio
async def test_v0_sends_allow_downgrade_and_reports_per_feature(fake_broker: FakeBroker) -> None:
    _cap_update_features(fake_broker, 0)
    R = uf.UpdateFeaturesResponse

    def answer(header: Any, body: Any) -> Any:
        return R(
            results=[
                R.UpdatableFeatureResult(feature="a.version", error_code=0, error_message=None),
                R.UpdatableFeatureResult(
                    feature="b.version",
                    error_code=ErrorCode.INVALID_UPDATE_VERSION,
                    error_message="no",
                ),
            ]
        )

    fake_broker.handlers[57] = answer
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        out = await admin.update_features(
            {
                "a.version": FeatureUpdate(2),
                "b.version": FeatureUpdate(1, UpgradeType.UNSAFE_DOWNGRADE),
            }
        )
        assert out["a.version"] is None
        error = out["b.version"]
        assert error is not None and error.code == ErrorCode.INVALID_UPDATE_VERSION
        with pytest.raises(UnsupportedVersionError):
            await admin.update_features({"a.version": FeatureUpdate(2)}, validate_only=True)
    sent = [(v, body) for k, v, body in fake_broker.requests if k == 57]
    assert len(sent) == 1
    version, body = sent[0]
    assert version == 0
    assert [(u.feature, u.max_version_level, u.allow_downgrade) for u in body.feature_updates] == [
        ("a.version", 2, False),
        ("b.version", 1, True),
    ]


@pytest.mark.anyio
async def test_v1_sends_the_upgrade_type(fake_broker: FakeBroker) -> None:
    _cap_update_features(fake_broker, 1)
    R = uf.UpdateFeaturesResponse
    fake_broker.handlers[57] = lambda header, body: R(
        results=[
            R.UpdatableFeatureResult(feature=u.feature, error_code=0, error_message=None)
            for u in body.feature_updates
        ]
    )
    updates = {"x.version": FeatureUpdate(0, UpgradeType.UNSAFE_DOWNGRADE)}
    assert await _update(fake_broker.bootstrap, updates, validate_only=True) == {"x.version": None}
    ((version, body),) = [(v, b) for k, v, b in fake_broker.requests if k == 57]
    assert version == 1 and body.validate_only
    assert [(u.upgrade_type, u.max_version_level) for u in body.feature_updates] == [(3, 0)]


def test_kafka_python_updates_brokerlite_features(own: RunningBroker) -> None:
    peer = KafkaAdminClient(bootstrap_servers=own.bootstrap_servers)
    try:
        assert peer.update_features({"group.version": ("SAFE_DOWNGRADE", 0)}) == {
            "group.version": "OK"
        }
        dry = peer.update_features({"group.version": 1}, validate_only=True)
        assert dry == {"group.version": "OK"}
        theirs = peer.describe_features()
        assert {n: f.get("finalized") for n, f in theirs.items() if f.get("finalized")} == {
            "share.version": (2, 2),
            "transaction.version": (2, 2),
        }
        assert theirs["share.version"]["finalized_epoch"] == 2
        assert theirs["group.version"]["supported"] == (0, 1)
        with pytest.raises(InvalidUpdateVersionError):
            peer.update_features({"share.version": 3})
        assert peer.update_features({"group.version": 1}) == {"group.version": "OK"}
    finally:
        peer.close()
    found = anyio.run(_describe, own.bootstrap_servers)
    assert (found.finalized, found.finalized_epoch) == (
        {"group.version": (1, 1), "share.version": (2, 2), "transaction.version": (2, 2)},
        3,
    )


def test_the_cli_changes_levels(own: RunningBroker) -> None:
    servers = own.bootstrap_servers

    def cli(*args: str) -> Any:
        return CliRunner().invoke(main, ["features", *args, "-b", servers])

    dry = cli("disable", "--feature", "share.version", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "share.version can be disabled" in dry.stdout
    assert anyio.run(_describe, servers).finalized_epoch == 1
    down = cli("downgrade", "--feature", "group.version=0", "--unsafe")
    assert down.exit_code == 0, down.output
    assert down.stdout.strip() == "group.version was downgraded to 0"
    refused = cli("upgrade", "--feature", "group.version=9")
    assert refused.exit_code == 1
    assert "INVALID_UPDATE_VERSION" in refused.output and "nothing changed" in refused.output
    bad = cli("upgrade", "--feature", "group.version")
    assert bad.exit_code == 2 and "NAME=LEVEL" in bad.output
    up = cli("upgrade", "--feature", "group.version=1")
    assert up.exit_code == 0 and up.stdout.strip() == "group.version was upgraded to 1"
    described = cli("describe", "--json")
    assert described.exit_code == 0, described.output
    assert json.loads(described.stdout)["finalized_epoch"] == 3
