"""The speed settings a sweep can compare (``--vary NAME=v1,v2``), each declared once.

A knob is a sweep setting (a field of :class:`tracetui.core.config.SweepConfig`, so it can also be
set for a whole sweep) that leaves what training learns the same, or nearly: the split itself,
activation checkpointing, the attention kernel, Liger's kernels, ``torch.compile``, padding-free
batches, the loss's computation, data loading, the optimizer's kernel, and (flagged, never
recommended as equivalent) a 4-bit base model.

One declaration says everything tracetui needs: the values, the trainer arguments each value
means (:meth:`Knob.sft_args`, :meth:`Knob.model_args`: applied to every run, both ways, and
written out as the recommendation's ``SFTConfig`` arguments), what must be installed, whether a
value may change the result, and the flags that set it on a user's script (``tracetui sweep --
python train.py``). Adding a setting to compare is one entry in :data:`KNOBS` plus its field in
``SweepConfig``.

This module imports nothing heavy: the trainer-side parts take the libraries as arguments.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

from .accepted import OPTIMIZERS, SFT_LOSSES, Declared

#: values that mean on/off in --vary, flags and TOML
ON_WORDS = ("1", "true", "yes", "on")
OFF_WORDS = ("0", "false", "no", "off")


def on_off(raw: Any) -> bool:
    """``raw`` (a bool, or one of the on/off words in any case) as a bool, or ValueError."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ON_WORDS or text in OFF_WORDS:
        return text in ON_WORDS
    raise ValueError(f"{raw!r} is not on/off")


@dataclass(frozen=True)
class Knob:
    name: str
    #: in labels: ``4x1 attn=eager``
    short: str
    kind: type
    #: the values a user may choose (None: any value of ``kind`` the trainer accepts)
    values: tuple | None
    #: what the value means for ``SFTConfig`` (name -> value); names the installed TRL does not
    #: know are dropped when applied (and kept in the emitted config only if known)
    sft: Callable[[Any], dict] = lambda v: {}
    #: what the value means for loading the model (``from_pretrained``/``from_config`` kwargs)
    model: Callable[[Any], dict] = lambda v: {}
    #: the flags that set it on a user's ``HfArgumentParser`` script, or None when it cannot be
    #: set from outside
    script: Callable[[Any], list[str]] | None = None
    #: why the script flags may not take (a TRL ``ModelConfig`` field, not every script parses it)
    script_note: str = ""
    #: modules the value needs (module, pip package), for values other than the default
    requires: Callable[[Any], tuple[tuple[str, str], ...]] = lambda v: ()
    needs_gpu: Callable[[Any], bool] = lambda v: False
    #: values whose numerics differ from the rest by design (not rounding): compared and
    #: flagged, never recommended as equivalent unless --allow-result-changes
    changes_result: Callable[[Any], bool] = lambda v: False
    aliases: tuple[str, ...] = ()
    help: str = ""
    extra: dict = field(default_factory=dict)
    #: the value a run really trained with, from its read-back settings
    #: (:func:`tracetui.probe.settings.read_back`); None where they do not say
    read: Callable[[dict], Any] = lambda s: None
    #: where the library that takes the value declares what it accepts (None: ``values``, or any):
    #: checked before anything runs (:func:`tracetui.core.accepted.refusal`)
    accepts: Declared | None = None

    def coerce(self, raw: Any) -> Any:
        """``raw`` (a string from --vary, or a TOML value) as this knob's type, or ValueError."""
        if self.kind is bool:
            return on_off(raw)
        if self.kind is int:
            if isinstance(raw, bool):
                raise ValueError(f"{raw!r} is not a whole number")
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{str(raw)[:40]!r} is not a whole number") from None
            if value < 0:
                raise ValueError(f"{raw!r} is negative")
            return value
        value = str(raw).strip()
        if not value:
            raise ValueError("an empty value")
        if self.values is not None and value not in self.values:
            raise ValueError(f"{value!r} is not one of {', '.join(map(str, self.values))}")
        return value

    def unavailable(self, value: Any, device: str) -> str | None:
        """Why ``value`` cannot run here (before anything starts), or None."""
        if self.needs_gpu(value) and device == "cpu":  # first: a package would not help here
            return f"{self.name}={fmt(value)} needs a CUDA GPU" + (f" ({self.extra['gpu_why']})"
                                                                   if "gpu_why" in self.extra else "")
        for module, package in self.requires(value):
            if importlib.util.find_spec(module) is None:
                return f"{self.name}={fmt(value)} needs the {package} package (pip install {package})"
        return None


def fmt(value: Any) -> str:
    return "on" if value is True else "off" if value is False else str(value)


def _flag(name: str) -> Callable[[Any], list[str]]:
    return lambda v: [f"--{name}", "true" if v is True else "false" if v is False else str(v)]


def _checkpointing(on: bool) -> dict:
    # TRL's SFTConfig turns checkpointing ON when it is left unset, so "off" must be said, under
    # every name the installed release reads (older: gradient_checkpointing; newer adds
    # activation_checkpointing).
    out: dict = {"gradient_checkpointing": bool(on), "activation_checkpointing": bool(on)}
    if on:
        out["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
        out["activation_checkpointing_kwargs"] = {"use_reentrant": False}
    return out


def _sharding(value: str) -> dict:
    # FSDP through the trainer's own support (accelerate underneath): full shard, each decoder
    # layer its own unit (accelerate wraps the model's ``_no_split_modules`` classes), FSDP2.
    # "ddp" says no sharding explicitly: every rank holds the whole model.
    if value == "fsdp":
        return {"fsdp": "full_shard auto_wrap",
                "fsdp_config": {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                "reshard_after_forward": True}}
    # DDP: LoRA uses every trainable parameter in each forward, so DDP need not search the graph
    # for unused ones (the trainer's default turns that search on when checkpointing is off)
    return {"fsdp": "", "ddp_find_unused_parameters": False}


def _bool_of(key: str) -> Callable[[dict], bool | None]:
    return lambda s: None if s.get(key) is None else bool(s[key])


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("activation_checkpointing", "ckpt", bool, (False, True), sft=_checkpointing,
         script=_flag("gradient_checkpointing"), aliases=("gradient_checkpointing", "checkpointing", "ckpt"),
         read=lambda s: s.get("activation_checkpointing"),
         help="recompute activations in backward: less memory, more compute"),
    Knob("attn_implementation", "attn", str, ("sdpa", "eager", "flex_attention", "flash_attention_2",
                                              "flash_attention_3"),
         model=lambda v: {"attn_implementation": v},
         script=_flag("attn_implementation"),
         script_note="a TRL ModelConfig flag: the script must parse ModelConfig",
         requires=lambda v: ((("flash_attn", "flash-attn"),) if v == "flash_attention_2" else
                             (("flash_attn_interface", "flash-attn-3"),) if v == "flash_attention_3" else ()),
         needs_gpu=lambda v: v.startswith("flash_attention"), aliases=("attn", "attention"),
         read=lambda s: s.get("attn_implementation"),
         help="the attention kernel"),
    Knob("liger", "liger", bool, (False, True), sft=lambda v: {"use_liger_kernel": bool(v)},
         script=_flag("use_liger_kernel"), requires=lambda v: (("liger_kernel", "liger-kernel"),) if v else (),
         needs_gpu=lambda v: bool(v), aliases=("use_liger_kernel",),
         read=_bool_of("use_liger_kernel"),
         help="Liger's fused Triton kernels (RMSNorm, RoPE, SwiGLU, cross-entropy)"),
    Knob("torch_compile", "compile", bool, (False, True), sft=lambda v: {"torch_compile": bool(v)},
         script=_flag("torch_compile"), aliases=("compile",),
         read=lambda s: None if s.get("torch_compile") is None else s["torch_compile"] != "off",
         help="torch.compile the model (compile time is measured apart from step time)"),
    Knob("padding_free", "padfree", bool, (False, True), sft=lambda v: {"padding_free": bool(v)},
         script=_flag("padding_free"), aliases=("padfree",),
         read=_bool_of("padding_free"),
         help="flatten each micro-batch into one row without padding (TRL; pays off with rows of "
              "different lengths, needs an attention kernel that takes position ids)"),
    Knob("loss_type", "loss", str, None, sft=lambda v: {"loss_type": v}, script=_flag("loss_type"),
         accepts=SFT_LOSSES,
         changes_result=lambda v: v not in ("nll", "chunked_nll"), aliases=("loss",),
         read=lambda s: s.get("loss_type"),
         help="TRL's loss computation (nll; chunked_nll where the installed TRL has it; dft is a "
              "different objective and is flagged)"),
    Knob("dataloader_workers", "workers", int, None, sft=lambda v: {"dataloader_num_workers": int(v)},
         script=_flag("dataloader_num_workers"), aliases=("dataloader_num_workers", "workers"),
         read=lambda s: s.get("dataloader_num_workers"),
         help="data-loading processes"),
    Knob("pin_memory", "pin", bool, (False, True), sft=lambda v: {"dataloader_pin_memory": bool(v)},
         script=_flag("dataloader_pin_memory"), aliases=("dataloader_pin_memory", "pin"),
         read=_bool_of("dataloader_pin_memory"),
         help="pinned host memory for batches"),
    Knob("optim", "optim", str, None, sft=lambda v: {"optim": v}, script=_flag("optim"), accepts=OPTIMIZERS,
         aliases=("optimizer",), read=lambda s: s.get("optim_asked"),
         help="the optimizer's kernel: adamw_torch_fused, adamw_torch, ..."
                                      " (the same update; other optimizers are flagged by the loss check)"),
    Knob("qlora", "4bit", bool, (False, True), model=lambda v: {"load_in_4bit": True} if v else {},
         script=lambda v: ["--load_in_4bit", "true" if v else "false"],
         script_note="a TRL ModelConfig flag: the script must parse ModelConfig",
         requires=lambda v: (("bitsandbytes", "bitsandbytes"),) if v else (), needs_gpu=lambda v: bool(v),
         changes_result=lambda v: bool(v), aliases=("load_in_4bit", "4bit"),
         read=_bool_of("loaded_in_4bit"),
         help="a 4-bit (NF4) base model: QLoRA; changes the numerics, so it is compared and flagged"),
    Knob("sharding", "shard", str, ("ddp", "fsdp"), sft=_sharding, aliases=("fsdp", "shard"),
         # accelerate shards only on accelerators: on the CPU the trainer would quietly run DDP
         needs_gpu=lambda v: v == "fsdp",
         extra={"gpu_why": "accelerate shards only on accelerators; on the CPU the trainer runs DDP"},
         read=lambda s: None if s.get("sharding_used") is None else "fsdp" if str(s["sharding_used"]).startswith("fsdp") else "ddp",
         help="with --nproc-per-node above 1: ddp (every rank holds the whole model) or fsdp (FSDP2 "
              "full shard, one unit per decoder layer: parameters all-gathered in each forward and "
              "backward, gradients reduce-scattered)"),
)}

#: short names for labels
SHORT = {k.name: k.short for k in KNOBS.values()}

_BY_ALIAS = {a: k.name for k in KNOBS.values() for a in (k.name, k.short, *k.aliases)}


def knob_named(name: str) -> Knob | None:
    return KNOBS.get(_BY_ALIAS.get(name.strip().replace("-", "_"), ""))


def sft_args(values: dict[str, Any], known: set[str] | None = None) -> dict[str, Any]:
    """The ``SFTConfig`` arguments of every knob at ``values`` (knob name -> value), keeping only
    names in ``known`` (the installed ``SFTConfig``'s fields) when given."""
    out: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        if name in values:
            out.update(knob.sft(values[name]))
    if known is not None:
        out = {k: v for k, v in out.items() if k in known}
    return out


def trained_settings(planned: dict[str, Any], settings: dict) -> dict[str, Any]:
    """The varied settings a run really trained with, read back (``settings``: its
    ``run_settings``), for those of ``planned``; where the read-back does not say, the planned
    value stands."""
    out = {}
    for name, value in planned.items():
        knob = KNOBS.get(name)
        seen = knob.read(settings) if knob is not None else None
        out[name] = value if seen is None else seen
    return out


def model_args(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        if name in values:
            out.update(knob.model(values[name]))
    return out


def result_changing(settings: dict[str, Any]) -> list[str]:
    """The settings among ``settings`` that change the result by design, as ``name=value``."""
    return [f"{n}={fmt(v)}" for n, v in settings.items() if n in KNOBS and KNOBS[n].changes_result(v)]


def script_args(settings: dict[str, Any]) -> list[str]:
    """The flags that set ``settings`` on an ``HfArgumentParser`` script."""
    out: list[str] = []
    for name, value in settings.items():
        knob = KNOBS[name]
        if knob.script is None:
            raise ValueError(f"{name} cannot be set on a script from outside")
        out += knob.script(value)
    return out
