"""The probe: a ``TrainerCallback`` plus module and autograd hooks that time every phase.

Phase edges in one optimizer step, in the order the HF ``Trainer`` reaches them::

    prev end -> step_begin -> [fwd_start -> fwd_end -> bwd_start -> bwd_end -> sub_end]* ...
             -> fwd_start -> fwd_end -> bwd_start -> bwd_end -> pre_opt -> opt_end -> end

The time up to an edge is charged to that edge's phase (:data:`tracetui.probe.record.PHASE_OF`), so phases tile the step
exactly and add up to its wall time. Sources of the edges: ``on_step_begin``,
``on_substep_end``, ``on_pre_optimizer_step``, ``on_optimizer_step`` and ``on_step_end``
callbacks; forward pre/post hooks on the model (``with_kwargs=True``: TRL passes keyword
arguments); a tensor hook on the model's output for the start of backward; and
``register_post_accumulate_grad_hook`` on the trainable parameters that finish last in backward
for its end. Nothing in torch or the frameworks is patched (the trainer's ``TrainerControl`` is
given a subclass that notes who stops training: :func:`tracetui.probe.stops.watch_stops`).

What the trainer does between one step's end and the next step's begin (evaluation, saving a
checkpoint, logging: :data:`tracetui.core.phases.BETWEEN`) is its own time, charged to no step: each is
ended by its callback event (``on_evaluate``, ``on_save``, ``on_log``), timed from the edge before
it with the same clock, and carried by the step it followed (``between_ms``); the next step begins
at the last of them. What is left before the next ``on_step_begin`` (the trainer fetches the
step's batches there) is that step's data phase.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from transformers import TrainerCallback

from ..core.phases import BETWEEN
from ..core.warmup import Rule
from ..events.schema import RUN_SETTINGS, make
from . import quiet, turn
from .batch import first_grad_tensor, queue_rows, queue_values, row_sums
from .memory import data_peak_gib, reset_data_peak
from .record import step_record
from .schedule import between_schedule
from .settings import read_back
from .stops import trainer_stop, watch_stops
from .timing import Mark, make_clock

#: the callback event that ends each kind of the trainer's work between steps
_BETWEEN_OF = {b.event: b.name for b in BETWEEN}

#: the TrainerCallback events the probe relies on, and the release that has all of them
REQUIRED_EVENTS = ("on_step_begin", "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end")
NEEDED_TRANSFORMERS = "4.56.2"


def missing_callback_events(callback_cls=None) -> str | None:
    """A one-line message if this transformers lacks a callback event the probe uses."""
    import transformers

    cls = callback_cls or TrainerCallback
    missing = [name for name in REQUIRED_EVENTS if not callable(getattr(cls, name, None))]
    if not missing:
        return None
    return (f"transformers {transformers.__version__} has no TrainerCallback.{missing[0]}, which tracetui's probe "
            f"needs; install transformers {NEEDED_TRANSFORMERS} or newer (pip install -U transformers)")


#: how many of the last parameters to receive a gradient mark the end of backward
_TAIL_PARAMS = 4


class Probe(TrainerCallback):
    """Times each optimizer step and sends a :class:`StepRecord` event per step to ``emit``.

    ``emit`` receives plain event dicts; it must not block (the worker's sink queues them).
    ``warmup``: the steps whose records are flagged ``warmup`` (measured, shown, not counted): a
    count, or ``auto`` (:mod:`tracetui.core.warmup`: until the step times settle, decided as each
    step ends; the step that decides carries ``warmup_steps`` and ``warmup_why``).
    ``stop_after``: optional function of the list of measured step walls that ends training
    early (adaptive stopping) when it returns a reason (kept in ``stop_reason``); it sets
    ``control.should_training_stop``.
    """

    #: who stops training (:mod:`tracetui.probe.stops`): a stop this class's objects set is tracetui's own
    tracetui_probe = True
    #: the run's warm-up, decided step by step (:class:`~tracetui.core.warmup.Rule`)
    rule: Rule
    #: the machine's picture taken at the step before the last (``auto``: where a step settles,
    #: the measured steps begin with it)
    _quiet_prev: dict | None = None

    def __init__(self, emit: Callable[[dict], None], run_id: str, warmup: int | str = 0,
                 rank: int = 0, stop_after: Callable[[list[float]], str | None] | None = None):
        self.emit = emit
        self.run_id = run_id
        self.warmup, self.rule = warmup, Rule(warmup)  # (the rule made again at on_train_begin, with the run's steps)
        self.rank = rank
        self.stop_after = stop_after
        self.stop_reason: str | None = None
        self.clock = None
        self.cuda = False
        self._torch = None
        self._handles: list[Any] = []
        self._tail_handles: list[Any] = []
        self._marks: list[Mark] = []
        self._pending: list[dict] = []
        self._lock = threading.Lock()
        self._state = "idle"
        self._grad_order: list[Any] | None = None  # learning pass: params in the order grads land
        self._tail: set[int] = set()
        self._tail_seen = 0
        self._losses: list[Any] = []
        self._tokens: list[Any] = []
        #: per micro-batch, on its device: what it trained on (:func:`~tracetui.probe.batch.row_sums`), read back with the loss
        self._rows: list[Any] = []
        self._shapes: list[list[int]] = []
        self._padded_tokens = 0
        self._samples = 0
        self._last_end: Mark | None = None
        self._step = 0
        self._measured_walls: list[float] = []
        #: the measured steps as the stopping rule pairs them: (step, fingerprint, wall ms)
        self._measured_steps: list[tuple[int, str | None, float]] = []
        self._logged_loss: dict[int, float] = {}
        self._attached = False
        self.enabled = True
        self.world = 1
        self._model = None
        self._tail_params: list[Any] = []
        self.device = None
        #: what the trainer really runs with (:func:`tracetui.probe.settings.read_back`)
        self.settings: dict[str, Any] = {}
        #: whether ``on_train_begin`` sends the settings itself (TraceCallback sends them after
        #: its own run_started)
        self.announce_settings = True
        #: the machine's CPU picture over the measured steps (:mod:`tracetui.probe.quiet`)
        self.load: dict[str, Any] = {}
        self._quiet_start: dict | None = None
        #: head starts (:mod:`tracetui.runner.turns`): the run's :class:`~tracetui.runner.turns.Gate`,
        #: which says where the probe waits for its turn (:mod:`tracetui.probe.turn`)
        self.gate: Any = None
        #: whether the read-back settings say when the trainer evaluates, saves and logs
        #: (``between_every``: what a projection of the real run counts); a built-in sweep's
        #: trainer is tracetui's own, whose schedule is no one's real run
        self.between_schedule = True
        #: the pending step the trainer's work between steps follows (None inside a step)
        self._after: dict | None = None
        #: an evaluation has begun (its prediction steps or its metrics' log seen)
        self._evaluating = False
        #: the control object the trainer passes its callbacks (who stopped training: :meth:`trainer_stop`)
        self._control: Any = None

    # ---- attaching -----------------------------------------------------------------------
    def attach(self, model: Any) -> None:
        """Install the hooks on ``model`` (the module whose forward the trainer calls)."""
        if self._attached:
            return
        import torch

        self._torch = torch
        params = [p for p in model.parameters() if p.requires_grad]
        device = params[0].device if params else next(model.parameters()).device
        self.device = device
        self.cuda = device.type == "cuda"
        self.clock = make_clock(self.cuda)
        self._model = model
        self._hook_forward()
        # First optimizer step: learn the order in which gradients land, then keep hooks only
        # on the last few (the end of backward), so later steps pay for a handful of hooks.
        self._grad_order = []
        for p in params:
            self._tail_handles.append(p.register_post_accumulate_grad_hook(self._learn_grad))
        self._attached = True

    def _hook_forward(self) -> None:
        self._handles.append(self._model.register_forward_pre_hook(self._fwd_pre, with_kwargs=True))
        self._handles.append(self._model.register_forward_hook(self._fwd_post, with_kwargs=True))

    def _remove_hooks(self) -> None:
        for h in self._handles + self._tail_handles:
            h.remove()
        self._handles.clear()
        self._tail_handles.clear()

    def pause(self) -> None:
        """Remove every hook and ignore callbacks until :meth:`resume` (call between steps).

        Lets a benchmark switch the probe off and on inside one process to measure its cost."""
        if not self.enabled:
            return
        self._remove_hooks()
        self.enabled = False

    def resume(self) -> None:
        if self.enabled or self._model is None:
            return
        self._hook_forward()
        for p in self._tail_params:
            self._tail_handles.append(p.register_post_accumulate_grad_hook(self._tail_grad))
        self._last_end = None  # the step after a pause starts a fresh timeline
        self.enabled = True

    # ---- hooks -----------------------------------------------------------------------------
    # ``_state`` follows one micro-batch: idle -> fwd -> after_fwd -> bwd -> after_bwd.
    def _mark(self, label: str) -> None:
        with self._lock:
            self._marks.append(self.clock.mark(label))

    def _fwd_pre(self, module: Any, args: tuple, kwargs: dict) -> None:
        if not module.training or not self._marks:
            return  # outside an optimizer step (evaluation, generation, set-up)
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and hasattr(ids, "shape") and len(ids.shape) >= 1:
            self._samples += int(ids.shape[0])
            self._padded_tokens += int(ids.numel())
            self._shapes.append([int(ids.shape[0]), int(ids.shape[-1]) if len(ids.shape) > 1 else 1])
        mask = kwargs.get("attention_mask")
        rows = row_sums(self._torch, ids, mask, kwargs.get("labels"), kwargs.get("position_ids"))
        if rows is not None:
            self._rows.append(rows)
        elif mask is not None and hasattr(mask, "sum"):
            self._tokens.append(mask.sum())
        self._state = "fwd"
        self._mark("fwd_start")

    def _fwd_post(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if self._state != "fwd":
            return
        self._state = "after_fwd"
        self._mark("fwd_end")
        tensor = first_grad_tensor(output)
        if tensor is not None:
            tensor.register_hook(self._bwd_begin)

    def _bwd_begin(self, grad: Any) -> None:
        if self._state == "after_fwd":
            self._state = "bwd"
            self._mark("bwd_start")
        return None

    def _learn_grad(self, param: Any) -> None:
        if self._grad_order is not None:
            self._grad_order.append(param)

    def _tail_grad(self, param: Any) -> None:
        if self.world > 1:
            return  # under DDP backward ends when the reducer is done: see add_loss
        self._tail_seen += 1
        if self._tail_seen == len(self._tail) and self._state in ("after_fwd", "bwd"):
            self._state = "after_bwd"
            self._mark("bwd_end")

    def _close_backward(self, label: str) -> None:
        """Mark ``label``; if backward's end was not seen, this edge ends backward."""
        if self._state in ("after_fwd", "bwd"):
            self._mark("bwd_end")
        self._state = "idle"
        self._tail_seen = 0
        self._mark(label)

    def _finish_learning(self) -> None:
        if self._grad_order is None:
            return
        order, self._grad_order = self._grad_order, None
        for h in self._tail_handles:
            h.remove()
        self._tail_handles.clear()
        seen: dict[int, Any] = {}
        for p in order:
            seen.pop(id(p), None)
            seen[id(p)] = p
        tail = list(seen.values())[-_TAIL_PARAMS:]
        self._tail = {id(p) for p in tail}
        self._tail_params = tail
        for p in tail:
            self._tail_handles.append(p.register_post_accumulate_grad_hook(self._tail_grad))

    # ---- callback events -------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None:
            self.attach(model)
        # The rank on this machine: each machine's tracetui sees its own processes, and its
        # first one leads (the global rank is in the run's start event).
        self.rank = getattr(args, "local_process_index", getattr(args, "process_index", self.rank))
        self.world = int(getattr(args, "world_size", 1) or 1)
        # The optimizer exists by now (created before on_train_begin): read back what will run.
        self.settings = read_back(args, model, kwargs.get("optimizer"))
        if self.between_schedule:
            every = between_schedule(args, state, kwargs.get("train_dataloader", getattr(self, "train_loader", None)))
            if every:
                self.settings["between_every"] = every
        self._control = control if watch_stops(control) else None
        self._after, self._evaluating = None, False
        if self.announce_settings:
            self.emit(self.settings_event())
        if self.gate is not None:
            turn.begin(self)
        self.rule = Rule(self.warmup, getattr(state, "max_steps", None) or None)
        if self.rule.count == 0:
            self._quiet_start = quiet.snapshot()  # before the first (measured) step's clock starts

    def device_footprint(self) -> float | None:
        """GiB the process holds on its CUDA device once its queued work there has finished
        (None on the CPU): what a run waiting for its turn says it needs (:mod:`tracetui.probe.turn`)."""
        if not self.cuda:
            return None
        self._torch.cuda.synchronize(self.device)
        return self._torch.cuda.memory_reserved(self.device) / 2**30

    def restart_clock(self) -> None:
        """The next step's time starts now (after a wait for the turn: the wait is no step's)."""
        if self._last_end is not None:
            self._last_end = self.clock.mark("start")

    def settings_event(self) -> dict:
        return make(RUN_SETTINGS, self.run_id, rank=self.rank, settings=self.settings)

    def on_step_begin(self, args, state, control, **kwargs):
        self._after, self._evaluating = None, False
        if not self.enabled or self.clock is None:
            return
        if not self.cuda:
            reset_data_peak()
        if self._last_end is None:
            self._last_end = self.clock.mark("start")
        self._mark("step_begin")

    def on_substep_end(self, args, state, control, **kwargs):
        if self.clock is not None and self._marks:
            self._close_backward("sub_end")

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.clock is not None and self._marks:
            self._close_backward("pre_opt")

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.clock is not None and self._marks:
            self._mark("opt_end")

    def add_loss(self, loss: Any) -> None:
        """Called by a trainer right after ``training_step`` returns, with the micro-batch's
        (already GA-scaled) loss. Under DDP this edge ends backward: it then includes the
        reducer's wait for the gradient all-reduce of the synchronising micro-batch."""
        if self._marks:
            if self.world > 1 and self._state in ("after_fwd", "bwd"):
                self._state = "after_bwd"
                self._mark("bwd_end")
            self._losses.append(loss.detach().float().reshape(()))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs and isinstance(logs["loss"], (int, float)):
            self._logged_loss[state.global_step] = float(logs["loss"])
        if self._after is None or not logs or "train_runtime" in logs:
            return  # inside a step, or the trainer's closing summary once training is done
        if self._evaluating or any(str(k).startswith("eval_") for k in logs):
            self._evaluating = True  # an evaluation's metrics: the evaluation ends at on_evaluate
            return
        self._between("on_log")

    def on_prediction_step(self, args, state, control, **kwargs):
        if self._after is not None:
            self._evaluating = True

    def on_evaluate(self, args, state, control, **kwargs):
        self._between("on_evaluate")
        self._evaluating = False

    def on_save(self, args, state, control, **kwargs):
        self._between("on_save")

    def _between(self, event: str) -> None:
        """The trainer's work between steps that ``event`` ends: timed from the edge before it
        (the step's end, or the work before it), carried by the step it followed, and the next
        step begins after it."""
        item = self._after
        if item is None or not self.enabled or self.clock is None or self._last_end is None:
            return
        mark = self.clock.mark(_BETWEEN_OF[event])
        item["between"].append((mark.label, self._last_end, mark))
        self._last_end = mark

    def on_step_end(self, args, state, control, **kwargs):
        if not self.enabled or self.clock is None or not self._marks:
            return
        self._finish_learning()
        self._step += 1
        self._end_step()
        ended = self.rule.ended_at(self._step)
        due = turn.due(self.gate, ended)
        self._resolve(block=False)
        self._apply_stop_rule(control)
        waits = turn.waits_after(self.gate, ended, control, state)
        if waits:
            turn.wait_turn(self)
        if ended and due:
            self._quiet_start = quiet.snapshot()  # after the wait for the turn, before the clock restarts
        if waits:
            self.restart_clock()

    def _end_step(self) -> None:
        """Mark the step's end, decide whether it is warm-up (:meth:`_decide`) and hold it back,
        pending (:meth:`_resolve`), with what it trained on.

        The loss/token read-back is queued before the end mark, so the end event completing means
        the copy has landed too. The machine's picture starts at the end of the last warm-up step,
        inside it (a /proc scan in a measured step would be charged to it): a fixed warm-up's is
        known beforehand; ``auto`` takes one in every step still undecided, and where a step
        settles (measured), the picture starts at the one before it. Where the run waits for its
        turn after its last warm-up step (head starts), after the wait instead."""
        torch = self._torch
        rows = queue_rows(torch, self._rows, self._shapes, self.cuda)
        values = queue_values(torch, self._losses, self._tokens, self.cuda)
        if self.cuda:
            peak = torch.cuda.max_memory_allocated(self.device) / 2**30
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            peak = data_peak_gib()
        if self.gate is None and self.rule.count is None and (self.rule.auto or self._step == self.rule.limit):
            self._quiet_prev, self._quiet_start = self._quiet_start, quiet.snapshot()
        with self._lock:
            end = self.clock.mark("end")
            marks = [self._last_end] + self._marks + [end]
            self._marks = []
        warm, why = self._decide(marks, peak)
        self._pending.append(dict(
            step=self._step, warmup=warm, why=why, marks=marks, values=values, peak=peak, samples=self._samples,
            padded=self._padded_tokens, has_loss=bool(self._losses), has_tokens=bool(self._tokens),
            rows=rows, shapes=self._shapes, t_end=time.time(), between=[],
        ))
        self._after = self._pending[-1]
        self._last_end = end
        self._losses, self._tokens, self._rows, self._shapes = [], [], [], []
        self._samples = self._padded_tokens = 0

    def _decide(self, marks: list[Mark], peak: float | None) -> tuple[bool, str]:
        """Whether the step that just ended (``marks``) is warm-up, and where this step ends the
        warm-up, why (:class:`~tracetui.core.warmup.Rule`). ``auto`` reads the step's time now: on
        CUDA it waits for the step's work to finish, in warm-up steps only (none is counted; once
        decided, nothing waits)."""
        rule = self.rule
        if rule.count is not None:
            return False, ""
        wall = 0.0
        if rule.auto:
            self.clock.wait(marks[-1])
            wall = self.clock.elapsed_ms(marks[0], marks[-1])
        warm = rule.step(wall, peak, hold=self.gate is not None)
        if rule.count is None:
            return warm, ""
        if rule.auto and not warm and self.gate is None:
            self._quiet_start = self._quiet_prev  # this step is measured: the picture starts before it
        return warm, rule.why

    def _apply_stop_rule(self, control: Any) -> None:
        """Adaptive stopping (``stop_after``): once it gives a reason, training stops."""
        if self.stop_after is None or self.stop_reason is not None:
            return
        if getattr(self.stop_after, "takes_steps", False):
            self.stop_reason = self.stop_after(self._measured_walls, self._measured_steps) or None
        else:
            self.stop_reason = self.stop_after(self._measured_walls) or None
        if self.stop_reason:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self._resolve(block=True)
        if self._quiet_start is not None:
            self.load = quiet.between(self._quiet_start, quiet.snapshot())
        turn.end(self.gate)

    def trainer_stop(self, state: Any) -> str | None:
        """Why the trainer ended before its planned steps, in words, or None
        (:func:`tracetui.probe.stops.trainer_stop`)."""
        return trainer_stop(state, self._control, self.stop_reason)

    # ---- resolution ------------------------------------------------------------------------
    def _resolve(self, block: bool) -> None:
        """Emit finished steps in order. A step is held back at least until the next step
        ends (so a loss logged by ``on_log`` after ``on_step_end`` can join it); on CUDA
        until its end event has completed. ``block`` (end of training only) waits."""
        while self._pending:
            item = self._pending[0]
            last = item["between"][-1][2] if item["between"] else item["marks"][-1]
            if not block and item["step"] >= self._step:
                return
            if not self.clock.ready(last):
                if not block:
                    return
                self.clock.wait(last)
            self._pending.pop(0)
            if item is self._after:
                self._after = None  # (the end of training: nothing more follows it)
            record = step_record(item, self.clock, rank=self.rank, world=self.world,
                                 settings=self.settings, logged_loss=self._logged_loss)
            if not record.warmup:
                self._measured_walls.append(record.wall_ms)
                self._measured_steps.append((record.step, record.extra.get("fingerprint"), record.wall_ms))
            self.emit(record.to_event(self.run_id))

