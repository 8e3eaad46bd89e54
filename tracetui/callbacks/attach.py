"""Attach mode: measure an existing TRL/transformers training script.

``TraceCallback`` is the sweep's probe as a callback for the user's own trainer. It sends the
same events over a local UNIX socket to ``tracetui watch`` (:mod:`tracetui.events.sender`: to a
JSONL file when nothing listens). It never raises into training and never blocks it. Its class
derives from transformers' (through the probe's): ``tracetui.TraceCallback`` imports this
module on first use.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from ..analysis import StopRule
from ..core import envvars
from ..core.knobs import SHORT, trained_settings
from ..core.trial import Trial
from ..events.schema import RUN_FINISHED, RUN_STAGE, RUN_STARTED, make
from ..events.sender import SocketSink, script_say
from ..events.sockpath import default_socket_path
from ..probe import apply
from ..probe.callback import Probe, missing_callback_events
from ..probe.environment import environment
from ..probe.gpu import GpuSampler, physical_index


def _run_id() -> str:
    """One id for all ranks of a run: torchrun's ranks share their agent (the parent)."""
    host = socket.gethostname()
    if envvars.value_or(envvars.RUN_ID, say=True):
        return envvars.value_or(envvars.RUN_ID, say=True)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return f"{host}-{os.environ.get('MASTER_PORT', '')}-{os.getppid()}"
    return f"{host}-{os.getpid()}-{time.strftime('%H%M%S')}"


def _local_rank(args) -> int:
    """A trainer's rank as this machine sees it (see Probe.on_train_begin)."""
    return int(getattr(args, "local_process_index", getattr(args, "process_index", 0)))


def _loader_batch(loader) -> int | None:
    """The rows per micro-batch the trainer's data loader really yields (the trainer copies the
    batch size when it is built: a later change of ``trainer.args`` may not reach it)."""
    for size in (getattr(loader, "batch_size", None), getattr(getattr(loader, "batch_sampler", None), "batch_size", None)):
        if isinstance(size, int) and size > 0:
            return size
    return None


def _how_applied() -> dict:
    """How a sweep's plan reached the trainer, and where the script built its arguments
    (:mod:`tracetui.probe.apply`): keys of the run's read-back settings."""
    out: dict = {}
    if apply.APPLIED:
        out["applied"] = {k: dict(v) for k, v in apply.APPLIED.items()}
    if apply.ORIGIN:
        out["args_origin"] = dict(apply.ORIGIN)
    return out


def _varied_from_sweep() -> dict:
    """The trial's varied settings, as ``tracetui sweep`` set them on the script's command line."""
    varied = envvars.value_or(envvars.VARIED, {}, say=True)
    return {str(k): v for k, v in varied.items() if isinstance(v, (str, int, float, bool))} if isinstance(varied, dict) else {}


def _stop_rule_from_env():
    """``tracetui sweep --until-confident``: the stopping rule the sweep hands the script's
    process (``TRACETUI_UNTIL_CONFIDENT=PCT:MIN_STEPS``, ``TRACETUI_REFERENCES``: the earlier
    splits' intervals as JSON)."""
    rule = envvars.value_or(envvars.UNTIL_CONFIDENT, say=True)
    if not rule:
        return None
    refs = envvars.value_or(envvars.REFERENCES, [], say=True)
    try:  # [low, high], or [low, high, steps] where the reference's steps carry row fingerprints
        refs = [(float(r[0]), float(r[1]), [tuple(k) for k in r[2]]) if len(r) == 3 else (float(r[0]), float(r[1]))
                for r in refs if len(r) in (2, 3)] if isinstance(refs, list) else []
    except (TypeError, ValueError, IndexError):
        script_say(f"tracetui: {envvars.REFERENCES} is not a list of [low, high(, steps)] intervals; it is ignored")
        refs = []
    return StopRule(rule[0], rule[1], refs)


def _cuda_ready() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except (ImportError, RuntimeError, OSError):  # no torch, or no CUDA driver it can load
        return False


def _physical_gpu(device) -> int:
    """NVML index of ``device``: CUDA_VISIBLE_DEVICES maps the process's indices."""
    return physical_index(device.index or 0)


#: a sweep's trial (its run id given by the sweep) has measured its training: a script that
#: trains again in the same process (a second stage, a second Trainer) is not pooled into it
_sweep_run_measured = False

#: the probe's callback events that TraceCallback forwards as they are, each guarded
#: (:meth:`TraceCallback._guard`); transformers' ``CallbackHandler`` calls a callback's events by
#: name, so each becomes a method of the class (:func:`_guarded`)
GUARDED_EVENTS = ("on_step_begin", "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step",
                  "on_step_end", "on_log", "on_prediction_step", "on_evaluate", "on_save")


class TraceCallback(Probe):
    """Add to a ``Trainer``/``SFTTrainer``: ``callbacks=[TraceCallback()]``.

    Sends the sweep's events (run started, a step record per optimizer step, GPU samples, run
    finished) to ``tracetui watch`` at ``socket_path`` (default: :func:`default_socket_path`).
    ``warmup``: first steps flagged warm-up. Nothing here raises into training: a failure
    inside the callback is reported once and the callback goes quiet.
    """

    def __init__(self, socket_path: str | None = None, jsonl_path: str | None = None,
                 warmup: int | None = None, run_id: str | None = None, gpu_samples: bool = True,
                 quiet: bool = False, config: dict | None = None):
        self.run_id_base = run_id or _run_id()
        warm = envvars.value_or(envvars.WARMUP, 3, say=True) if warmup is None else warmup
        super().__init__(self._emit, self.run_id_base, warmup=warm, stop_after=_stop_rule_from_env())
        self.announce_settings = False  # sent after run_started, below
        self.socket_path = socket_path or default_socket_path()
        self.jsonl_path = jsonl_path
        self.gpu_samples = gpu_samples
        self.quiet = quiet
        #: the sweep's settings when tracetui built this trainer itself (its data-parallel
        #: ranks): the run's start event then carries them (memory limit, model, data)
        self.sweep_config = config
        self.sink: SocketSink | None = None
        self.sampler = None
        self.failed = False
        #: a training after the one a sweep's trial measures: stopped, not measured
        self.later_training = False
        self._t0 = None

    def _sink(self, rank: int) -> SocketSink:
        """Where this rank's events go: the watcher's socket, else its JSONL file."""
        path = self.jsonl_path or os.path.join(
            "tracetui_runs", "attach", f"{self.run_id_base.replace('/', '_')}-rank{rank}.jsonl")
        return SocketSink(self.socket_path, path, quiet=self.quiet or rank != 0)

    def _emit(self, event: dict) -> None:
        if self.sink is not None:
            self.sink.emit(event)

    def _guard(self, fn, *args, **kwargs):
        if self.failed or self.later_training:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - never break the user's training: said once on its stderr, then quiet
            self.failed = True
            self.pause()
            what = str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
            script_say(f"tracetui: TraceCallback stopped measuring ({what}); training goes on")
            return None

    # -- callback events, each guarded ------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        global _sweep_run_measured
        if os.environ.get(envvars.RUN_ID) and _sweep_run_measured:
            self._guard(self._skip_later_training, args, control)
            return
        self.train_loader = kwargs.get("train_dataloader")  # (its length: the steps of an epoch)
        self._guard(self._begin, args, state, control, model, kwargs.get("optimizer"),
                    kwargs.get("train_dataloader"))
        if os.environ.get(envvars.RUN_ID) and not self.failed:
            _sweep_run_measured = True

    def _skip_later_training(self, args, control) -> None:
        """The script trains again after the training its trial measured: that one stops
        after its first step, and the run says so (a sweep measures one training a run)."""
        self.later_training = True
        control.should_training_stop = True
        if _local_rank(args) != 0:
            return
        sink = self._sink(0)
        sink.emit(make("notice", self.run_id, level="warning",
                       message="the script trained again after its measured training (another "
                               "Trainer.train in the same process): only the first is measured, "
                               "and the later one was stopped after its first step"))
        sink.close()

    def _begin(self, args, state, control, model, optimizer=None, kwargs_loader=None):
        why = missing_callback_events()
        if why:
            raise RuntimeError(why)
        rank = _local_rank(args)
        global_rank = int(getattr(args, "process_index", rank))
        world = int(getattr(args, "world_size", 1))
        self.sink = self._sink(rank)
        Probe.on_train_begin(self, args, state, control, model=model, optimizer=optimizer)
        self.rank = rank
        mb = _loader_batch(kwargs_loader) or int(args.per_device_train_batch_size)
        ga = int(args.gradient_accumulation_steps)
        device = "cuda" if self.cuda else "cpu"
        env = environment(device) if device == "cpu" or _cuda_ready() else {"device": device}
        self._t0 = time.time()
        self.settings.update(_how_applied())
        # what the trainer really trains with, read back: the sweep compares it with its plan
        trial = Trial(mb, ga, world, trained_settings(_varied_from_sweep(), self.settings))
        self._emit(make(RUN_STARTED, self.run_id, label=trial.label(SHORT), **trial.fields(),
                        rank=rank, global_rank=global_rank, pid=os.getpid(), env=env, mode="attach",
                        config=dict(self.sweep_config or {}, steps=int(state.max_steps or 0),
                                    warmup=self.warmup),
                        max_steps=int(state.max_steps or 0)))
        self._emit(self.settings_event())  # the script's own settings, as its trainer has them
        self._emit_start_stages()
        if not self.cuda:
            self._emit(make("notice", self.run_id, level="info",
                            message="running on the CPU; phases timed with the host clock"))
        if self.stop_after is not None and world > 1:
            # Ranks deciding apart would leave some waiting in an all-reduce for ever.
            self.stop_after = None
            self._emit(make("notice", self.run_id, level="warning",
                            message="--until-confident is not applied under data parallel; every step runs"))
        if self.cuda and self.gpu_samples:
            index = _physical_gpu(self.device)
            self.sampler = GpuSampler(self._emit, self.run_id, gpu_index=index,
                                      uuid=env.get("gpu_uuid") or None)
            why = self.sampler.start()
            if why:
                self._emit(make("notice", self.run_id, level="warning", message=why))
                self.sampler = None

    def _emit_start_stages(self) -> None:
        """Where a swept script's start went, told once training begins: the interpreter
        (to the script's first line), the script's own imports, model and data (to its
        Trainer), the trainer's set-up (to training). From the time the sweep started the
        process and the marks tracetui's sitecustomize made in it; nothing outside a sweep."""
        started = envvars.value_or(envvars.STARTED_AT, say=True)
        marks = getattr(sys.modules.get("sitecustomize"), "_TRACETUI_MARKS", None)
        if not started or not isinstance(marks, dict):
            return
        seen: dict[str, float] = {}
        for stage, t in (("running the script", marks.get("interpreter")),
                         ("building the trainer", marks.get("trainer")), ("first step", time.time())):
            if t is None:
                continue
            seen[stage] = round(max(0.0, t - float(started)), 3)
            self._emit(make(RUN_STAGE, self.run_id, stage=stage, elapsed_s=seen[stage], rank=self.rank,
                            stages=dict(seen)))

    def on_train_end(self, args, state, control, **kwargs):
        self._guard(Probe.on_train_end, self, args, state, control, **kwargs)
        try:
            if self.sampler is not None:
                self.sampler.stop()
            if self.sink is not None:
                # ended before its steps by the trainer (a callback, its data), in words
                stop = self._guard(self.trainer_stop, state)
                self.sink.emit(make(RUN_FINISHED, self.run_id, rank=self.rank, steps=int(state.global_step),
                                    train_runtime_s=time.time() - (self._t0 or time.time()),
                                    stopped_early=self.stop_reason is not None or stop is not None,
                                    stop_reason=self.stop_reason, trainer_stop=stop, quiet=self.load))
                self.sink.close()
        except Exception as exc:  # noqa: BLE001 - never break the user's training: said on its stderr
            script_say(f"tracetui: TraceCallback could not finish its run's events ({type(exc).__name__}: {exc})")


def _guarded(name: str):
    """``TraceCallback``'s method for the probe's event ``name``: the probe's own, guarded. Its
    code carries the event's name, as a method written out would (who stopped training is said
    by the event it was set in: :func:`tracetui.probe.stops.stopped_by`)."""
    event = getattr(Probe, name)

    def forward(self, args, state, control, *rest, **kwargs):
        self._guard(event, self, args, state, control, *rest, **kwargs)

    forward.__code__ = forward.__code__.replace(co_name=name, co_qualname=f"TraceCallback.{name}")
    forward.__name__, forward.__qualname__ = name, f"TraceCallback.{name}"
    forward.__doc__ = f"``Probe.{name}``, guarded: a failure in it is said once and the callback goes quiet."
    return forward


for _name in GUARDED_EVENTS:
    setattr(TraceCallback, _name, _guarded(_name))
