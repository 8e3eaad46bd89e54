"""One rank of a data-parallel run, started by torchrun from :class:`~tracetui.runner.script.DdpSweep`.

The HF ``Trainer`` finds torchrun's environment and wraps the model in DDP (NCCL on GPUs, gloo on
CPUs); accumulation micro-batches except the last run inside ``no_sync()``. The probe, as a
``TraceCallback``, reports each rank's steps over the sweep's socket.
"""

from __future__ import annotations

import argparse
import json
import os

from ..callbacks.attach import TraceCallback
from ..core.config import SweepConfig
from .preflight import device_kind
from .worker import build_trainer, cap_memory, resolve_precision, trainer_output_dir


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config-json", required=True)
    p.add_argument("--per_device_train_batch_size", type=int, required=True)
    p.add_argument("--gradient_accumulation_steps", type=int, required=True)
    ns = p.parse_args()

    import torch

    cfg = SweepConfig(**json.loads(ns.config_json))
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = device_kind(cfg, torch.cuda.is_available)
    if device == "cuda":
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    precision, dtype = resolve_precision(cfg.precision, device)
    probe = TraceCallback(warmup=cfg.warmup, quiet=True, config=cfg.to_dict())
    with trainer_output_dir() as out_dir:
        trainer = build_trainer(cfg, ns.per_device_train_batch_size, ns.gradient_accumulation_steps, device,
                                precision, dtype, out_dir, probe=probe)
        if (cfg.sharding == "fsdp") != bool(getattr(trainer, "is_fsdp_enabled", False)):
            # the trainer decides from the accelerator it finds; a trial must be what it says
            raise SystemExit(f"tracetui: sharding={cfg.sharding} was asked, but the trainer will "
                             f"{'not ' if cfg.sharding == 'fsdp' else ''}shard the model here "
                             f"(accelerate {accelerator_kind(trainer)})")
        if cfg.memory_limit is not None:
            cap_memory(cfg.memory_limit, device)
        trainer.train()


def accelerator_kind(trainer) -> str:
    state = getattr(getattr(trainer, "accelerator", None), "state", None)
    kind = getattr(state, "distributed_type", None)
    return f"runs {getattr(kind, 'value', kind)}" if kind is not None else "state unknown"


if __name__ == "__main__":
    main()
