"""The memory budget: sizes parse, estimates above the limit are refused with one line."""

import pytest

from smallinit.core.errors import ConfigError
from smallinit.core.memory import ENV, check_memory, human, limit_bytes, parse_size


def test_sizes_parse_with_binary_units():
    assert parse_size("123") == 123
    assert parse_size("512M") == 512 * 1024**2
    assert parse_size("1.5g") == int(1.5 * 1024**3)
    assert parse_size("2TiB") == 2 * 1024**4
    with pytest.raises(ConfigError, match="not a size"):
        parse_size("lots")


def test_refusal_names_the_work_the_estimate_and_the_limit(monkeypatch):
    monkeypatch.setenv(ENV, "1G")
    check_memory(0.9 * 1024**3, "small")  # fits: no error
    with pytest.raises(ConfigError) as err:
        check_memory(3 * 1024**4, "training model.d_model=1000000")
    text = str(err.value)
    assert "model.d_model=1000000" in text and "3.0 TiB" in text and "1.0 GiB" in text
    assert ENV in text and "\n" not in text


def test_off_disables_and_default_is_below_physical_memory(monkeypatch):
    monkeypatch.setenv(ENV, "off")
    assert limit_bytes() is None
    check_memory(1e30, "anything")
    monkeypatch.delenv(ENV)
    assert 0 < limit_bytes() < 2**50
    assert human(1536) == "1.5 KiB"
