"""The limits a stopped run goes on with: one record for every way a run is resumed (`ruizn
resume` and `continue`, `Agent.resume`, a fleet's resume order, a rerun's re-drive), so a
new limit is added in one place and never copied by hand between them."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import evolve, frozen

from ruizn.settings import RunSettings


@frozen(kw_only=True)
class Limits:
    """New limits for a run; each None keeps the run's own."""

    max_steps: int | None = None
    """The run's step total (for a plan, always set: resuming.plan_resume decides it)."""
    max_tokens: int | None = None
    """A per-call limit (lets an answer cut at max_tokens go on)."""
    max_cost: float | None = None
    """The run's budget in USD, a total for the whole run."""
    max_context: int | None = None
    """The context limit in tokens (0: off)."""

    def given(self) -> dict[str, int | float]:
        """The limits that are set, by field name, in field order."""
        values = {
            "max_steps": self.max_steps,
            "max_tokens": self.max_tokens,
            "max_cost": self.max_cost,
            "max_context": self.max_context,
        }
        return {name: value for name, value in values.items() if value is not None}

    def over(self, settings: RunSettings) -> RunSettings:
        """`settings` with the limits that are set (their own checks apply: ValueError)."""
        return evolve(
            settings,
            max_steps=settings.max_steps if self.max_steps is None else self.max_steps,
            max_tokens=settings.max_tokens if self.max_tokens is None else self.max_tokens,
            max_cost=settings.max_cost if self.max_cost is None else self.max_cost,
            max_context=settings.max_context if self.max_context is None else self.max_context,
        )

    def summary(self) -> str:
        """The set limits in one line (`max_steps 40, max_cost 3`), "" when none is."""
        return ", ".join(
            f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}"
            for name, value in self.given().items()
        )


__all__: Sequence[str] = ("Limits",)
