"""The probe's own cost: the same training run with the probe switched on and off in alternating
blocks of steps, inside one process.

Fresh processes differ by far more than the probe costs (the same split gave 167 and 234 ms
median steps in two processes on one H200), so the comparison stays inside one process: after
warm-up, blocks of ``--block`` optimizer steps alternate probe-on / probe-off in an A B B A order.
Each block is timed on the host clock between device synchronisations at its edges (the same for
both kinds of block, outside the probe). Prints the median ms/step of each kind and their ratio,
and the paired ratio over A B B A quartets (in which a slow drift of the host's speed cancels).

    python benchmarks/overhead.py --model qwen3-1.7b --seq-len 512 --split 4x1 --blocks 16 --block 5
    python benchmarks/overhead.py            # tiny preset on the CPU
    python benchmarks/overhead.py --callback # TraceCallback (attach mode, socket sink) instead
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from transformers import TrainerCallback

from tracetui.analysis import median, quantile
from tracetui.core.config import SweepConfig, parse_split
from tracetui.probe.callback import Probe
from tracetui.runner.worker import build_trainer, resolve_precision, trainer_output_dir


#: every probe method that runs on the training path (callbacks, module and autograd hooks)
HOT = ("_fwd_pre", "_fwd_post", "_bwd_begin", "_learn_grad", "_tail_grad", "add_loss", "on_step_begin",
       "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end", "on_log")


def timed(cls):
    """``cls`` with its hot-path methods timed: ``self_s`` accumulates the host time they take.

    On a host-bound step the host time the probe takes is what it adds to the step; this reads
    it directly, at a precision wall-clock comparisons of noisy steps cannot reach."""

    class Timed(cls):
        self_s = 0.0

    for name in HOT:
        orig = getattr(cls, name)

        def wrapper(self, *args, _orig=orig, **kwargs):
            t0 = time.perf_counter()
            try:
                return _orig(self, *args, **kwargs)
            finally:
                self.self_s += time.perf_counter() - t0

        setattr(Timed, name, wrapper)
    return Timed


class BlockToggler(TrainerCallback):
    """Runs before the probe: at the first step of each block, synchronises, stamps the time and
    switches the probe on or off for the block (pattern A B B A ...)."""

    def __init__(self, probe: Probe, warmup: int, block: int, blocks: int, cuda: bool):
        self.probe, self.warmup, self.block, self.blocks, self.cuda = probe, warmup, block, blocks, cuda
        self.stamps: list[tuple[float, bool, float]] = []

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def on_step_begin(self, args, state, control, **kwargs):
        i = state.global_step - self.warmup
        if i < 0 or i % self.block:
            return
        self._sync()
        now = time.perf_counter()
        b = i // self.block
        on = (b % 4) in (0, 3)  # A B B A
        if b < self.blocks:
            if on:
                self.probe.resume()
            else:
                self.probe.pause()
        self.stamps.append((now, on, self.probe.self_s))

    def on_train_end(self, args, state, control, **kwargs):
        self._sync()
        self.stamps.append((time.perf_counter(), None, self.probe.self_s))


def paired_ratio(on_ms: list[float], off_ms: list[float], n: int = 2000) -> tuple[float, float, float]:
    """Geometric mean over A B B A quartets of (A1 + A2) / (B1 + B2), with a bootstrap interval
    over quartets. Within a quartet a linear drift of the host's speed cancels, so this resolves
    far smaller differences than comparing the two pooled medians."""
    import numpy as np

    q = min(len(on_ms), len(off_ms)) // 2
    logs = np.log([(on_ms[2 * i] + on_ms[2 * i + 1]) / (off_ms[2 * i] + off_ms[2 * i + 1]) for i in range(q)])
    rng = np.random.default_rng(3)
    means = logs[rng.integers(0, q, size=(n, q))].mean(axis=1)
    return float(np.exp(logs.mean())), float(np.exp(np.quantile(means, 0.025))), float(np.exp(np.quantile(means, 0.975)))


def main() -> int:
    p = argparse.ArgumentParser(description="probe overhead: on/off blocks inside one training process")
    p.add_argument("--model", default="tiny")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--split", default="4x1")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--block", type=int, default=5, help="optimizer steps per block")
    p.add_argument("--blocks", type=int, default=16, help="number of blocks (a multiple of 4)")
    p.add_argument("--precision", default="auto")
    p.add_argument("--callback", action="store_true", help="measure TraceCallback (attach mode) instead")
    p.add_argument("--json", help="write the block times here")
    ns = p.parse_args()

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision, dtype = resolve_precision(ns.precision, device)
    split = parse_split(ns.split)
    steps = ns.warmup + ns.block * ns.blocks
    cfg = SweepConfig(model=ns.model, seq_len=ns.seq_len, effective_batch=[split.effective_batch],
                      splits=split.label, steps=steps, warmup=ns.warmup, precision=precision)
    events: list[dict] = []
    if ns.callback:
        from tracetui.callbacks.attach import TraceCallback

        probe = timed(TraceCallback)(socket_path="/nonexistent/tracetui.sock", quiet=True)
        probe_core = probe
    else:
        probe = probe_core = timed(Probe)(events.append, "overhead", warmup=ns.warmup)
    toggler = BlockToggler(probe_core, ns.warmup, ns.block, ns.blocks, device == "cuda")
    with trainer_output_dir() as out_dir:
        trainer = build_trainer(cfg, split.micro_batch, split.grad_accum, device, precision, dtype, out_dir,
                                probe=probe, callbacks=[toggler])
        trainer.train()

    on_ms, off_ms, self_ms = [], [], []
    for (t0, on, s0), (t1, _, s1) in zip(toggler.stamps, toggler.stamps[1:]):
        (on_ms if on else off_ms).append((t1 - t0) * 1000.0 / ns.block)
        if on:
            self_ms.append((s1 - s0) * 1000.0 / ns.block)
    ratio = median(on_ms) / median(off_ms)
    from tracetui.analysis import bootstrap_medians, ratio_ci

    lo, hi = ratio_ci(bootstrap_medians(on_ms, seed=1), bootstrap_medians(off_ms, seed=2))
    paired, plo, phi = paired_ratio(on_ms, off_ms)
    own = median(self_ms)
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    what = "TraceCallback" if ns.callback else "probe"
    print(f"{gpu} · {ns.model} · {ns.split} · seq {ns.seq_len} · {precision} · {len(on_ms)}+{len(off_ms)} blocks of {ns.block} steps")
    print(f"{what} on : median {median(on_ms):8.2f} ms/step (p10 {quantile(on_ms, .1):.2f}, p90 {quantile(on_ms, .9):.2f})")
    print(f"{what} off: median {median(off_ms):8.2f} ms/step (p10 {quantile(off_ms, .1):.2f}, p90 {quantile(off_ms, .9):.2f})")
    print(f"wall-clock ratio on/off: {ratio:.4f} ({100 * (ratio - 1):+.2f}%), 95% CI {lo:.3f}-{hi:.3f}: "
          f"the noise of the steps bounds what this comparison can resolve")
    print(f"paired ratio (A B B A quartets, drift cancels): {paired:.4f} ({100 * (paired - 1):+.2f}%), "
          f"95% CI {plo:.4f}-{phi:.4f} over {len(on_ms) // 2} quartets")
    print(f"{what}'s own host time on the training path: {own:.3f} ms/step = {100 * own / median(on_ms):.3f}% "
          f"of the step (ratio {1 + own / median(on_ms):.4f})")
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump({"device": gpu, "model": ns.model, "split": ns.split, "seq_len": ns.seq_len, "what": what,
                       "on_ms_per_step": on_ms, "off_ms_per_step": off_ms, "ratio": ratio,
                       "ratio_ci": [lo, hi], "paired_ratio": paired, "paired_ratio_ci": [plo, phi], "self_ms_per_step": self_ms,
                       "self_fraction": own / median(on_ms)}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
