"""commbench.core.units: sizes as people type them (binary units, like nccl-tests) and as tables print them."""

import pytest

from commbench.core.errors import BadInput
from commbench.core.units import format_size, parse_size, parse_size_list


@pytest.mark.parametrize("text, expected", [
    ("8", 8),
    ("4K", 4096),
    ("4k", 4096),
    ("64M", 64 * 1024 * 1024),
    ("1G", 1024 ** 3),
    ("2T", 2 * 1024 ** 4),
    ("1.5K", 1536),
    (".5K", 512),
    ("1e6", 1_000_000),
    ("64MiB", 67108864),
    ("64MB", 67108864),  # binary, as nccl-tests reads -b/-e
    ("64mib", 67108864),
    ("100B", 100),
    (" 16K ", 16384),
    ("134217728", 134217728),
    ("9007199254740993", 9007199254740993),  # 2**53 + 1: no detour through float
])
def test_parse_size_accepts(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["12Q", "0", "-5", "", "1.3", "abc", "0K", "4 K B B", "1.0000000000000001K",
                                  "1e400", "9" * 400, "K", "1,5K", "0x10"])
def test_parse_size_rejects_with_the_bad_value_named(text):
    with pytest.raises(BadInput) as err:
        parse_size(text, "--max-bytes")
    message = str(err.value)
    assert "--max-bytes" in message
    assert repr(text) in message


def test_parse_size_message_explains_the_fix():
    with pytest.raises(BadInput, match=r"'12Q' is not a size.*e\.g\. 8, 4K, 64M, 1G"):
        parse_size("12Q")
    with pytest.raises(BadInput, match=r"'1\.3' is not a whole number of bytes"):
        parse_size("1.3")
    with pytest.raises(BadInput, match=r"'0' must be at least 1 byte"):
        parse_size("0")


def test_parse_size_rejects_sizes_too_large_to_store():
    assert parse_size(str(2 ** 63 - 1)) == 2 ** 63 - 1
    with pytest.raises(BadInput, match="too large"):
        parse_size(str(2 ** 63))
    with pytest.raises(BadInput, match="too large"):
        parse_size("1e999999999999")  # must answer at once, not compute 10**1e12


def test_parse_size_list():
    assert parse_size_list("1K,64K, 4M") == [1024, 65536, 4194304]
    assert parse_size_list("8,,16") == [8, 16]
    with pytest.raises(BadInput, match="--sizes is empty"):
        parse_size_list(" , ")
    with pytest.raises(BadInput, match="'7X'"):
        parse_size_list("1K,7X")


@pytest.mark.parametrize("nbytes, text", [
    (0, "0 B"),
    (8, "8 B"),
    (1023, "1023 B"),
    (1024, "1 KiB"),
    (1536, "1.5 KiB"),
    (4096, "4 KiB"),
    (64 * 1024 ** 2, "64 MiB"),
    (1024 ** 3, "1 GiB"),
    (16 * 1024 ** 3, "16 GiB"),
    (3 * 1024 ** 4, "3 TiB"),
    (2048 * 1024 ** 4, "2048 TiB"),
])
def test_format_size(nbytes, text):
    assert format_size(nbytes) == text


@pytest.mark.parametrize("text", ["8", "4K", "1536", "64M", "1G", "3T"])
def test_format_then_parse_round_trips(text):
    n = parse_size(text)
    label = format_size(n)  # e.g. "64 MiB"
    assert parse_size(label.replace(" ", "")) == n
