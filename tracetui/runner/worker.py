"""One run (one split) in its own spawned process.

The module imports nothing heavy at top level: the parent pickles only a reference to
:func:`run`, and the child sets ``CUDA_VISIBLE_DEVICES`` before torch is first imported.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import traceback
from typing import Any

from ..analysis import StopRule
from ..core import envvars, warmup
from ..core.config import KNOB_DEFAULTS, SweepConfig, dataset_kind
from ..core.foreign import run_multiprocessing_finalizers
from ..core.knobs import KNOBS, SHORT, model_args, sft_args
from ..core.trial import Trial
from ..events.schema import (
    RUN_FAILED,
    RUN_FINISHED,
    RUN_SETTINGS,
    RUN_STAGE,
    RUN_STARTED,
    WAITING_STAGE,
    StepRecord,
    make,
)
from ..probe import quiet
from ..probe.environment import environment
from ..probe.gpu import GpuSampler
from ..probe.settings import read_back
from . import startup
from .lifetime import release_server, set_parent_death_signal
from .preflight import device_kind
from .runlog import worker_output
from .sink import QueueSink
from .sources import build_dataset, load_model, load_tokenizer
from .turns import Gate
from .failures import Unavailable, classify_failure, first_line, setting_at_fault


class Interrupted(BaseException):
    """SIGTERM from the sweep: stop training and report ``interrupted``.

    A ``BaseException``, as ``KeyboardInterrupt`` is: libraries' ``except Exception`` blocks
    (TRL's lazy imports wrap any failure as ``RuntimeError: Failed to import trl...``) must not
    turn it into an error."""


#: set once SIGTERM arrived: whatever the exception it surfaces as, the run was interrupted
_terminated = False
#: set once ``run`` is inside the block that reports every failure as an event: before that, an
#: ``Interrupted`` raised by the handler would reach the terminal as a traceback
_reporting = False


def _on_sigterm(signum, frame):  # noqa: ARG001
    global _terminated
    _terminated = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the report must not be cut short
    if _reporting:
        raise Interrupted()


def _was_interrupted(exc: BaseException) -> bool:
    chain, e = 0, exc
    while e is not None and chain < 20:
        if isinstance(e, Interrupted):
            return True
        e, chain = e.__cause__ or e.__context__, chain + 1
    return _terminated


def cap_memory(gib: float, device: str) -> None:
    """``--memory-limit``: on a GPU, the CUDA caching allocator's share of the card; on the CPU,
    the worker's data segment (``RLIMIT_DATA``: heap and anonymous mappings, which is where
    torch's CPU tensors live), so an allocation past it fails as out of memory."""
    import torch

    if device.startswith("cuda"):
        index = torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory / 2**30
        torch.cuda.set_per_process_memory_fraction(min(1.0, gib / total), index)
        return
    import resource

    limit = int(gib * 2**30)
    _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def resolve_precision(precision: str, device: str):
    import torch

    if precision == "auto":
        if device.startswith("cuda") and torch.cuda.is_bf16_supported():
            precision = "bf16"
        else:
            precision = "fp32"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
    return precision, dtype


#: what the libraries raise when a setting cannot run here (an attention kernel not built for this
#: device, a quantisation package missing, an option this version refuses): a finished refusal
#: to report as the setting's fault, not an error of tracetui's
SETTING_REFUSED = (ValueError, ImportError, NotImplementedError)


def _thread_lock_for_progress_bars() -> None:
    """tqdm (data set preparation, the trainer) otherwise makes a multiprocessing lock: a named
    semaphore held for this process by tracetui's resource tracker, which a trial that dies by
    a signal (out of memory under --memory-limit) never releases, and tracetui then warns at
    exit of "leaked semaphore objects". A trial's progress bars need only a thread lock."""
    try:
        import threading

        from tqdm import tqdm
    except ImportError:
        return
    tqdm.set_lock(threading.RLock())


def _die_with_tracetui(spec: dict) -> None:
    """First of all: die with tracetui, however it dies (:mod:`.lifetime`); the terminal's
    signals are the sweep's (it sends SIGTERM), and were blocked while this process started."""
    if spec.get("parent_pid"):
        release_server()
        set_parent_death_signal(spec["parent_pid"])
        os.environ[envvars.OWNER_PID] = str(spec.get("owner_pid") or spec["parent_pid"])
    # The sweep decides what Ctrl-C and a terminal hang-up (sent to the whole process group)
    # stop: it sends SIGTERM. It started this process with them blocked (start-up is not ours).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGHUP})
    signal.signal(signal.SIGTERM, _on_sigterm)


def _trial_environment(spec: dict) -> None:
    """The environment variables a trial's libraries and probe read."""
    if spec.get("gpu") is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(spec["gpu"])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ[envvars.TRIAL] = "1"  # the sweep's own processes are not "other" load (probe/quiet.py)
    # nor the next run on its GPU, built early beside this one (a head start: probe/gpu.py)
    if spec.get("head_starts"):
        os.environ[envvars.HEAD_STARTS] = "1"
    _thread_lock_for_progress_bars()


def _gpu_sampler(emit, run_id: str, cfg: SweepConfig, spec: dict, device: str, env: dict):
    """The run's GPU sampler, started (None on the CPU, or where it cannot sample: said)."""
    if device != "cuda":
        emit(make("notice", run_id, level="info", message="running on the CPU; phases timed with the host clock"))
        return None
    sampler = GpuSampler(emit, run_id, hz=cfg.sample_hz,
                         gpu_index=spec["gpu"] if spec.get("gpu") is not None else cfg.gpu_index(),
                         uuid=env.get("gpu_uuid") or None)
    why = sampler.start()
    if why:
        emit(make("notice", run_id, level="warning", message=why))
        return None
    return sampler


def _run_started(run_id: str, trial: Trial, cfg: SweepConfig, spec: dict, precision: str, env: dict) -> dict:
    """The run's ``run_started``: its trial, the config it trains with, where it runs."""
    return make(RUN_STARTED, run_id, label=trial.label(SHORT), **trial.fields(), repeat=spec.get("repeat", 0),
                why=spec.get("why") or "", pid=os.getpid(), rank=0, precision=precision, env=env,
                config={k: v for k, v in cfg.to_dict().items()
                        if k in ("model", "dataset", "seq_len", "steps", "warmup", "lora_r",
                                 "lora_targets", "memory_limit", "seed", "peak_tflops", *KNOBS)},
                gpu=spec.get("gpu"), log_path=spec["log_path"],
                **({"head_start": True} if spec.get("head_starts") and spec.get("head_start") else {}))


def _device(cfg: SweepConfig, spec: dict, stages: "Stages") -> tuple[str, str, Any]:
    """The run's device, made current, and its precision (``stages`` say what is left: forked
    from the fork server, the libraries are imported already)."""
    preloaded = "trl" in sys.modules
    stages.enter("starting the device" if preloaded else "importing torch")
    import torch

    device = device_kind(cfg, torch.cuda.is_available)
    if cfg.device.startswith("cuda:") and spec.get("gpu") is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(cfg.gpu_index())
    if device == "cuda":
        torch.cuda.set_device(0)
    precision, dtype = resolve_precision(cfg.precision, device)
    stages.enter("reading the environment" if preloaded else "importing transformers and TRL")
    return device, precision, dtype


def run(spec: dict, mp_queue: Any) -> None:
    """Process entry point. ``spec``: run_id, config (dict), micro_batch, grad_accum, repeat,
    gpu (index or None), log_path, parent_pid (the sweep's process)."""
    global _reporting
    _die_with_tracetui(spec)
    log, lost_log = worker_output(spec)
    _trial_environment(spec)

    sink = QueueSink(mp_queue)
    run_id = spec["run_id"]
    for said in ([lost_log] if lost_log else []) + startup.PROBLEMS:  # (PROBLEMS: empty unless forked)
        sink.emit(make("notice", run_id, level="warning", message=said))
    cfg = SweepConfig(**spec["config"])
    trial = Trial.from_fields(spec["trial"])
    mb, ga = trial.micro_batch, trial.grad_accum
    stages = Stages(sink.emit, run_id, spec.get("started_at"))
    sampler = None
    code = 0
    try:
        _reporting = True
        if _terminated:  # SIGTERM came while the log and the queue were being set up
            raise Interrupted()
        device, precision, dtype = _device(cfg, spec, stages)
        from ..probe.callback import missing_callback_events

        why = missing_callback_events()
        if why:
            raise RuntimeError(why)
        env = environment(device)
        sink.emit(_run_started(run_id, trial, cfg, spec, precision, env))
        sampler = _gpu_sampler(sink.emit, run_id, cfg, spec, device, env)
        metrics = train(cfg, mb, ga, device, precision, dtype, sink.emit, run_id, spec, stages,
                        hold=sampler.hold if sampler is not None else None)
        sink.emit(make(RUN_FINISHED, run_id, train_runtime_s=metrics.get("train_runtime"),
                       **({"waited_s": metrics["waited_s"]} if "waited_s" in metrics else {}),
                       steps=metrics.get("steps"), stopped_early=metrics.get("stopped_early", False),
                       stop_reason=metrics.get("stop_reason"), trainer_stop=metrics.get("trainer_stop"),
                       quiet=metrics.get("quiet") or {}))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent as an event
        if _was_interrupted(exc):
            sink.emit(make(RUN_FAILED, run_id, kind="interrupted", message="stopped by the sweep"))
            code = 3
        else:
            kind, message = classify_failure(exc, mb, trial.settings_dict)
            traceback.print_exc()
            sink.emit(make(RUN_FAILED, run_id, kind=kind, message=message))
            code = 4 if kind == "oom" else 1
    finally:
        if sampler is not None:
            sampler.stop()
        sink.close(run_id=run_id)
        log.flush()
    # os._exit skips interpreter shutdown (stray non-daemon threads cannot hang the worker), so
    # run multiprocessing's finalizers by hand: they release semaphores that libraries (tqdm's
    # lock, for one) registered, which the resource tracker would otherwise report as leaked.
    run_multiprocessing_finalizers()
    os._exit(code)


class Stages:
    """What the trial's process is doing before its first step, as ``run_stage`` events: each
    stage's start in seconds since the sweep started the process (``started_at``), so a user
    sees where start-up goes."""

    def __init__(self, emit, run_id: str, started_at: float | None = None):
        import time

        self._emit, self.run_id = emit, run_id
        self._now = time.time
        self._t0 = started_at or self._now()
        self.seen: dict[str, float] = {}

    def enter(self, stage: str, at: float | None = None) -> None:
        """``stage`` begins now (or at ``at``, unix seconds)."""
        elapsed = round(max(0.0, (at or self._now()) - self._t0), 3)
        self.seen[stage] = elapsed
        self._emit(make(RUN_STAGE, self.run_id, stage=stage, elapsed_s=elapsed, rank=0, stages=dict(self.seen)))


def _model(cfg, device: str, dtype, knob_values: dict):
    """The model, with the varied settings it is loaded with; one they make it refuse is
    :class:`Unavailable`."""
    try:
        return load_model(cfg, device, dtype, **model_args(knob_values))
    except SETTING_REFUSED as exc:
        if cfg.attn_implementation != KNOB_DEFAULTS["attn_implementation"] or cfg.qlora:
            what = "qlora=on" if cfg.qlora else f"attn_implementation={cfg.attn_implementation}"
            raise Unavailable(f"{what} cannot run here: {first_line(exc)}") from exc
        raise


def _sft_config(cfg, mb: int, ga: int, device: str, precision: str, knob_values: dict, out_dir: str):
    """TRL's ``SFTConfig`` for the run, every speed setting passed; and those settings' own
    arguments. One the trainer refuses is :class:`Unavailable`."""
    import dataclasses

    from trl import SFTConfig

    known = {f.name for f in dataclasses.fields(SFTConfig)}
    extra = sft_args(knob_values, known)
    try:
        return SFTConfig(**extra,
            output_dir=out_dir, per_device_train_batch_size=mb, gradient_accumulation_steps=ga,
            max_steps=cfg.steps, learning_rate=cfg.lr, seed=cfg.seed, data_seed=cfg.seed,
            bf16=precision == "bf16", fp16=precision == "fp16", use_cpu=device == "cpu",
            logging_steps=cfg.steps, save_strategy="no", report_to="none", disable_tqdm=True,
            # Padding-free batches leave truncation to the data (TRL refuses max_length with them):
            # the built-in rows are cut to --seq-len already.
            max_length=None if cfg.padding_free and dataset_kind(cfg.dataset) == "synthetic" else cfg.seq_len,
            dataset_text_field=cfg.text_field, packing=False,
            lr_scheduler_type="constant",
        ), extra
    except (ValueError, TypeError, ImportError) as exc:
        raise setting_at_fault(cfg, exc, extra) from exc


def build_trainer(cfg, mb: int, ga: int, device: str, precision: str, dtype, out_dir: str, probe=None,
                  callbacks=(), stages: "Stages | None" = None):
    """The model, the data and a real TRL ``SFTTrainer`` with LoRA, as a user would set it up.

    Every speed setting tracetui owns (:mod:`tracetui.core.knobs`) is passed explicitly, at its
    default too: TRL's own defaults differ from transformers' (checkpointing), so a setting left
    unset is not "off". A setting this machine cannot run raises :class:`Unavailable`.

    ``out_dir``: the trainer's ``output_dir``, the caller's (:func:`trainer_output_dir`); nothing
    is saved there. ``probe`` (a :class:`~tracetui.probe.callback.Probe`) is added last to the
    callbacks and handed each micro-batch's loss; ``callbacks`` come before it."""
    from peft import LoraConfig
    from transformers import set_seed
    from trl import SFTTrainer

    enter = stages.enter if stages is not None else (lambda _stage: None)
    knob_values = {name: getattr(cfg, name) for name in KNOBS}
    set_seed(cfg.seed)
    tokenizer = load_tokenizer(cfg)
    enter("building the model")
    model = _model(cfg, device, dtype, knob_values)
    enter("preparing data")
    dataset = build_dataset(cfg, model.config.vocab_size, tokenizer)
    enter("building the trainer")
    targets = cfg.lora_targets if cfg.lora_targets == "all-linear" else [
        t.strip() for t in cfg.lora_targets.split(",") if t.strip()]
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM")
    args, extra = _sft_config(cfg, mb, ga, device, precision, knob_values, out_dir)
    class ProbedSFTTrainer(SFTTrainer):
        """Hands each micro-batch's loss (as backpropagated) to the probe: a documented
        override point of ``Trainer``, so the loss is read without a host-device sync."""

        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = super().training_step(model, inputs, num_items_in_batch)
            if probe is not None:
                probe.add_loss(loss)
            return loss

    set_seed(cfg.seed)
    cbs = list(callbacks) + ([probe] if probe is not None else [])
    try:
        trainer = ProbedSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                                   peft_config=lora, callbacks=cbs or None)
    except SETTING_REFUSED as exc:
        raise setting_at_fault(cfg, exc, extra) from exc
    enter("first step")
    return trainer


@contextlib.contextmanager
def trainer_output_dir():
    """A folder for a trainer's ``output_dir`` (:func:`build_trainer`), removed as the block ends,
    however it ends: a run stopped by SIGTERM, or refused its settings, too. (Not the trainer's
    ``args.output_dir`` at the end: where tracetui's probe runs in a script's interpreter, a
    torchrun rank's, it points the trainer at the run's own folder instead, and this one would
    stay in the temporary folder, one a rank a run.)"""
    folder = tempfile.mkdtemp(prefix="tracetui-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def train(cfg, mb: int, ga: int, device: str, precision: str, dtype, emit, run_id: str, spec: dict,
          stages: Stages | None = None, hold=None) -> dict:
    """Train ``cfg.steps`` optimizer steps of one split with the probe (or without: ``--no-probe``).

    With head starts (``spec["turn"]``, :mod:`.turns`): steps only while the run holds the
    turn (``hold`` is told when it waits)."""
    import torch

    from ..probe.callback import Probe

    stop = None
    if cfg.until_confident is not None:
        stop = StopRule(cfg.until_confident, cfg.min_steps, spec.get("references") or [])
    probe = Probe(emit, run_id, warmup=cfg.warmup, stop_after=stop) if cfg.probe else None
    if probe is not None:
        probe.between_schedule = False  # tracetui's own trainer: when it logs is no one's real run
    extra = [] if probe is not None else [_unprobed_steps(emit, run_id, warmup.fixed(cfg.warmup))]
    if probe is not None and spec.get("turn") is not None:
        said = []

        def on_hold(waiting: bool, since: float | None = None) -> None:
            if waiting and not said and stages is not None:
                said.append(True)  # a run built before its turn (a head start) says why it waits
                stages.enter(WAITING_STAGE, at=since)
            if hold is not None:
                hold(waiting)

        probe.gate = Gate(spec["turn"], cfg.warmup, on_hold=on_hold)
    with trainer_output_dir() as out_dir:
        trainer = build_trainer(cfg, mb, ga, device, precision, dtype, out_dir, probe=probe, callbacks=extra,
                                stages=stages)
        if cfg.memory_limit is not None:
            # After the imports and the model are in: the cap is on what training may take in all.
            cap_memory(cfg.memory_limit, device)
        result = trainer.train()
    metrics = dict(result.metrics)
    if probe is not None and probe.gate is not None and metrics.get("train_runtime") is not None:
        # the trainer's clock ran on while the run waited for its turn: training time it is not
        metrics["train_runtime"] = max(0.0, float(metrics["train_runtime"]) - probe.gate.waited)
        metrics["waited_s"] = round(probe.gate.waited, 3)
    metrics["steps"] = trainer.state.global_step
    metrics["stopped_early"] = trainer.state.global_step < cfg.steps
    metrics["stop_reason"] = probe.stop_reason if probe is not None and metrics["stopped_early"] else None
    metrics["trainer_stop"] = probe.trainer_stop(trainer.state) if probe is not None else None
    metrics["quiet"] = (probe or extra[0]).load
    del trainer
    if device == "cuda":
        torch.cuda.empty_cache()
    return metrics


def _unprobed_steps(emit, run_id: str, warmup: int):
    """Step wall times from ``on_step_end`` host clock alone: the baseline for measuring the
    probe's own overhead (no hooks, no events on the device)."""
    import time

    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def __init__(self):
            self.last = None
            self.n = 0
            self.load: dict = {}
            self._quiet_start = None

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            emit(make(RUN_SETTINGS, run_id, rank=0, settings=read_back(args, model, kwargs.get("optimizer"))))
            if warmup == 0:
                self._quiet_start = quiet.snapshot()

        def on_train_end(self, args, state, control, **kwargs):
            if self._quiet_start is not None:
                self.load = quiet.between(self._quiet_start, quiet.snapshot())

        def on_step_begin(self, args, state, control, **kwargs):
            if self.last is None:
                self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self.n + 1 == warmup:  # the last warm-up step (not counted) takes the /proc scan
                self._quiet_start = quiet.snapshot()
            now = time.perf_counter()
            self.n += 1
            wall = (now - self.last) * 1000.0
            self.last = now
            emit(StepRecord(step=self.n, warmup=self.n <= warmup, wall_ms=wall, host_ms=wall,
                            phases={"other": wall}, extra={"unprobed": True}).to_event(run_id))

    return Steps()
