"""What the trainer will really do, read back after it is built.

A setting left unset is decided by whichever TRL/transformers release is installed (TRL's
``SFTConfig`` turns activation checkpointing on, transformers picks a fused AdamW on recent
torch), and a setting passed may be renamed or ignored. So every run records what its trainer
and model report at ``on_train_begin``, not what was asked for: the table then says what ran.

Everything here reads attributes only; nothing changes the model or the trainer.
"""

from __future__ import annotations

import enum
from typing import Any

from ..core.flops import model_profile
from ..core.foreign import attention_kernel
from .environment import library_versions


def _arg(args: Any, *names: str, default: Any = None) -> Any:
    """The first of ``names`` that ``args`` has (transformers renames settings between releases)."""
    for name in names:
        if hasattr(args, name):
            return getattr(args, name)
    return default


def _checkpointing(model: Any) -> bool | None:
    """Whether the model will recompute activations in backward: the model's own flag (a PEFT
    model hands the attribute through to the base model)."""
    for m in (model, getattr(model, "base_model", None), getattr(getattr(model, "base_model", None), "model", None)):
        if m is None:
            continue
        for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # renamed in 5.2x
            if name in dir(type(m)):
                flag = getattr(m, name, None)
                if isinstance(flag, bool):
                    return flag
    return None


def _lora(model: Any) -> tuple[str | None, float | None, int | None]:
    """LoRA target modules as PEFT resolved them (``all-linear`` becomes module names)."""
    cfgs = getattr(model, "peft_config", None)
    if not isinstance(cfgs, dict) or not cfgs:
        return None, None, None
    cfg = cfgs.get("default") or next(iter(cfgs.values()))
    targets = getattr(cfg, "target_modules", None)
    if isinstance(targets, (set, list, tuple)):
        targets = ",".join(sorted(str(t) for t in targets))
    return (str(targets) if targets is not None else None, getattr(cfg, "lora_dropout", None),
            getattr(cfg, "r", None))


def _precision(args: Any, model: Any) -> str:
    """Mixed precision as the trainer runs it, with the dtype the frozen weights are held in."""
    mode = "bf16" if _arg(args, "bf16", default=False) else "fp16" if _arg(args, "fp16", default=False) else "fp32"
    try:
        dtype = str(next(p for p in model.parameters() if not p.requires_grad).dtype).replace("torch.", "")
    except (StopIteration, AttributeError, TypeError):  # no frozen weights, or a model without parameters()
        dtype = ""
    return f"{mode} (weights {dtype})" if dtype else mode


def _sharding(model: Any, world: int) -> str:
    """How the model is spread over the ranks, from its modules: ``fsdp2 (N units)`` when
    ``fully_shard`` wrapped N modules, ``fsdp1`` for the older wrapper, ``ddp`` when several
    processes each hold the whole model, ``none`` in one process."""
    if model is not None and hasattr(model, "modules"):
        try:
            from torch.distributed.fsdp import FSDPModule  # FSDP2 (torch >= 2.6)
        except ImportError:  # pragma: no cover - older torch
            FSDPModule = ()  # noqa: N806
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel
        except ImportError:  # pragma: no cover - torch without distributed
            FullyShardedDataParallel = ()  # noqa: N806 - the class, where torch has it
        units = sum(1 for m in model.modules() if FSDPModule and isinstance(m, FSDPModule))
        if units:
            return f"fsdp2 ({units} units)"
        if FullyShardedDataParallel and any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
            return "fsdp1"
    return "ddp" if world > 1 else "none"


def comm_volume(model: Any, world: int, grad_accum: int, sharding: str) -> tuple[float | None, str]:
    """What one rank sends per optimizer step (GiB, ring algorithms, as the weights are stored),
    and the pattern, from the parameters' sizes: the analytic side of the communication, which
    holds whatever overlaps it.

    DDP all-reduces the trainable (LoRA) gradients once per step, in the last micro-batch.
    FSDP (full shard, resharded after forward) all-gathers every sharded weight in each
    forward and again in each backward, and reduce-scatters the trainable gradients, in every
    micro-batch: its traffic grows with the accumulation steps, DDP's does not."""
    if world <= 1 or model is None or not hasattr(model, "parameters"):
        return None, ""
    full = trainable = 0
    for p in model.parameters():
        size = p.numel() * p.element_size()  # a DTensor reports its global size
        full += size
        if p.requires_grad:
            trainable += size
    share = (world - 1) / world
    if sharding.startswith("fsdp"):
        per_micro = share * (2 * full + trainable)
        return per_micro * grad_accum / 2**30, ("all-gather of every weight in each forward and backward, "
                                               "reduce-scatter of the LoRA gradients, in every micro-batch")
    return 2 * share * trainable / 2**30, "all-reduce of the LoRA gradients once per step (last micro-batch)"


def _work(model: Any) -> tuple[dict | None, str | None]:
    """The model's profile as a dict, or None and why (:func:`tracetui.core.flops.model_profile`)."""
    if model is None:
        return None, "no model was read back"
    profile, why = model_profile(model)
    return (profile.to_dict(), None) if profile is not None else (None, why)


def _tf32() -> bool | None:
    try:
        import torch

        return bool(torch.backends.cuda.matmul.allow_tf32)
    except (ImportError, AttributeError):  # no torch, or one without the switch: not known
        return None


def read_back(args: Any, model: Any, optimizer: Any = None) -> dict[str, Any]:
    """The settings one run really trains with, from its ``TrainingArguments`` and model."""
    work, work_missing = _work(model)
    config = getattr(model, "config", None)
    targets, dropout, rank = _lora(model)
    opt = _optimizer_name(optimizer)
    compiled = bool(_arg(args, "torch_compile", default=False))
    world = int(_arg(args, "world_size", default=1) or 1)
    sharding = _sharding(model, world)
    comm_gib, comm_pattern = comm_volume(model, world, int(_arg(args, "gradient_accumulation_steps", default=1) or 1),
                                         sharding)
    out: dict[str, Any] = {
        "activation_checkpointing": _checkpointing(model),
        "checkpointing_asked": _arg(args, "activation_checkpointing", "gradient_checkpointing"),
        "checkpointing_kwargs": _arg(args, "activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"),
        "precision_used": _precision(args, model),
        "attn_implementation": attention_kernel(config),
        "optimizer": opt or _arg(args, "optim"),
        "optim_asked": _arg(args, "optim"),
        "loss_type": _arg(args, "loss_type"),
        "dataloader_num_workers": _arg(args, "dataloader_num_workers"),
        "dataloader_pin_memory": _arg(args, "dataloader_pin_memory"),
        "torch_compile": (f"on ({_arg(args, 'torch_compile_mode') or 'default'})" if compiled else "off"),
        "use_liger_kernel": _arg(args, "use_liger_kernel"),
        "padding_free": _arg(args, "padding_free"),
        "packing": _arg(args, "packing"),
        "max_length": _arg(args, "max_length", "max_seq_length"),
        "lora_targets_resolved": targets,
        "lora_dropout_used": dropout,
        "lora_r_used": rank,
        "per_device_train_batch_size": _arg(args, "per_device_train_batch_size"),
        "gradient_accumulation_steps": _arg(args, "gradient_accumulation_steps"),
        "learning_rate": _arg(args, "learning_rate"),
        "lr_scheduler_type": _arg(args, "lr_scheduler_type"),
        "max_grad_norm": _arg(args, "max_grad_norm"),
        "seed": _arg(args, "seed"),
        "sharding_used": sharding,
        "loaded_in_4bit": bool(getattr(model, "is_loaded_in_4bit", False)) if model is not None else None,
        "ddp_find_unused_parameters": _arg(args, "ddp_find_unused_parameters") if sharding == "ddp" else None,
        "comm_gib_per_step": comm_gib,
        "comm_pattern": comm_pattern,
        "versions": " / ".join(f"{k} {v}" for k, v in library_versions().items()),
        # the model's linear layers, for the work each step does (tracetui.core.flops), and whether fp32
        # products ran as TF32 (the peak they are measured against)
        "model_work": work,
        "model_work_missing": work_missing,
        "tf32": _tf32(),
    }
    return _plain(out)


def _optimizer_name(optimizer: Any) -> str | None:
    """The optimizer's class as the trainer built it, with its fused or foreach kernels said."""
    if optimizer is None:
        return None
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the optimizer
    name = type(inner).__name__
    defaults = getattr(inner, "defaults", {}) or {}
    if defaults.get("fused"):
        name += " (fused)"
    elif defaults.get("foreach"):
        name += " (foreach)"
    return name


def _plain(out: dict[str, Any]) -> dict[str, Any]:
    """The read-back settings as plain values an event carries: enums and other objects as their
    plain names, the checkpointing keyword arguments as plain values."""
    for key, value in list(out.items()):
        if isinstance(value, enum.Enum):
            out[key] = value.value
        elif value is not None and not isinstance(value, (bool, int, float, str, list, dict)):
            out[key] = getattr(value, "value", None) or str(value)
    if isinstance(out["checkpointing_kwargs"], dict):
        out["checkpointing_kwargs"] = {str(k): (v if isinstance(v, (bool, int, float, str)) else str(v))
                                       for k, v in out["checkpointing_kwargs"].items()}
    return out


def describe(settings: dict[str, Any]) -> str:
    """One line for the monitor's header: what the trainer really does."""
    if not settings:
        return ""
    ckpt = settings.get("activation_checkpointing")
    parts = [
        "checkpointing " + ("on" if ckpt else "off" if ckpt is False else "?"),
        str(settings.get("precision_used") or "?"),
        f"attn {settings.get('attn_implementation') or '?'}",
        str(settings.get("optimizer") or "?"),
    ]
    if settings.get("loss_type"):
        parts.append(f"loss {settings['loss_type']}")
    if settings.get("torch_compile") not in (None, "off"):
        parts.append(f"compile {settings['torch_compile']}")
    if settings.get("use_liger_kernel"):
        parts.append("liger")
    if settings.get("padding_free"):
        parts.append("padding-free")
    if settings.get("sharding_used") not in (None, "none"):
        parts.append(str(settings["sharding_used"]))
    return " · ".join(parts)
