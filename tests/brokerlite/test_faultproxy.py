"""The fault-injecting proxy's sans-IO core (brokerlite_faultproxy.FaultyLink) and driver."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

import pytest
from brokerlite_faultproxy import Action, FaultPlan, FaultProxy, FaultyLink

from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import encode_request, encode_response


def request(key: int, corr: int) -> bytes:
    header = RequestHeader(request_api_key=key, request_api_version=3, correlation_id=corr)
    body = produce.ProduceRequest(acks=-1) if key == 0 else api_versions.ApiVersionsRequest()
    return encode_request(header, body)


def response(key: int, corr: int) -> bytes:
    body = produce.ProduceResponse() if key == 0 else api_versions.ApiVersionsResponse()
    return encode_response(corr, key, 3, body)


def correlation_ids(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        size, corr = struct.unpack_from(">ii", data, pos)
        out.append(corr)
        pos += 4 + size
    return out


def exchange(link: FaultyLink, keys: list[int], now: float = 0.0) -> None:
    """Requests 1..n of ``keys`` in, then their responses, a byte at a time."""
    wire = b"".join(request(k, i) for i, k in enumerate(keys, 1))
    forwarded = b"".join(link.from_client(wire[i : i + 1]) for i in range(len(wire)))
    assert forwarded == wire  # requests pass untouched
    answers = b"".join(response(k, i) for i, k in enumerate(keys, 1))
    for i in range(len(answers)):
        link.from_broker(answers[i : i + 1], now)


class Scripted(FaultPlan):
    """A plan that answers from a list of actions, for exact tests."""

    def __init__(self, actions: list[tuple[Action, float]]) -> None:
        super().__init__()
        self.actions = list(actions)

    def decide(self, api_key: int) -> tuple[Action, float]:
        if api_key != 0:
            return Action.PASS, 0.0
        return self.actions.pop(0)


def test_responses_pass_in_order_and_other_apis_are_left_alone() -> None:
    link = FaultyLink(Scripted([(Action.PASS, 0.0)] * 2))
    exchange(link, [0, 18, 0])
    assert correlation_ids(link.to_client(0.0)) == [1, 2, 3]
    assert link.next_deadline() is None


def test_a_cut_drops_the_response_and_everything_after() -> None:
    link = FaultyLink(Scripted([(Action.PASS, 0.0), (Action.CUT, 0.0)]))
    exchange(link, [0, 0, 18])
    assert link.cut
    assert link.to_client(10.0) == b""
    assert link.from_client(request(18, 9)) == b""


def test_a_delay_holds_back_the_later_responses_too() -> None:
    link = FaultyLink(Scripted([(Action.DELAY, 0.5), (Action.PASS, 0.0)]))
    exchange(link, [0, 0, 18], now=1.0)
    assert link.to_client(1.2) == b""
    assert link.next_deadline() == 1.5
    assert correlation_ids(link.to_client(1.5)) == [1, 2, 3]


def test_a_swap_reverses_two_responses() -> None:
    link = FaultyLink(Scripted([(Action.SWAP, 0.0), (Action.PASS, 0.0)]))
    exchange(link, [0, 0])
    assert correlation_ids(link.to_client(0.0)) == [2, 1]


def test_a_swapped_response_with_no_successor_goes_out_late_alone() -> None:
    plan = Scripted([(Action.SWAP, 0.0)])
    plan.swap_hold_s = 0.3
    link = FaultyLink(plan)
    exchange(link, [0], now=2.0)
    assert link.to_client(2.1) == b""
    assert link.next_deadline() == pytest.approx(2.3)
    assert correlation_ids(link.to_client(2.3)) == [1]


def test_the_plan_cuts_on_schedule_and_caps_the_cuts() -> None:
    plan = FaultPlan(seed=3, cut_every=3, max_cuts=2, delay=0.2, swap=0.2, skip_first=1)
    actions = [plan.decide(0)[0] for _ in range(20)]
    assert [i for i, a in enumerate(actions) if a is Action.CUT] == [3, 6]
    assert actions[0] is Action.PASS  # skipped
    assert plan.decide(18) == (Action.PASS, 0.0)
    again = FaultPlan(seed=3, cut_every=3, max_cuts=2, delay=0.2, swap=0.2, skip_first=1)
    assert [again.decide(0)[0] for _ in range(20)] == actions  # seeded: reproducible


@pytest.mark.timeout(30)
def test_the_driver_relays_and_cuts_real_sockets() -> None:
    upstream = socket.create_server(("127.0.0.1", 0))
    upstream.settimeout(10)

    def echo_broker() -> None:
        conn, _ = upstream.accept()
        with conn:
            conn.settimeout(10)
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
                while len(data) >= 4 and len(data) >= 4 + struct.unpack_from(">i", data)[0]:
                    size = struct.unpack_from(">i", data)[0]
                    frame, data = data[4 : 4 + size], data[4 + size :]
                    key, _, corr = struct.unpack_from(">hhi", frame)
                    conn.sendall(response(key, corr))

    thread = threading.Thread(target=echo_broker, daemon=True)
    thread.start()
    plan = FaultPlan(cut_every=2, max_cuts=1)
    with FaultProxy(plan) as proxy:
        proxy.upstream = upstream.getsockname()[:2]
        client = socket.create_connection(proxy.address, timeout=10)
        with client:
            client.sendall(request(0, 1))
            assert correlation_ids(_read_frame(client)) == [1]
            client.sendall(request(0, 2))
            assert client.recv(100) == b""  # cut: the broker answered, the client hears EOF
    thread.join(10)
    upstream.close()
    assert plan.counts[Action.CUT] == 1 and proxy.connections == 1


def _read_frame(sock: Any) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    (size,) = struct.unpack(">i", head)
    return head + sock.recv(size, socket.MSG_WAITALL)
