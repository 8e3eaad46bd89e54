"""The same LoRA training as a tracetui run, with no tracetui in it: a reference for its figures.

Plain TRL + PEFT written out here (not through tracetui's worker): a preset's published shape with
random weights, random token rows of exactly ``--seq-len`` tokens, LoRA r 16 on all linear layers,
every setting tracetui passes given explicitly (checkpointing both ways), and one timer at
``on_step_end``. Prints one JSON line: the median of the measured steps and what the trainer
really ran with, read from it after it was built.

    python benchmarks/plain_steps.py --model qwen3-1.7b --seq-len 512 --split 4x1 --steps 30 --warmup 5

Under ``torchrun`` it trains data-parallel (``--fsdp``: FSDP2 full shard per decoder layer, as
tracetui's ``sharding=fsdp``); rank 0 prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--split", default="4x1")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--ragged", action="store_true", help="rows of chat-like lengths (tracetui's synthetic-ragged)")
    p.add_argument("--liger", action="store_true", help="use_liger_kernel=True")
    p.add_argument("--fsdp", action="store_true", help="under torchrun: FSDP2 full shard (else DDP)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--hold", action="store_true",
                   help="built, wait at the first step as a head-started tracetui run does: print a line, then "
                        "block (waking ten times a second, as its held GPU sampler) until stdin closes, and exit")
    ns = p.parse_args()
    mb, ga = (int(x) for x in ns.split.split("x"))

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback, set_seed
    from trl import SFTConfig, SFTTrainer

    from tracetui.core.presets import build_config  # the architecture's shape only
    from tracetui.runner.sources import byte_tokenizer

    import os

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda and "LOCAL_RANK" in os.environ:  # torchrun: one GPU per process
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    bf16 = cuda and torch.cuda.is_bf16_supported()
    set_seed(ns.seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(build_config(ns.model),
                                                 dtype=torch.bfloat16 if bf16 else torch.float32)
    model.config.use_cache = False
    gen = torch.Generator().manual_seed(ns.seed)
    rows = torch.randint(3, model.config.vocab_size, (mb * ga * ns.steps, ns.seq_len), generator=gen)
    rows = rows.tolist()
    if ns.ragged:  # the same lengths tracetui's synthetic-ragged draws
        from tracetui.runner.sources import ragged_lengths

        rows = [r[:k] for r, k in zip(rows, ragged_lengths(len(rows), ns.seq_len, ns.seed))]
    data = Dataset.from_dict({"input_ids": rows})
    known = {f.name for f in dataclasses.fields(SFTConfig)}
    ckpt = {n: ns.activation_checkpointing for n in ("activation_checkpointing", "gradient_checkpointing") if n in known}
    if ns.activation_checkpointing:
        ckpt.update({n + "_kwargs": {"use_reentrant": False} for n in list(ckpt)})
    args = SFTConfig(**ckpt, output_dir=tempfile.mkdtemp(), per_device_train_batch_size=mb,
                     gradient_accumulation_steps=ga, max_steps=ns.steps, learning_rate=2e-4, seed=ns.seed,
                     data_seed=ns.seed, bf16=bf16, fp16=False, use_cpu=not cuda, logging_steps=ns.steps,
                     save_strategy="no", report_to="none", disable_tqdm=True, max_length=ns.seq_len,
                     packing=False, dataloader_num_workers=0, lr_scheduler_type="constant",
                     use_liger_kernel=ns.liger,
                     # what tracetui's sharding setting passes: ddp (no unused-parameter search), or fsdp
                     **({"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 2, "reshard_after_forward": True,
                                                                         "auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}
                        if ns.fsdp else {"ddp_find_unused_parameters": False}))

    class Timer(TrainerCallback):
        def __init__(self):
            self.t = [time.perf_counter()]
            self.read = {}

        def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
            self.read = {"checkpointing": bool(getattr(model, "is_gradient_checkpointing", None)),
                         "attn": model.config._attn_implementation,  # noqa: SLF001 - the kernel in use (a plain run: no tracetui)
                         "optimizer": type(getattr(optimizer, "optimizer", optimizer)).__name__,
                         "liger": bool(args.use_liger_kernel),
                         "bf16": args.bf16,
                         "fsdp2_units": sum(1 for m in model.modules() if type(m).__name__.startswith("FSDP")),
                         "world_size": args.world_size}
            self.t = [time.perf_counter()]
            if ns.hold:
                hold()

        def on_step_end(self, args, state, control, **kw):
            self.t.append(time.perf_counter())

    timer = Timer()
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=byte_tokenizer(),
                         peft_config=lora, callbacks=[timer])
    trainer.train()
    steps = [1000 * (b - a) for a, b in zip(timer.t, timer.t[1:])][ns.warmup:]
    if int(os.environ.get("RANK", 0)) != 0:
        return
    print(json.dumps({"split": ns.split, "model": ns.model, "seq_len": ns.seq_len,
                      "activation_checkpointing_asked": ns.activation_checkpointing, "ragged": ns.ragged,
                      "liger_asked": ns.liger, "fsdp_asked": ns.fsdp,
                      "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None, "read_back": timer.read,
                      "steps": len(steps), "median_ms": statistics.median(steps),
                      "p10_ms": sorted(steps)[len(steps) // 10], "p90_ms": sorted(steps)[(9 * len(steps)) // 10]}))


def hold() -> None:
    """Say ready, wait until stdin closes (waking every 0.1 s), and exit without training."""
    import os
    import select
    import sys

    print(json.dumps({"ready": True}), flush=True)
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.1)
        if ready and not sys.stdin.readline():
            os._exit(0)


if __name__ == "__main__":
    main()
