"""What a proxy process imports: the SDK's clients only with a journal topic (issue #60).

``trafka proxy`` spent about half its start-up CPU (some 0.45 s of 0.95 s) importing
the SDK's admin client, producer and consumer, which only the placement journal
kept in a topic (``--journal topic``, :mod:`trafka.proxy.keyrouting.journal_topic`)
uses: the settings named its default topic from that module, and the chain's
assembly and key routing imported its class at the top. Structure, not time:
the checks look at ``sys.modules`` of a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

CLIENTS = [
    "trafka.sdk.admin",
    "trafka.sdk.consumer",
    "trafka.sdk.producer",
    "trafka.proxy.keyrouting.journal_topic",
]

# The command's module, the chain a default proxy runs (key routing, the SASL
# watch, address rewriting), then the chain with a journal topic.
CODE = f"""
import json, sys
def loaded():
    return [m for m in {CLIENTS!r} if m in sys.modules]
import trafka.proxy.cli
from trafka.proxy import ProxyConfig
from trafka.proxy.assembly import filter_chain
chain = filter_chain(ProxyConfig(upstream=("127.0.0.1:9092",)))
default = loaded()
journal = filter_chain(ProxyConfig(upstream=("127.0.0.1:9092",), journal_topic="placements"))
print(json.dumps([default, loaded(), [type(f).__name__ for f in chain],
                  type(journal[0]._journal).__name__]))
"""


def test_a_proxy_without_a_journal_topic_loads_no_sdk_client() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    default, with_journal, chain, journal = json.loads(done.stdout.splitlines()[-1])
    assert chain == ["KeyRouting", "SaslPrincipals", "BrokerAddresses"]
    assert default == []
    assert journal == "TopicJournal"
    assert with_journal == CLIENTS
