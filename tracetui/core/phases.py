"""The phases of an optimizer step, and what the trainer does between steps, declared once.

The probe charges time to these phases, the step events and summary rows carry them as
``<name>_ms`` fields, the analysis apportions the step among them, and the monitor draws them in
these colours: all from this one tuple, so a phase cannot be added to one part and missed by
another. A phase is added here, with the edge that ends it in the probe's ``_PHASE_OF``
(:mod:`tracetui.probe.callback`, which checks that every phase has one).

:data:`BETWEEN` are the trainer's own work between two optimizer steps (evaluation, saving a
checkpoint, logging): timed apart, never part of a step, so that a step's phases still tile it and
the step statistics and the bound come from the steps alone. A step event carries the time that
followed it in ``between_ms`` (kind -> a list of ms, one per occurrence), the summary rows as
``<name>_n`` and ``<name>_s`` per run; each is ended by the callback event named in ``event``.
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


@dataclass(frozen=True)
class Between:
    """Work the trainer does between optimizer steps, timed as its own time (:data:`BETWEEN`)."""

    name: str
    #: the ``TrainerCallback`` event that ends it
    event: str
    #: one occurrence, and several, in words
    one: str
    many: str
    help: str = ""

    @property
    def count_field(self) -> str:
        """The summary column of how many a run did."""
        return f"{self.name}_n"

    @property
    def seconds_field(self) -> str:
        """The summary column of the seconds they took a run."""
        return f"{self.name}_s"


BETWEEN: tuple[Between, ...] = (
    Between("eval", "on_evaluate", "evaluation", "evaluations", "evaluating on the eval set (eval_strategy)"),
    Between("save", "on_save", "checkpoint saved", "checkpoints saved", "saving a checkpoint (save_strategy)"),
    Between("log", "on_log", "log", "logs", "logging (logging_steps): the loss read back, the loggers called"),
)
BETWEEN_NAMES: tuple[str, ...] = tuple(b.name for b in BETWEEN)
