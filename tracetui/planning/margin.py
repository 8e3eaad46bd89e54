"""How far the search's step-time predictions may be off, and so how much faster than predicted a
split it has not run may turn out: the margin its skips allow (:mod:`tracetui.planning.search`).

A split's step is predicted as accumulation x the time per micro-batch measured at the same
micro-batch elsewhere (a memory probe, another effective batch). Each split the search runs with
such a prediction made before it started is a check: ``(predicted - measured) / measured``. The
margin is the largest of those errors, either way; until the sweep has :data:`OWN_CHECKS` of its
own it is never below :data:`PRIOR_MARGIN`, the largest error of held-out checks. A split is
skipped only when its prediction, made faster by the margin, is still slower than the best
measured split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.knobs import SHORT
from ..core.trial import Trial

#: the largest relative error of the step-time predictions of held-out checks on an H200 (a
#: Llama-3.1-8B shape at 1,024 tokens, against a grid measured separately): the splits the search
#: skipped were predicted within -9% and +7.5% of what they measured
PRIOR_MARGIN = 0.09
PRIOR_SAID = "prior from held-out H200 checks, predicted within -9% and +7.5%"
#: checks of the sweep's own from which their largest error alone is the margin (fewer: not
#: below the prior, since one or two checks say little about the largest error)
OWN_CHECKS = 3


@dataclass
class StepErrors:
    """Each checked split's step time as predicted before it ran and as it measured (ms)."""

    predicted: dict[Trial, tuple[float, str]] = field(default_factory=dict)
    measured: dict[Trial, float] = field(default_factory=dict)

    def expect(self, trial: Trial, ms: float, where: str) -> None:
        """``trial``'s step predicted at ``ms`` (from ``where``'s time per micro-batch) before it runs."""
        self.predicted.setdefault(trial, (ms, where))

    def measure(self, trial: Trial, ms: float) -> None:
        """``trial``'s median step as measured so far (its runs' steps together)."""
        if trial in self.predicted:
            self.measured[trial] = ms

    def errors(self) -> list[tuple[Trial, float]]:
        """(trial, (predicted - measured) / measured) of each checked split, in the order run."""
        return [(t, self.predicted[t][0] / ms - 1) for t, ms in self.measured.items() if ms > 0]

    def margin(self) -> float:
        own = [abs(e) for _t, e in self.errors()]
        if len(own) >= OWN_CHECKS:
            return max(own)
        return max([PRIOR_MARGIN, *own])

    def improved(self, ms: float) -> float:
        """The fastest ``ms`` predicted may turn out to be: faster by the margin."""
        return ms / (1 + self.margin())

    def said(self) -> str:
        """The margin and where it comes from, for a skip's reason and the notes."""
        own = self.errors()
        checks = ", ".join(f"{t.label(SHORT)} {100 * e:+.1f}%" for t, e in own)
        pct = f"margin {100 * self.margin():.1f}%"
        if len(own) >= OWN_CHECKS:
            return f"{pct}: the largest error of this sweep's {len(own)} checks ({checks})"
        if own:
            largest = max(abs(e) for _t, e in own)
            source = (f"this sweep's largest error ({checks})" if largest > PRIOR_MARGIN else
                      f"the {PRIOR_SAID}; this sweep's {len(own)} check(s) within it ({checks})")
            return f"{pct}: {source}"
        return f"{pct}: the {PRIOR_SAID}; no check of this sweep's yet"
