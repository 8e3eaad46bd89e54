"""The phases of an optimizer step, declared once.

The probe charges time to these phases, the step events and summary rows carry them as
``<name>_ms`` fields, the analysis apportions the step among them, and the monitor draws them in
these colours: all from this one tuple, so a phase cannot be added to one part and missed by
another.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str
    #: short label for the chart legend and the monitor's columns
    short: str
    #: colour as RGB, so the chart (plotext) and its legend (Rich) match exactly
    rgb: tuple[int, int, int]
    #: one value per micro-batch in a step event (a list), else one value per step
    per_micro: bool = False
    help: str = ""

    @property
    def field(self) -> str:
        """The field of step events and summary rows that holds this phase, in ms."""
        return f"{self.name}_ms"


PHASES: tuple[Phase, ...] = (
    Phase("data", "data", (245, 150, 30), help="waiting for and fetching the batch"),
    Phase("forward", "fwd", (70, 130, 240), per_micro=True, help="forward of each micro-batch"),
    Phase("backward", "bwd", (220, 70, 150), per_micro=True, help="backward of each micro-batch"),
    Phase("optimizer", "opt", (80, 180, 80), help="gradient clipping and the optimizer step"),
    Phase("other", "other", (150, 150, 150), help="the rest of the step (callbacks, logging, syncs)"),
)

#: the row/event fields of the phases, in order
FIELDS: tuple[str, ...] = tuple(p.field for p in PHASES)
NAMES: tuple[str, ...] = tuple(p.name for p in PHASES)
