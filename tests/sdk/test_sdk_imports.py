"""What ``import trafka.sdk`` loads: the producer and consumer path, not the admin
client or the share consumer (most of the import time), which load when named."""

from __future__ import annotations

import subprocess
import sys


def test_the_admin_client_and_share_consumer_load_when_first_named() -> None:
    code = (
        "import sys, trafka.sdk as sdk\n"
        "assert 'trafka.sdk.admin' not in sys.modules\n"
        "assert 'trafka.sdk.share_consumer' not in sys.modules\n"
        "assert callable(sdk.open_producer) and callable(sdk.open_consumer)\n"
        "from trafka.sdk import NewTopic, open_admin, ShareConsumer\n"
        "assert NewTopic('t', 1).name == 't' and 'trafka.sdk.admin' in sys.modules\n"
        "assert ShareConsumer.__module__ == 'trafka.sdk.share_consumer'\n"
        "assert 'open_admin' in dir(sdk)\n"
        "try:\n"
        "    sdk.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
