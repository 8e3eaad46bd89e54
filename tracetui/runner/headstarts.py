"""Head starts, as a policy of the sweep's scheduler (:class:`~.sweep.Sweep`): each next run
starts while the one before takes its warm-up steps, and waits, built, for its turn. A grid's
next run is always known; a search's only where it has decided it already (a memory probe's
pair, a split's next repeat): the scheduler's second lane takes what the planner has queued,
and otherwise waits (the planner's ``WAIT``), as it would without head starts.

:mod:`.turns` keeps the turns (which seated run steps now); this module says when head starts
apply at all (:func:`head_starts_apply`), whether the device has room for one more run
(:meth:`HeadStarts.room`, :meth:`HeadStarts.room_to_step`), and which failure of a run that had
company is no verdict on its split, so that it runs again alone (:meth:`HeadStarts.again_alone`).
With head starts on, the scheduler runs two lanes on the one device (:data:`LANES_PER_DEVICE`):
the current run's, and the next run's, which is built early.
"""

from __future__ import annotations

import time
from typing import Callable

from ..core import warmup
from ..core.config import SweepConfig
from ..core.knobs import KNOBS
from ..planning.plan import Planner
from ..planning.search import card_gib
from .turns import CONTEXT_GIB, Turns

#: lanes (threads) the scheduler runs on the one device with head starts: the current run's and
#: the next one's
LANES_PER_DEVICE = 2


def head_starts_apply(cfg: SweepConfig, planner: Planner, lanes: list[int | None], device: str) -> tuple[bool, str]:
    """Whether each next run starts during the current one's warm-up (head starts), and why not.

    On by default (``--no-head-start``) on one device, for the grid and the search (which starts
    early only what it has decided already): torchrun's ranks and a script start themselves,
    ``--no-probe`` runs have no probe to hold a run at its first step, and the next run starts
    only inside the current one's warm-up (``--warmup`` 2 or more)."""
    if not cfg.head_start:
        return False, "not asked for"
    for ruled_out, why in ((len(lanes) > 1 or len(cfg.gpu_list()) > 1, "runs go side by side on several GPUs"),
                           (cfg.world_size > 1, "torchrun starts its own ranks"),
                           (not cfg.probe, "--no-probe runs have no probe to keep the turns"),
                           (warmup.fewest(cfg.warmup) < 2, f"--warmup {cfg.warmup}: a head start needs 2 warm-up steps or more "
                                            "to start the next run in")):
        if ruled_out:
            return False, why
    if runs_to_start(planner, device) < 2:
        return False, "one run"
    return True, ""


def runs_to_start(planner: Planner, device: str) -> int:
    """How many of the planner's runs will start: not skipped, no setting unavailable here; a
    planner that decides as it goes (no preview) is taken to start more than one."""
    preview = planner.preview()
    if preview is None:
        return 2
    return sum(1 for d in preview if not d.skip and not any(KNOBS[n].unavailable(v, device) for n, v in d.trial.settings))


class HeadStarts:
    """The sweep's head starts while it runs: the :class:`~.turns.Turns` coordinator, what the
    device holds (from the runs' own reports), and the runs that run again alone and why.

    ``references(run_id)``: ``--until-confident``'s references for a run getting a turn (None:
    no stopping rule)."""

    def __init__(self, ctx, cfg: SweepConfig, device: str,
                 references: Callable[[str], list[tuple[float, float]]] | None = None):
        self.cfg = cfg
        self.device = device
        self._footprint: float | None = None  # GiB the largest built run held
        self._per_example: float | None = None  # the most GiB a step held per example
        self._micro_batch: dict[str, int] = {}
        self._total_gib: float | None = None
        #: runs that run again alone, and why (:meth:`again_alone`)
        self.again_why: dict[str, str] = {}
        self.turns = Turns(ctx, room=self.room, room_to_step=self.room_to_step, on_go=references)

    def close(self) -> None:
        self.turns.close()

    def starting(self, run_id: str, micro_batch: int) -> None:
        """A run is about to start: its micro-batch sizes its steps' estimate."""
        self._micro_batch[run_id] = micro_batch

    def saw_step(self, run_id: str | None, peak_gib: float) -> None:
        """A step of ``run_id`` held ``peak_gib`` at its peak."""
        mb = self._micro_batch.get(run_id)
        if mb:
            self._per_example = max(self._per_example or 0.0, peak_gib / mb)

    def _step_gib(self, run_id: str, total: float) -> float | None:
        """What ``run_id``'s steps may hold on the device, weights included (GiB): the most a
        step of this sweep has held per example so far, times the run's micro-batch, and a
        quarter more; None before any step was measured."""
        mb = self._micro_batch.get(run_id)
        if self._per_example is None or mb is None:
            return None
        return min(total, 1.25 * self._per_example * mb)

    def _card_total(self) -> float | None:
        """The GPU's memory (GiB), read once: it is asked every few tenths of a second while a
        lane waits to start a run."""
        if self._total_gib is None:
            self._total_gib = card_gib(self.cfg)
        return self._total_gib

    def room(self, current: str, footprint: float | None) -> bool:
        """Whether the device has room for one more run beside ``current``: the free memory of
        its GPU (NVML) against what a built run held (the largest said so far), its CUDA
        context, what the current run's steps may still take (:meth:`_step_gib`; a quarter of
        the card before any step was measured) and a margin. Always on the CPU."""
        if self.device != "cuda":
            return True
        free, total = card_gib(self.cfg, free=True), self._card_total()
        if free is None or total is None:
            return False  # cannot tell: no head start
        if footprint is not None:
            self._footprint = max(self._footprint or 0.0, footprint)
        if self._footprint is None:
            return False
        steps = self._step_gib(current, total)
        need = 1.25 * self._footprint + CONTEXT_GIB + (steps if steps is not None else total / 4)
        return free >= need + 0.05 * total

    def room_to_step(self, run_id: str) -> bool:
        """Whether ``run_id`` (built) may take its warm-up steps while the run before it exits
        and still holds its memory: where its steps' estimate fits in what is free, with a
        margin; always on the CPU. (With ``--until-confident`` too: the references its stopping
        rule needs come with the turn that begins its measured steps, after the run before has
        been reaped.)"""
        if self.device != "cuda":
            return True
        free, total = card_gib(self.cfg, free=True), self._card_total()
        steps = self._step_gib(run_id, total) if total is not None else None
        return free is not None and steps is not None and free >= steps + 0.05 * total

    def again_alone(self, rid: str, event: dict, stepped: bool) -> dict:
        """A head start's failure that is no verdict on its split, said as such; the run then
        runs again alone (the scheduler's :meth:`~.sweep.Sweep._run_alone`). ``stepped``:
        whether the run took a step.

        - ``lost``: built early, beside another run, it waited for its turn when something
          outside killed the fork server (and with it every process forked from it). (A run
          going alone has no seat: never lost. Not judged by time: the time of a death the
          supervisor reads afterwards is not the time it happened.)
        - ``crowded``: out of memory on a GPU while the run before or after it was resident
          beside it, judged by when the run said so (its own event's time). On the CPU a run's
          own cap is what it ran out of; on a GPU the caching allocator says out of memory
          itself: a death by a signal there is no crowding."""
        message = str(event.get("message") or "")
        if (event.get("kind") == "crashed" and "fork server" in message and not stepped
                and self.turns.had_company(rid)):
            self.again_why[rid] = "its fork server was killed before its first step"
            return dict(event, kind="lost", message=f"{message}; it had taken no step, so it runs again alone")
        if (event.get("kind") == "oom" and event.get("rank", 0) == 0 and self.device == "cuda"
                and "killed by" not in message and self.turns.beside(rid, float(event.get("t") or time.time()))):
            self.again_why[rid] = "out of memory beside the next run, built early"
            return dict(event, kind="crowded", message=(
                "out of memory beside the next run, built early (a head start), so run again alone"
                + (f" ({message})" if message else "")))
        return event
