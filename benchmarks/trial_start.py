"""Where a trial's start goes: a trial forked from tracetui's fork server (as a sweep forks it),
profiled from its first line to the beginning of its first step (what comes before, the fork
and handing over the arguments, is the ``asked_at_s`` gap between trials; the probe's hooks
and the event queue are left out).

Each of ``--trials`` trials builds the model, the data and the trainer through tracetui's worker
code (``build_trainer``) and starts ``trainer.train()``; a callback ends it at the first
``on_step_begin``. Prints one JSON line per trial (seconds: CUDA set-up where there is a GPU, the
build, ``train()`` up to the first step), then, for the last trial, the functions that took
longest (cumulative, by cProfile) in the build and in ``train()`` before the first step.

    python benchmarks/trial_start.py --model qwen3-1.7b --seq-len 512 --split 4x1 --trials 3
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time


def _trial(args: dict, conn) -> None:
    import cProfile
    import pstats

    import torch
    from transformers import TrainerCallback

    from tracetui.core.config import SweepConfig
    from tracetui.runner.worker import build_trainer, resolve_precision, trainer_output_dir

    t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() and args["device"] != "cpu" else "cpu"
    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the context, as a trial's first CUDA call makes it
    t1 = time.perf_counter()
    cfg = SweepConfig(model=args["model"], seq_len=args["seq_len"], steps=3, warmup=1,
                      effective_batch=[args["mb"] * args["ga"]])
    precision, dtype = resolve_precision(args["precision"], device)

    class FirstStep(TrainerCallback):
        def on_step_begin(self, *_a, **_k):
            raise KeyboardInterrupt  # out of train(), at the first step's beginning

    build, inner = cProfile.Profile(), cProfile.Profile()
    with trainer_output_dir() as out_dir:
        build.enable()
        trainer = build_trainer(cfg, args["mb"], args["ga"], device, precision, dtype, out_dir, callbacks=[FirstStep()])
        build.disable()
        t2 = time.perf_counter()
        inner.enable()
        try:
            trainer.train()
        except KeyboardInterrupt:
            pass
        inner.disable()
        t3 = time.perf_counter()
    report = []
    for name, prof in (("build_trainer", build), ("train() up to the first step", inner)):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(args["top"])
        report.append(f"== {name}\n" + s.getvalue())
    conn.send({"device": device, "cuda_setup_s": round(t1 - t0, 3), "build_s": round(t2 - t1, 3),
               "train_to_first_step_s": round(t3 - t2, 3), "profile": "\n".join(report)})
    conn.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--split", default="4x1")
    p.add_argument("--precision", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--top", type=int, default=30)
    ns = p.parse_args()
    mb, ga = (int(x) for x in ns.split.split("x"))

    from tracetui.runner.lifetime import forking, trial_context

    if not forking():
        sys.exit("trial_start.py: needs the fork server (Linux, TRACETUI_START unset)")
    t0 = time.perf_counter()
    ctx = trial_context()
    last = None
    for n in range(ns.trials):
        reader, writer = ctx.Pipe(duplex=False)
        asked = time.perf_counter()
        proc = ctx.Process(target=_trial, args=(dict(model=ns.model, seq_len=ns.seq_len, mb=mb, ga=ga,
                                                     precision=ns.precision, device=ns.device, top=ns.top), writer))
        proc.start()
        writer.close()
        last = reader.recv()
        proc.join()
        print(json.dumps({"trial": n + 1, "asked_at_s": round(asked - t0, 2), **{k: v for k, v in last.items() if k != "profile"}}),
              flush=True)
    print(last["profile"])


if __name__ == "__main__":
    main()
