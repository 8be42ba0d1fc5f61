"""The one number formatter (components/format.py): Python texts and the d3 formats of hovers and grids."""

from __future__ import annotations

from datetime import datetime

from components import format as fmt


def test_format001_numbers_on_their_own():
    """Four significant digits, whole numbers with separators, '–' for missing, 'NaN' for NaN."""
    assert fmt.num(0.123456) == "0.1235" and fmt.num(2.5e-7) == "2.5e-07" and fmt.num(3.0) == "3"
    assert fmt.num(12345) == "12,345" and fmt.num(None) == "–" and fmt.num(float("nan")) == "NaN"
    assert fmt.num(1 / 3, 3) == "0.333" and fmt.num("abc") == "abc"
    assert fmt.signed(0.5) == "+0.5" and fmt.signed(-0.5) == "-0.5" and fmt.signed(0) == "0"
    assert fmt.share(0.8125) == "81.2%" and fmt.share(None) == "–"


def test_format002_value_by_kind():
    """Shares as whole percentages, signed values with a +, steps without separators, '–' for missing."""
    assert fmt.value(0.375, "share") == "38%"
    assert fmt.value(0.5, "signed") == "+0.5" and fmt.value(-0.5, "signed") == "-0.5"
    assert fmt.value(2300, "step") == "2300" and fmt.value(2300, "int") == "2,300"
    assert fmt.value(None, "num") == "–" and fmt.value(float("nan"), "share") == "NaN"
    assert fmt.value("<b>", "text") == "<b>" and fmt.value(0.123456) == "0.1235"


def test_format003_exact_text_reads_back():
    """Bin edges read back as the same float, and whole numbers have no decimals."""
    for v in (0.1, 0.25, 1e-05, -3.0, 2.0 / 3.0, 1e20):
        assert float(fmt.exact(v)) == v
    assert fmt.exact(3.0) == "3" and fmt.exact(0.25) == "0.25" and fmt.exact(-2) == "-2"


def test_format004_grid_cells_follow_the_same_rules():
    """The grid's formatter is d3's version of value(): 4 significant digits, whole numbers, a + sign."""
    assert fmt.grid_formatter("num") == {
        "function": "params.value == null ? '–' : d3.format('.4~g')(params.value)"
    }
    assert fmt.grid_formatter("int", missing="") == {
        "function": "params.value == null ? '' : d3.format('d')(params.value)"
    }
    assert "'+'" in fmt.grid_formatter("signed")["function"]
    assert fmt.D3_NUM == ".4~g"  # d3's trimmed g is Python's g: num(1.0) == "1", d3 '.4~g' gives "1"


def test_format005_steps_sizes_and_ages():
    """A step range without a dash that reads as a minus sign; sizes in MB; a time and how long ago."""
    assert fmt.step_range(1, 25) == "1–25" and fmt.step_range(-3, -1) == "-3 to -1"
    assert fmt.megabytes(12_345_678) == "12.3 MB"
    ts = datetime(2026, 1, 2, 10, 20).timestamp()
    assert fmt.age(ts, now=ts + 180) == "2026-01-02 10:20 (3 min ago)"
    assert fmt.age(ts, now=ts + 5) == "2026-01-02 10:20 (5 s ago)"
    assert fmt.age(ts, now=ts + 2 * 86400) == "2026-01-02 10:20 (2 d ago)"
    assert fmt.age(None) == "–"
