"""The one number formatter (agentx.fmt) and the unit helpers (agentx.units)."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentx.fmt import frame, num
from agentx.units import GB, display, parse_duration_s, rss_gb


def parse(text: str) -> float:
    return float(text.replace(",", ""))


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
def test_four_significant_digits_and_canonical(x):
    text = num(x)
    back = parse(text)
    assert back == pytest.approx(x, rel=5e-4, abs=0 if x else 1e-300)
    assert (
        num(back) == text or num(float(back)) == text
    )  # printing what was printed changes nothing


@given(st.integers(-(10**15), 10**15))
def test_integers_are_exact_with_separators(n):
    assert int(num(n).replace(",", "")) == n
    assert "." not in num(n) and "e" not in num(n)


def test_special_values():
    assert [num(v) for v in (None, True, False, 0.0, math.nan, math.inf, 1e9, 2.5e-4)] == [
        "", "yes", "no", "0", "NaN", "inf", "1.000e+09", "2.500e-04",
    ]  # fmt: skip
    assert num(99457.0) == "99,457" and num(0.004731) == "0.004731" and num(1234.5678) == "1,235"
    # values that round across a range edge print as the rounded value does
    assert num(999_999_999.5) == "1.000e+09" and num(0.00099996) == "0.001"
    assert num(9999.6) == "10,000" and num(-0.5) == "-0.5"


def test_frame_aligns_numbers_right():
    out = frame(pl.DataFrame({"name": ["a", "bb"], "gb": [1.5, 1234.0]})).splitlines()
    assert out[0].split() == ["name", "gb"]
    assert out[2].endswith("1.5") and out[3].endswith("1,234")
    assert len(out[2]) == len(out[3])


def test_display_and_durations():
    assert display("hbm_bytes", 186e9) == ("hbm_gb", 186.0)
    assert display("scale_up_bytes_per_s", 900e9) == ("scale_up_gb_per_s", 900.0)
    assert display("kv_bytes_per_token", 40016) == ("kv_bytes_per_token", 40016)
    assert display("name", "gb200") == ("name", "gb200") and GB == 1e9
    assert [parse_duration_s(t) for t in ("50ms", "3s", "0.5", "2min")] == [0.05, 3.0, 0.5, 120.0]
    with pytest.raises(ValueError):
        parse_duration_s("fast")


def test_rss_gb_reads_getrusage_kib():
    # ru_maxrss is KiB on Linux: 1,953,125 KiB is exactly 2e9 bytes, not 1.95 "GB"
    assert rss_gb(1_953_125) == 2.0
    assert rss_gb(1_945_000) > 1.99
