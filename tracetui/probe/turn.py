"""Where a probe waits for its turn on the device (head starts: :mod:`tracetui.runner.turns`).

The runner owns the policy: its ``Gate`` (the probe's ``gate``) says after which step a run
gives the turn back, and what the sweep sends with a turn. The probe only waits where it is
told: once its trainer is built (``on_train_begin``), and after the step the gate names. Each
wait lets the run's own work finish on the device first (the next run's steps must not overlap
it), and the step clock restarts after it: the wait is no step's.
"""

from __future__ import annotations

from typing import Any


def take_turn(probe: Any) -> None:
    """Give the turn back, wait for it again, and restart the probe's step clock."""
    wait_turn(probe)
    probe.restart_clock()


def begin(probe: Any) -> None:
    """At ``on_train_begin``: built and ready, no step before this run holds the turn; then say
    that its warm-up steps come (the next run may start)."""
    take_turn(probe)
    probe.gate.warming()


def wait_turn(probe: Any) -> None:
    """Give the turn back once the run's work has finished on the device and wait for it; what
    the sweep sent with the turn (``--until-confident``: the splits measured before this run,
    complete now that they ended) becomes the stopping rule's references."""
    sent = probe.gate.take(probe.device_footprint())
    if sent is not None and hasattr(probe.stop_after, "references"):
        probe.stop_after.references = [tuple(r) for r in sent]


def due(gate: Any, last_warmup: bool) -> bool:
    """Whether the run gives the turn back after the step that just ended: with a gate (None: no
    head starts), after its last warm-up step (``last_warmup``: the probe's warm-up rule decides
    it as the step ends, :class:`tracetui.core.warmup.Rule`)."""
    return gate is not None and last_warmup


def waits_after(gate: Any, last_warmup: bool, control: Any, state: Any) -> bool:
    """Whether the run waits for its turn after the step that just ended: where it gives the turn
    back and training goes on (no wait after the last step, or once training is told to stop)."""
    return due(gate, last_warmup) and not control.should_training_stop and state.global_step < state.max_steps


def end(gate: Any) -> None:
    """No more steps: the others may go on once this process has exited."""
    if gate is not None:
        gate.end()
