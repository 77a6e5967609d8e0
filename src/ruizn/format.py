"""Human-readable figures, shared by the printer and the `runs`/`show` commands."""

from __future__ import annotations


def human_bytes(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def human_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def tokens(count: int) -> str:
    return f"{count:,}"


def usd(amount: float | None) -> str:
    """A cost in US dollars; None is a cost nobody knows, never shown as $0.00."""
    if amount is None:
        return "cost unknown"
    if amount == 0 or amount >= 0.01:
        return f"${amount:,.2f}"
    if amount >= 0.0001:
        return f"${amount:.4f}"
    return "<$0.0001"


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 step`, `2 steps`, `0 steps`: the number and the noun that agrees with it. `nouns`
    is the plural when it is not noun + "s" ("1 entry", "2 entries")."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:,} {nouns if nouns is not None else noun + 's'}"
