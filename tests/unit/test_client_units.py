from __future__ import annotations

import pytest

from plateau.client.units import parse_duration, parse_quantity


@pytest.mark.parametrize(
    "text,value",
    [
        ("0", 0),
        ("1000", 1000),
        ("512Mi", 512 * 2**20),
        ("10Gi", 10 * 2**30),
        ("1.5Gi", 3 * 2**29),
        ("10G", 10 * 10**9),
        ("100k", 100_000),
        ("1Ki", 1024),
        ("2Ti", 2 * 2**40),
        ("1e3", 1000),
        ("1E", 10**18),
        ("0.5", 1),  # rounded up to a whole byte, as Kubernetes does
        (" 64Mi ", 64 * 2**20),
    ],
)
def test_quantities(text: str, value: int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "10X", "10 Gi", "-5", "10K", "10GiB", "1e3k", "abc"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError, match=r"512Mi|suffix|exponent"):
        parse_quantity(text)


def test_capital_k_hint() -> None:
    with pytest.raises(ValueError, match="did you mean Ki"):
        parse_quantity("10K")


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("30s", 30),
        ("7d", 7 * 86400),
        ("1h30m", 5400),
        ("500ms", 0.5),
        ("2w", 14 * 86400),
        ("90", 90),
        ("1.5", 1.5),
        ("1.5h", 5400),
        ("1d2h3m4s", 93784),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "7 d", "7x", "1h 30m", "-5s", "-1", "inf", "nan", "h1"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration like"):
        parse_duration(text)
