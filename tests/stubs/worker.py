"""A stand-in for tracetui's worker (:func:`tracetui.runner.worker.run`) in runner tests of the
built-in sweep: no torch, no model. It reports one run as the worker does (its start, its steps,
its end) with the step times of :func:`tests.stubs.trainer.step_fields`, and keeps the turns of
head starts as the probe does (:class:`tracetui.runner.turns.Gate`): ready once built, the turn
taken before its first step and again after its warm-up, the end said. Each step takes real
time (``WARM_S`` a warm-up step: room for the next run to be built meanwhile, ``STEP_S`` a
measured one), so that when runs ran is seen; the time it reports is the canned one.
"""

import os
import time

from tracetui.events.schema import RUN_FINISHED, RUN_STARTED, STEP, make
from tracetui.runner.sink import QueueSink
from tracetui.runner.turns import Gate
from tracetui.core.trial import Trial

from .trainer import step_fields

STEP_S, WARM_S = 0.05, 0.5


def run(spec: dict, mp_queue) -> None:
    sink = QueueSink(mp_queue)
    run_id, cfg, trial = spec["run_id"], spec["config"], Trial.from_fields(spec["trial"])
    mb, ga, steps, warmup = trial.micro_batch, trial.grad_accum, cfg["steps"], cfg["warmup"]
    gate = Gate(spec["turn"], warmup) if spec.get("turn") is not None else None
    # a file STUB_TRAINS in the runs folder holding 4x1:1x1: the run planned 4x1 reports (reads
    # back) 1x1, as a trainer that kept its own batch size would (a file, not the environment: the
    # fork server the stub is forked from may have started before the test set anything)
    marker = os.path.join(cfg.get("runs_dir") or ".", "STUB_TRAINS")
    planned, _, trains = (open(marker).read().strip() if os.path.exists(marker) else "").partition(":")
    if trains and trial.split == planned:
        mb, ga = (int(x) for x in trains.split("x"))
        trial = Trial(mb, ga, trial.world_size, trial.settings)
    sink.emit(make(RUN_STARTED, run_id, label=trial.label(), **trial.fields(), repeat=spec.get("repeat", 0),
                   pid=os.getpid(), rank=0, precision="fp32", env={"device": "cpu", "cpu_count": 2},
                   config={"steps": steps, "warmup": warmup},
                   **({"head_start": True} if spec.get("head_start") else {})))
    if gate is not None:
        gate.take()
        gate.warming()
    for step in range(1, steps + 1):
        begun = time.time()
        time.sleep(WARM_S if step <= warmup else STEP_S)  # the step's work
        sink.emit(make(STEP, run_id, step=step, warmup=step <= warmup, t_begin=begun, t_end=time.time(),
                       **step_fields(mb, ga, step)))
        if gate is not None and gate.due(step) and step < steps:
            gate.take()
    if gate is not None:
        gate.end()
    sink.emit(make(RUN_FINISHED, run_id, train_runtime_s=steps * STEP_S, steps=steps, stopped_early=False))
    sink.close(run_id=run_id)
    mp_queue.close()
    mp_queue.join_thread()  # every event on its way to the sweep before the process goes
    os._exit(0)


def flood(spec: dict, mp_queue) -> None:
    """:func:`run` without its turns and without its sleeps: ``config["steps"]`` step events (each
    as :func:`run` reports one) as fast as the sink takes them, then the run's end; for measuring
    how many events a sweep's path carries (``benchmarks/ray_events.py``)."""
    sink = QueueSink(mp_queue)
    run_id, cfg, trial = spec["run_id"], spec["config"], Trial.from_fields(spec["trial"])
    mb, ga, steps, warmup = trial.micro_batch, trial.grad_accum, cfg["steps"], cfg["warmup"]
    sink.emit(make(RUN_STARTED, run_id, label=trial.label(), **trial.fields(), repeat=spec.get("repeat", 0),
                   pid=os.getpid(), rank=0, precision="fp32", env={"device": "cpu", "cpu_count": 2},
                   config={"steps": steps, "warmup": warmup}))
    for step in range(1, steps + 1):
        now = time.time()
        sink.emit(make(STEP, run_id, step=step, warmup=step <= warmup, t_begin=now, t_end=now,
                       **step_fields(mb, ga, step)))
    sink.emit(make(RUN_FINISHED, run_id, train_runtime_s=steps * STEP_S, steps=steps, stopped_early=False))
    sink.close(run_id=run_id)
    mp_queue.close()
    mp_queue.join_thread()
    os._exit(0)


def detach_then_run(spec: dict, mp_queue) -> None:
    """:func:`run`, after detaching two daemons into the runs folder (:mod:`tests.stubs.daemons`)."""
    from .daemons import detach

    detach(spec["config"]["runs_dir"])
    run(spec, mp_queue)


def dies_at_once(spec: dict, mp_queue) -> None:
    """A worker that dies before it has opened its run's log (the real one opens it first), as one
    whose start failed in multiprocessing's hands would: its traceback goes where the fork
    server's output goes."""
    raise RuntimeError(f"{spec['run_id']}: no start (a stand-in's failure)")
