"""The checksums of the record formats, and how the CRC-32C function is loaded.

The check values are the catalogued ones for the nine bytes ``123456789``
(CRC-32C: iSCSI's polynomial, RFC 3720 appendix B.4; CRC-32: zlib's). The
function comes from the ``crc32c`` package's extension module, loaded without
the package (``codec/crc.py`` says why); it must be the same function the
package exports.
"""

from __future__ import annotations

import random
import subprocess
import sys

from trafka.codec import crc


def test_check_values() -> None:
    assert crc.crc32c(b"123456789") == 0xE3069283
    assert crc.crc32(b"123456789") == 0xCBF43926
    assert crc.crc32c(b"") == 0 and crc.crc32(b"") == 0


def test_a_checksum_continues_over_pieces() -> None:
    data = random.Random(7).randbytes(10_000)
    for cut in (0, 1, 4096, 9_999, 10_000):
        assert crc.crc32c(data[cut:], crc.crc32c(data[:cut])) == crc.crc32c(data)
        assert crc.crc32(data[cut:], crc.crc32(data[:cut])) == crc.crc32(data)
    view = memoryview(bytearray(data))[100:200]
    assert crc.crc32c(view) == crc.crc32c(data[100:200])


def _loaded(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_loaded_alone_it_is_the_packages_function() -> None:
    """Loaded with neither the package nor importlib.metadata, it computes what
    the package's function (imported afterwards) does."""
    out = _loaded(
        "import random, sys\n"
        "from trafka.codec import crc\n"
        "alone = not {'crc32c', 'importlib.metadata'} & set(sys.modules)\n"
        "import crc32c\n"
        "rng = random.Random(11)\n"
        "cases = [(rng.randbytes(n), rng.getrandbits(32)) for n in (1, 7, 64, 1000, 65537)]\n"
        "same = all(crc.crc32c_function(d, v) == crc32c.crc32c(d, v) for d, v in cases)\n"
        "print(alone, same, crc.crc32c_function is crc32c.crc32c)"
    )
    assert out == "True True False"


def test_a_package_imported_already_is_used() -> None:
    out = _loaded(
        "import crc32c\nfrom trafka.codec import crc\nprint(crc.crc32c_function is crc32c.crc32c)"
    )
    assert out == "True"
