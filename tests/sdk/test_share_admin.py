"""The admin client's share-group calls against a scripted broker:
describe_share_groups (ShareGroupDescribe v1: a coordinator still loading is
waited out, a missing group and a broker without the API are errors),
list_groups by type (ListGroups v5 filters on the broker, older versions here)
and group configs (resource type 32)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sdk_fakebroker import FakeBroker, serving
from share_scripted_broker import ShareScriptedBroker

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k16_list_groups as lg
from trafka.codec.messages import k44_incremental_alter_configs as iac
from trafka.codec.messages import k77_share_group_describe as sgd
from trafka.sdk import TopicPartition, open_admin
from trafka.sdk.admin import ShareGroupDescription, ShareMemberDescription

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

D = sgd.ShareGroupDescribeResponse


@pytest.fixture
async def broker() -> AsyncIterator[ShareScriptedBroker]:
    async with serving(ShareScriptedBroker(topics={"q": 2})) as b:
        yield b


def describe_handler(answers: list[int]) -> Any:
    """ShareGroupDescribe: first the codes in ``answers``, then group "g" (others unknown)."""

    def handle(header: Any, body: Any) -> Any:
        groups = []
        for gid in body.group_ids:
            if answers:
                groups.append(D.DescribedGroup(group_id=gid, error_code=answers.pop(0)))
            elif gid != "g":
                groups.append(
                    D.DescribedGroup(
                        group_id=gid,
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {gid} not found.",
                    )
                )
            else:
                member = D.Member(
                    member_id="m1",
                    rack_id="r",
                    member_epoch=3,
                    client_id="c",
                    client_host="/10.0.0.1",
                    subscribed_topic_names=["q"],
                    assignment=D.Assignment(
                        topic_partitions=[
                            D.TopicPartitions(
                                topic_id=uuid.UUID(int=5), topic_name="q", partitions=[0, 1]
                            )
                        ]
                    ),
                )
                groups.append(
                    D.DescribedGroup(
                        group_id=gid,
                        group_state="Stable",
                        group_epoch=4,
                        assignment_epoch=3,
                        assignor_name="simple",
                        members=[member],
                    )
                )
        return D(groups=groups)

    return handle


async def test_describe_share_groups_waits_out_a_loading_coordinator(
    broker: ShareScriptedBroker,
) -> None:
    broker.handlers[77] = describe_handler([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
    async with open_admin(bootstrap_servers=broker.bootstrap, retry_backoff_ms=10) as admin:
        found = await admin.describe_share_groups(["g"])
    assert found == {
        "g": ShareGroupDescription(
            "g",
            "Stable",
            4,
            3,
            "simple",
            (
                ShareMemberDescription(
                    "m1",
                    "c",
                    "/10.0.0.1",
                    "r",
                    3,
                    ("q",),
                    frozenset({TopicPartition("q", 0), TopicPartition("q", 1)}),
                ),
            ),
        )
    }
    assert sum(1 for k, v, _ in broker.requests if k == 77 and v == 1) == 2


async def test_a_missing_share_group_is_an_error_naming_it(broker: ShareScriptedBroker) -> None:
    broker.handlers[77] = describe_handler([])
    async with open_admin(bootstrap_servers=broker.bootstrap) as admin:
        with pytest.raises(KafkaError, match="'nope'") as caught:
            await admin.describe_share_groups(["g", "nope"])
    assert caught.value.code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_a_broker_without_share_groups_says_so() -> None:
    plain = FakeBroker(topics={"q": 1})
    base = plain.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        answer.api_keys[:] = [k for k in answer.api_keys if k.api_key != 77]
        return answer

    plain.handlers[18] = versions
    plain.handlers[10] = ShareScriptedBroker.find_coordinator.__get__(plain)
    async with serving(plain):
        async with open_admin(bootstrap_servers=plain.bootstrap) as admin:
            with pytest.raises(KafkaError, match=r"Kafka 4\.1") as caught:
                await admin.describe_share_groups(["g"])
        assert caught.value.code == ErrorCode.UNSUPPORTED_VERSION


def list_groups_handler(seen: list[Any]) -> Any:
    G = lg.ListGroupsResponse

    def handle(header: Any, body: Any) -> Any:
        seen.append((header.request_api_version, body))
        everything = [("c", "classic"), ("k", "consumer"), ("s", "share")]
        if header.request_api_version < 5:
            return G(groups=[G.ListedGroup(group_id=g, protocol_type="x") for g, _ in everything])
        wanted = set(body.types_filter)
        return G(
            groups=[
                G.ListedGroup(group_id=g, protocol_type="x", group_state="Stable", group_type=t)
                for g, t in everything
                if not wanted or t in wanted
            ]
        )

    return handle


async def test_list_groups_by_type(broker: ShareScriptedBroker) -> None:
    seen: list[Any] = []
    broker.handlers[16] = list_groups_handler(seen)
    async with open_admin(bootstrap_servers=broker.bootstrap) as admin:
        shares = await admin.list_groups(types=["SHARE"])
        everything = await admin.list_groups()
    assert [(g.group_id, g.group_type) for g in shares] == [("s", "share")]
    assert seen[0][1].types_filter == ["share"] and seen[0][0] == 5
    assert len(everything) == 3 and seen[-1][1].types_filter == []


async def test_list_groups_by_type_on_an_older_broker(broker: ShareScriptedBroker) -> None:
    seen: list[Any] = []
    broker.handlers[16] = list_groups_handler(seen)
    base = broker.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        answer.api_keys[:] = [
            type(k)(api_key=16, min_version=0, max_version=4) if k.api_key == 16 else k
            for k in answer.api_keys
        ]
        return answer

    broker.handlers[18] = versions
    async with open_admin(bootstrap_servers=broker.bootstrap) as admin:
        assert await admin.list_groups(types=["share"]) == []  # v4 groups are all classic
        assert [g.group_id for g in await admin.list_groups(types=["classic"])] == ["c", "k", "s"]
    assert all(v == 4 for v, _ in seen)


async def test_group_configs_use_resource_type_32(broker: ShareScriptedBroker) -> None:
    sent: list[Any] = []

    def alter(header: Any, body: Any) -> Any:
        sent.append(body)
        R = iac.IncrementalAlterConfigsResponse
        return R(
            responses=[
                R.AlterConfigsResourceResponse(
                    resource_type=r.resource_type, resource_name=r.resource_name
                )
                for r in body.resources
            ]
        )

    broker.handlers[44] = alter
    async with open_admin(bootstrap_servers=broker.bootstrap) as admin:
        await admin.alter_group_configs(
            {"g": {"share.auto.offset.reset": "earliest", "share.isolation.level": None}}
        )
    [resource] = sent[0].resources
    assert (resource.resource_type, resource.resource_name) == (32, "g")
    assert [(c.name, c.config_operation, c.value) for c in resource.configs] == [
        ("share.auto.offset.reset", 0, "earliest"),
        ("share.isolation.level", 1, None),
    ]
