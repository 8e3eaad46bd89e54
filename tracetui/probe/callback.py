"""The probe: a ``TrainerCallback`` plus module and autograd hooks that time every phase.

Phase edges in one optimizer step, in the order the HF ``Trainer`` reaches them::

    prev end -> step_begin -> [fwd_start -> fwd_end -> bwd_start -> bwd_end -> sub_end]* ...
             -> fwd_start -> fwd_end -> bwd_start -> bwd_end -> pre_opt -> opt_end -> end

The time up to an edge is charged to that edge's phase (``_PHASE_OF``), so phases tile the step
exactly and add up to its wall time. Sources of the edges: ``on_step_begin``,
``on_substep_end``, ``on_pre_optimizer_step``, ``on_optimizer_step`` and ``on_step_end``
callbacks; forward pre/post hooks on the model (``with_kwargs=True``: TRL passes keyword
arguments); a tensor hook on the model's output for the start of backward; and
``register_post_accumulate_grad_hook`` on the trainable parameters that finish last in backward
for its end. Nothing in torch or the frameworks is patched (the trainer's ``TrainerControl`` is
given a subclass that notes who stops training: :func:`watch_stops`).

What the trainer does between one step's end and the next step's begin (evaluation, saving a
checkpoint, logging: :data:`tracetui.core.phases.BETWEEN`) is its own time, charged to no step: each is
ended by its callback event (``on_evaluate``, ``on_save``, ``on_log``), timed from the edge before
it with the same clock, and carried by the step it followed (``between_ms``); the next step begins
at the last of them. What is left before the next ``on_step_begin`` (the trainer fetches the
step's batches there) is that step's data phase.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any, Callable

from transformers import TrainerCallback, TrainerControl

from ..core.foreign import caller_frame
from ..core.phases import BETWEEN, NAMES, PHASES
from ..events.schema import RUN_SETTINGS, StepRecord, make
from . import quiet
from .settings import read_back
from .timing import Mark, make_clock

#: phase (:mod:`tracetui.core.phases`) charged with the time *up to* an edge of this label
_PHASE_OF = {
    "step_begin": "data", "fwd_start": "data", "fwd_end": "forward", "bwd_start": "other",
    "bwd_end": "backward", "sub_end": "other", "pre_opt": "optimizer", "opt_end": "optimizer",
    "end": "other",
}
assert set(_PHASE_OF.values()) == set(NAMES), "every phase is charged by some edge, and no other"
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
    ``warmup``: steps whose records are flagged ``warmup`` (measured, shown, not counted).
    ``stop_after``: optional function of the list of measured step walls that ends training
    early (adaptive stopping) when it returns a reason (kept in ``stop_reason``); it sets
    ``control.should_training_stop``.
    """

    def __init__(self, emit: Callable[[dict], None], run_id: str, warmup: int = 0,
                 rank: int = 0, stop_after: Callable[[list[float]], str | None] | None = None):
        self.emit = emit
        self.run_id = run_id
        self.warmup = warmup
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
        #: per micro-batch, on its device: what it trained on (:func:`_row_sums`), read back with the loss
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
        #: head starts (:mod:`tracetui.runner.turns`): the run's :class:`~tracetui.runner.turns.Gate`
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
        rows = _row_sums(self._torch, ids, mask, kwargs.get("labels"), kwargs.get("position_ids"))
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
        tensor = _first_grad_tensor(output)
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
            self._take_turn()  # built and ready: no step before this run holds the turn
            self.gate.warming()
        if self.warmup == 0:
            self._quiet_start = quiet.snapshot()  # before the first (measured) step's clock starts

    def _take_turn(self) -> None:
        """Head starts (:mod:`tracetui.runner.turns`): give the turn back once this run's work
        has finished on the device (the next run's steps must not overlap it), wait for it
        again, and restart the step clock: the wait is no step's."""
        self._wait_turn()
        self._restart_clock()

    def _wait_turn(self) -> None:
        footprint = None
        if self.cuda:
            self._torch.cuda.synchronize(self.device)
            footprint = self._torch.cuda.memory_reserved(self.device) / 2**30
        sent = self.gate.take(footprint)
        if sent is not None and hasattr(self.stop_after, "references"):
            # --until-confident: the splits measured before this run, complete now that they ended
            self.stop_after.references = [tuple(r) for r in sent]

    def _restart_clock(self) -> None:
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
        torch = self._torch
        self._finish_learning()
        self._step += 1
        # Queue the loss/token read-back before the end mark, so the end event completing
        # means the copy has landed too.
        values = rows = None
        if self._rows and len(self._rows) == len(self._shapes):
            rows = torch.stack(self._rows)
            rows = rows.to("cpu", non_blocking=True) if self.cuda else rows
        if self._losses or self._tokens:
            parts = [torch.stack(self._losses).sum().reshape(1) if self._losses else None,
                     torch.stack(self._tokens).sum().float().reshape(1) if self._tokens else None]
            dev = self._losses[0].device if self._losses else self._tokens[0].device
            nan = torch.full((1,), float("nan"), device=dev)
            stacked = torch.cat([p if p is not None else nan for p in parts])
            values = stacked.to("cpu", non_blocking=True) if self.cuda else stacked
        peak = None
        if self.cuda:
            peak = torch.cuda.max_memory_allocated(self.device) / 2**30
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            peak = data_peak_gib()
        # the last warm-up step: the machine's picture starts here, inside a step that is not
        # counted (a /proc scan in a measured step would be charged to it); where the run waits
        # for its turn after this step, after the wait instead (and before the clock restarts)
        after_turn = self.gate is not None and self.gate.due(self._step)
        if self._step == self.warmup and not after_turn:
            self._quiet_start = quiet.snapshot()
        with self._lock:
            end = self.clock.mark("end")
            marks = [self._last_end] + self._marks + [end]
            self._marks = []
        self._pending.append(dict(
            step=self._step, marks=marks, values=values, peak=peak, samples=self._samples,
            padded=self._padded_tokens, has_loss=bool(self._losses), has_tokens=bool(self._tokens),
            rows=rows, shapes=self._shapes, t_end=time.time(), between=[],
        ))
        self._after = self._pending[-1]
        self._last_end = end
        self._losses, self._tokens, self._rows, self._shapes = [], [], [], []
        self._samples = self._padded_tokens = 0
        self._resolve(block=False)
        if self.stop_after is not None and self.stop_reason is None:
            if getattr(self.stop_after, "takes_steps", False):
                self.stop_reason = self.stop_after(self._measured_walls, self._measured_steps) or None
            else:
                self.stop_reason = self.stop_after(self._measured_walls) or None
            if self.stop_reason:
                control.should_training_stop = True
        turn = False
        if self.gate is not None:
            turn = self.gate.due(self._step) and not control.should_training_stop and state.global_step < state.max_steps
            if turn:
                self._wait_turn()
        if self._step == self.warmup and after_turn:
            self._quiet_start = quiet.snapshot()
        if turn:
            self._restart_clock()

    def on_train_end(self, args, state, control, **kwargs):
        self._resolve(block=True)
        if self._quiet_start is not None:
            self.load = quiet.between(self._quiet_start, quiet.snapshot())
        if self.gate is not None:
            self.gate.end()

    def trainer_stop(self, state: Any) -> str | None:
        """Why the trainer ended before its planned steps, in words (``stopped by the trainer at
        step 5 of 12: EarlyStoppingCallback set should_training_stop in on_evaluate``), or None:
        it ran them all, or tracetui's own stopping rule ended it (``stop_reason``)."""
        done, planned = int(getattr(state, "global_step", 0) or 0), int(getattr(state, "max_steps", 0) or 0)
        if self.stop_reason or not planned or done >= planned:
            return None
        setter = stopped_by(self._control)
        if setter is not None and setter.get("probe"):
            return None
        if setter is None:
            why = "its training loop ended with no callback setting should_training_stop (the training data ran out)"
        elif setter.get("kind") == "callback":
            why = f"{setter['who']} set should_training_stop in {setter['in']}"
        elif setter.get("kind") == "trainer":
            why = f"the trainer's own loop set should_training_stop ({setter['who']}.{setter['in']})"
        else:
            why = f"{setter['who']} set should_training_stop"
        return f"stopped by the trainer at step {done} of {planned}: {why}"

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
            record = self._record(item)
            if not record.warmup:
                self._measured_walls.append(record.wall_ms)
                self._measured_steps.append((record.step, record.extra.get("fingerprint"), record.wall_ms))
            self.emit(record.to_event(self.run_id))

    def _record(self, item: dict) -> StepRecord:
        marks: list[Mark] = item["marks"]
        phases: dict[str, Any] = {p.name: [] if p.per_micro else 0.0 for p in PHASES}
        for a, b in zip(marks, marks[1:]):
            ms = max(0.0, self.clock.elapsed_ms(a, b))
            phase = _PHASE_OF.get(b.label, "other")
            if isinstance(phases[phase], list):
                phases[phase].append(ms)
            else:
                phases[phase] += ms
        bwd = phases["backward"]
        wall = self.clock.elapsed_ms(marks[0], marks[-1])
        host_ms = (marks[-1].host - marks[0].host) * 1000.0
        between: dict[str, list[float]] = {}
        for kind, a, b in item["between"]:
            between.setdefault(kind, []).append(max(0.0, self.clock.elapsed_ms(a, b)))
        # the last mark is the next step's start: kept (the step's end, or the last work after it)
        self.clock.release(marks[:-1] + [a for _, a, _ in item["between"]])
        loss = tokens = None
        if item["values"] is not None:
            vals = item["values"].tolist()
            loss = vals[0] if item["has_loss"] else None
            tokens = int(vals[1]) if item["has_tokens"] else None
        if loss is None:
            loss = self._logged_loss.pop(item["step"], None)
        extra = {"t_end": item["t_end"]}
        if between:
            extra["between_ms"] = between
        if item["shapes"]:
            extra["micro_shapes"] = item["shapes"]
        if item["rows"] is not None:
            sums = item["rows"].tolist()  # per micro-batch: real tokens, their ids' sum, scored, pairs
            tokens = sum(r[0] for r in sums)
            extra["fingerprint"] = fingerprint(tokens, sum(r[1] for r in sums))
            scored = [r[2] for r in sums]
            extra["scored_tokens"] = sum(scored) if min(scored) >= 0 else None
            extra["token_pairs"] = sum(p if p >= 0 else b * t * t for (b, t), (*_, p) in zip(item["shapes"], sums))
        if tokens is None:
            tokens = item["padded"] or None
        if loss is not None and not math.isfinite(loss):
            extra["loss_finite"] = False  # a log keeps it as null (JSON has no NaN): say so apart
        if self.world > 1 and bwd and not str((self.settings or {}).get("sharding_used", "")).startswith("fsdp"):
            # DDP: only the last micro-batch synchronises (the others run inside no_sync()): the
            # difference to the others estimates the exposed all-reduce time. FSDP communicates
            # in every micro-batch, so no micro-batch is free of it to compare against.
            extra["backward_sync_ms"] = bwd[-1]
            extra["backward_nosync_ms"] = sum(bwd[:-1])
            if len(bwd) > 1:
                rest = sorted(bwd[:-1])
                extra["comm_est_ms"] = max(0.0, bwd[-1] - rest[len(rest) // 2])
        # ``other`` absorbs rounding so the phases add up to the wall time exactly.
        counted = sum(sum(v) if isinstance(v, list) else v for name, v in phases.items() if name != "other")
        phases["other"] = max(0.0, wall - counted)
        return StepRecord(
            step=item["step"], warmup=item["step"] <= self.warmup, wall_ms=wall, host_ms=host_ms,
            phases=phases, loss=loss, tokens=tokens,
            samples=item["samples"] or None, peak_mem_gib=item["peak"], rank=self.rank,
            extra=extra,
        )


class _WatchedControl(TrainerControl):
    """The trainer's ``TrainerControl``, which notes who sets ``should_training_stop`` (the frame
    that assigns it: a callback, the trainer's own loop, or another function) as training is
    stopped: the one way to say which of several callbacks stopped it, whatever event it did it
    in. Given to the one object the trainer passes its callbacks (:func:`watch_stops`); its
    fields, and what the trainer saves of it, are unchanged."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "should_training_stop":
            if not value:
                self.__dict__.pop("_tracetui_stopped_by", None)
            elif not self.__dict__.get(name):
                try:
                    self.__dict__["_tracetui_stopped_by"] = _setter(caller_frame(1))
                except Exception:  # noqa: BLE001 - never break the user's training
                    pass
        object.__setattr__(self, name, value)


def watch_stops(control: Any) -> bool:
    """Have the trainer's control object note who stops training (:class:`_WatchedControl`);
    whether it does (a control object of another class is left as it is)."""
    if type(control) is TrainerControl:
        control.__class__ = _WatchedControl
    if isinstance(control, _WatchedControl):
        control.__dict__.pop("_tracetui_stopped_by", None)  # a new training
        return True
    return False


def stopped_by(control: Any) -> dict | None:
    """Who set ``control.should_training_stop`` in this training (:func:`watch_stops`), or None."""
    return getattr(control, "__dict__", {}).get("_tracetui_stopped_by")


def _setter(frame: Any) -> dict:
    """Who runs in ``frame`` (the one that set the flag) or the frames that called it: the first
    callback (``kind`` callback; ``probe`` where it is tracetui's own), else the trainer (its own
    loop), else the function that set it."""
    first = frame
    trainer = getattr(sys.modules.get("transformers.trainer"), "Trainer", ())
    for _ in range(8):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        name = type(owner).__name__
        if isinstance(owner, TrainerCallback) and name != "CallbackHandler":
            event = frame.f_code.co_name
            while frame.f_back is not None and frame.f_back.f_locals.get("self") is owner:
                frame = frame.f_back  # a helper of the callback's: the event that called it
                event = frame.f_code.co_name
            return {"kind": "callback", "who": name, "in": event, "probe": isinstance(owner, Probe)}
        if trainer and isinstance(owner, trainer):
            return {"kind": "trainer", "who": name, "in": frame.f_code.co_name}
        frame = frame.f_back
    return {"kind": "function", "who": getattr(first.f_code, "co_qualname", first.f_code.co_name)}


def between_schedule(args: Any, state: Any, loader: Any = None) -> dict:
    """When the trainer evaluates, saves and logs between steps (:data:`tracetui.core.phases.BETWEEN`),
    from its arguments, as :func:`tracetui.analysis.between.occurrences` counts them for a run of
    any length: ``every`` N optimizer steps (``ratio``: a fraction of the run's steps, as
    ``eval_steps=0.25``), from step ``delay``, once more at the end where the trainer does that
    (``at_end``), on the first step (``first``); ``epoch``: at each epoch's end, of ``every``
    steps (unknown: absent); ``every`` 0: never. A kind decided as it goes (``save_strategy="best"``)
    is absent."""
    ga = max(1, int(getattr(args, "gradient_accumulation_steps", 1) or 1))
    try:
        per_epoch = math.ceil(len(loader) / ga) if loader is not None else None
    except TypeError:  # a loader without a length (an iterable data set)
        per_epoch = None
    out: dict[str, dict] = {}
    for kind, strategy, raw in (("eval", "eval_strategy", "eval_steps"), ("save", "save_strategy", "save_steps"),
                                ("log", "logging_strategy", "logging_steps")):
        how = str(getattr(getattr(args, strategy, None), "value", getattr(args, strategy, None)) or "no")
        if how == "no":
            out[kind] = {"every": 0}
        elif how == "steps":
            given, every = getattr(args, raw, None), getattr(state, raw, None)
            if not every:
                continue
            entry: dict[str, Any] = {"every": int(every)}
            if isinstance(given, float) and 0 < given < 1:
                entry["ratio"] = given
            if kind == "eval":
                entry.update(delay=int(getattr(args, "eval_delay", 0) or 0), at_end=True)
            elif kind == "save":
                entry["at_end"] = True
            elif getattr(args, "logging_first_step", False):
                entry["first"] = True
            out[kind] = entry
        elif how == "epoch" and per_epoch:
            out[kind] = {"every": per_epoch, "epoch": True}
    return out


def _row_sums(torch: Any, ids: Any, mask: Any, labels: Any, positions: Any) -> Any:
    """What one micro-batch trains on, as four whole numbers left on its device (summed there, read
    back with the step's loss once its end event has completed: no synchronisation): its real tokens
    (the attention mask's sum), the sum of their ids, the positions the loss scores (next-token labels
    that are not -100; -1 without labels) and the query-key pairs attention spans (the sum over
    sequences of their length squared: from the position ids of a padding-free batch, -1 where the
    padded shape gives it). None for inputs that are not a batch of token ids."""
    if torch is None or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        return None
    if isinstance(mask, torch.Tensor) and mask.shape == ids.shape:
        m = mask.to(torch.int64)
        real, id_sum = m.sum(), (ids * m).sum()
    else:
        real, id_sum = ids.new_full((), ids.numel(), dtype=torch.int64), ids.sum(dtype=torch.int64)
    if isinstance(labels, torch.Tensor) and labels.shape == ids.shape:
        scored = (labels[:, 1:] != -100).sum()
    else:
        scored = real.new_full((), -1)
    if mask is None and isinstance(positions, torch.Tensor) and positions.shape == ids.shape:
        pairs = (2 * positions.to(torch.int64) + 1).sum()  # a sequence of n positions 0..n-1 sums to n*n
    else:
        pairs = real.new_full((), -1)
    return torch.stack([real.to(torch.int64), id_sum.to(torch.int64), scored.to(torch.int64), pairs])


def fingerprint(tokens: int, id_sum: int) -> str:
    """The rows an optimizer step trained on, in a few characters: from its real tokens and the sum
    of their ids over all its micro-batches, so the same rows give the same fingerprint however
    they are split into micro-batches, padded or packed into a padding-free row."""
    import hashlib

    return hashlib.blake2b(f"{tokens}:{id_sum}".encode(), digest_size=6).hexdigest()


def reset_data_peak() -> None:
    """Start :func:`data_peak_gib`'s window: reset the kernel's resident high-water mark
    (``/proc/self/clear_refs`` 5; where refused, the window is the process's life)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def data_peak_gib() -> float | None:
    """On the CPU, the process's peak data size (GiB) since :func:`reset_data_peak`: what
    ``--memory-limit`` caps there (``RLIMIT_DATA``). The kernel keeps no peak of the data size,
    but does of the resident size: the resident high-water mark less file-backed pages, plus the
    data that is mapped but not resident. None where ``/proc`` says nothing (not Linux)."""
    try:
        with open("/proc/self/status") as fh:
            kb = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in fh) if v.strip().endswith("kB")}
        peak = kb["VmHWM"] - kb.get("RssFile", 0) - kb.get("RssShmem", 0) + max(0, kb["VmData"] - kb["RssAnon"])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return peak / 2**20


def _first_grad_tensor(output: Any) -> Any:
    """The first output tensor that requires grad: the loss if the model computed it, else
    what the loss is computed from (logits, or TRL's fused ``log_probs``)."""
    import torch

    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    values = output.values() if hasattr(output, "values") else output if isinstance(output, (tuple, list)) else ()
    for v in values:
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return v
    return None

