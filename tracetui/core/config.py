"""Sweep configuration: every setting declared once (:func:`setting`, :class:`SweepConfig`), and
what the declaration derives (the splits, the varied settings, the trials).

The settings are read from flags (:mod:`tracetui.core.flags`) and a TOML file
(:mod:`tracetui.core.tomlfile`), each value coerced to its declared type
(:mod:`tracetui.core.coerce`), and checked before anything trains (:mod:`tracetui.core.checks`).
Every user mistake becomes a :class:`ConfigError` whose message names the field, says what is
wrong and how to fix it; the CLI prints it on one line and exits with status 2.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .knobs import KNOBS, fmt, knob_named
from .presets import PRESETS
from .trial import Trial

DATA_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text",
                 ".csv": "csv"}
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
#: built-in data sets: random tokens, every row --seq-len long, or of chat-like lengths
SYNTHETIC = ("synthetic", "synthetic-ragged")


#: ``--until-confident`` given alone: a run's median known to within 5% (95% interval). The
#: verdict's intervals are over runs, and fresh processes of one split differ by more than that
#: (docs/results/README.md), so a tighter median inside one process only costs steps without
#: changing the ranking (benchmarks/replay_until_confident.py compares the two)
UNTIL_CONFIDENT_PCT = 5.0
#: the longest duration a setting may give: a year. Longer is no real stall timeout, and waits
#: far longer overflow the clocks' timeouts (OverflowError in a thread's wait)
MAX_SECONDS = 365 * 24 * 3600.0
#: the longest string a setting may hold (the longest path Linux takes)
MAX_TEXT = 4096


class ConfigError(ValueError):
    """A bad configuration value. ``str()`` is the one-line message shown to the user."""

    def __init__(self, field_name: str, problem: str, fix: str = ""):
        self.field = field_name
        msg = f"{field_name}: {problem}"
        if fix:
            msg += f"; {fix}"
        super().__init__(msg)

    def __reduce__(self):
        # whole across a pipe (the deep checks run in a process forked from the fork server)
        return _config_error, (type(self), self.field, str(self))


def _config_error(cls: type, field_name: str, message: str) -> ConfigError:
    err = cls.__new__(cls)
    ValueError.__init__(err, message)
    err.field = field_name
    return err


def setting(default: Any, help: str, *, kind: Any = None, flag: str | None = None, negatable: bool = False,
            metavar: str | None = None, const: Any = None, show_default: bool = True, append: bool = False,
            low: float | None = None, high: float | None = None, above: float | None = None,
            below: float | None = None, unit: str = "", example: str = "", output: bool = False) -> Any:
    """One sweep setting, declared once: its default, type, range, help and flag. The TOML key,
    the flag, its coercion, its checks and ``--help`` are all derived from this
    (:func:`tracetui.core.flags.add_arguments`, :func:`tracetui.core.coerce.from_mapping`,
    :func:`tracetui.core.checks.check_fields`). ``kind``: the value's
    type (default: the default's); ``flag``: a flag other than ``--name`` (``--no-probe``);
    ``negatable``: also ``--no-name``; ``const``: the value of the flag given without one.
    ``low``/``high``: the least and greatest value allowed, ``above``/``below``: bounds the
    value must be strictly beyond (what the libraries that take it accept, or what is
    plausible); ``unit`` and ``example`` go into the one line that refuses a value. ``output``:
    the value is the path of a file tracetui writes, checked as every output is before anything
    runs (:func:`output_settings`, :func:`tracetui.session.output_paths.check_outputs`)."""
    kind = kind or type(default)
    meta = dict(help=help, kind=kind, flag=flag, negatable=negatable, metavar=metavar, const=const,
                show_default=show_default, nullable=default is None, append=append, low=low, high=high,
                above=above, below=below, unit=unit, example=example, output=output)
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class SweepConfig:
    model: str = setting("tiny", f"preset ({', '.join(PRESETS)}), hub id or local directory")
    dataset: str = setting("synthetic", "synthetic (rows of exactly --seq-len tokens), synthetic-ragged (rows of "
                                        "chat-like lengths up to --seq-len), a hub id, or a .json/.jsonl/.parquet/"
                                        ".txt/.csv file")
    dataset_split: str = setting("train", "split of a hub/file data set")
    text_field: str = setting("text", "column holding the text")
    seq_len: int = setting(256, "tokens per row", low=1, high=1_000_000)
    effective_batch: list[int] = setting([4], "one or more effective batches, comma-separated", kind=list)
    splits: str = setting("auto", "auto (every MICROxACCUM pair) or a list like 1x4,2x2,4x1", show_default=False)
    max_micro_batch: int | None = setting(None, "largest micro-batch that auto may choose", kind=int, low=1, high=65536)
    steps: int = setting(20, "optimizer steps per run", low=1, high=1_000_000)
    #: ``auto`` or a count (:mod:`tracetui.core.warmup`)
    warmup: int | str = setting("auto", "steps measured but not counted: auto (until the step times settle, at least "
                                        "1, at most 10 and always leaving 6 measured) or a fixed count", kind=int,
                                low=0, high=1_000_000, example="auto or 3")
    #: two fresh processes per split by default: a run's steps say nothing about how much runs
    #: of the same split differ between processes (docs/results/README.md), and the intervals
    #: and verdicts rest on the spread between runs (:func:`tracetui.analysis.between_run_spread`)
    repeats: int = setting(2, "fresh-process runs of each split, in the order A B C C B A; intervals and verdicts rest on the "
                              "spread between them (1: intervals cover step noise only)", low=1, high=1000)
    lora_r: int = setting(16, "LoRA rank", low=1, high=65536)
    lora_alpha: int = setting(32, "LoRA alpha", low=1, high=1_000_000)
    lora_dropout: float = setting(0.05, "LoRA dropout", low=0.0, below=1.0, example="0.05")
    lora_targets: str = setting("all-linear", "all-linear or module names, comma-separated")
    precision: str = setting("auto", "auto (bf16 on a GPU that has it, else fp32), bf16, fp16, fp32")
    activation_checkpointing: bool = setting(False, "recompute activations in backward (saves memory; passed "
                                                    "to the trainer both ways)", negatable=True)
    # Speed settings that leave training the same (tracetui.core.knobs): each is passed to the trainer
    # explicitly, at its default too, and can be compared with --vary NAME=v1,v2. Their values are
    # declared in KNOBS alone: the help here and the checks read them from there.
    attn_implementation: str = setting("sdpa", "attention kernel: " + ", ".join(KNOBS["attn_implementation"].values))
    liger: bool = setting(False, "Liger's fused kernels (needs liger-kernel and a GPU)", negatable=True)
    torch_compile: bool = setting(False, "torch.compile the model (compile time shown apart)", negatable=True)
    padding_free: bool = setting(False, "TRL padding-free batches", negatable=True)
    loss_type: str = setting("nll", "TRL loss_type")
    dataloader_workers: int = setting(0, "data-loading processes", low=0, high=1024)
    pin_memory: bool = setting(True, "pinned host memory for batches", negatable=True)
    optim: str = setting("adamw_torch_fused", "optimizer (transformers' name)")
    qlora: bool = setting(False, "4-bit (NF4) base model: QLoRA; changes the numerics (needs bitsandbytes "
                                 "and a GPU)", negatable=True)
    sharding: str = setting("ddp", "with --nproc-per-node above 1: " + ", or ".join(KNOBS["sharding"].values)
                            + " (FSDP2 full shard per decoder layer)")
    vary: list[str] = setting([], f"compare values of a setting: NAME=v1,v2 (repeatable; names: {', '.join(KNOBS)})",
                              kind=list, metavar="NAME=V1,V2", append=True, show_default=False)
    allow_result_changes: bool = setting(False, "let the recommendation be a setting that changes what "
                                                "training computes (QLoRA, a loss that departs)")
    allow_busy: bool = setting(False, "give the verdict and the recommendation even when the machine was busy "
                                      "while it measured (marked as such everywhere); by default they are held back")
    emit_config: str = setting("", "write the recommendation as a TRL config file that `trl sft --config FILE` "
                                   "reads", metavar="FILE.yaml", show_default=False, output=True)
    emit_patch: str = setting("", "with tracetui sweep -- python SCRIPT: write the change that sets the "
                                  "recommendation's values where the script sets them itself (literals in "
                                  "its SFTConfig/TrainingArguments call) as a unified diff: "
                                  "patch -p1 -d SCRIPT_FOLDER -i FILE", metavar="FILE.diff", show_default=False,
                              output=True)
    lr: float = setting(2e-4, "learning rate", above=0.0, example="2e-4")
    #: what numpy's seeding takes (transformers' set_seed seeds numpy too, and refuses any
    #: other seed, in every run)
    seed: int = setting(42, "seed for weights, LoRA init and data order", low=0, high=2**32 - 1)
    device: str = setting("auto", "auto, cpu, cuda or cuda:N")
    #: at most 1 PiB (2**20 GiB): more than any one machine holds, so no real cap is refused, and
    #: well within the byte counts the CPU's cap takes (setrlimit: 2**63 bytes; a larger value
    #: overflows it and fails every run)
    memory_limit: float | None = setting(None, "cap the memory a run may take: CUDA memory on a GPU, the worker's "
                                               "data size on the CPU", kind=float, metavar="GiB", above=0.0,
                                         high=float(2**20), unit="GiB", example="16")
    #: no GPU's dense peak is near a million TFLOP/s: a value past it is a typo
    peak_tflops: float | None = setting(None, "the GPU's dense peak for the precision that runs, to measure MFU "
                                              "against (default: tracetui's table of GPUs)", kind=float,
                                        metavar="TFLOP/s", above=0.0, high=1e6, example="989")
    runs_dir: str = setting("tracetui_runs", "where event logs go")
    sample_hz: float = setting(10.0, "GPU samples per second", above=0.0, high=100.0, example="10")
    probe: bool = setting(True, "train without the probe's hooks (for overhead measurements)", flag="--no-probe",
                          show_default=False)
    until_confident: float | None = setting(
        None, "stop a split once its median step time is known to within PCT%% (default 5), or once its "
              "interval is clear of every split measured before it (cheapest split first); --steps is then "
              "the most steps a split may take", kind=float, metavar="PCT", const=UNTIL_CONFIDENT_PCT,
        above=0.0, below=100.0, example="5 (stop once the median is known to within 5%)")
    min_steps: int = setting(10, "measured steps before --until-confident may stop", low=2, high=1_000_000,
                             example="10")
    search: bool = setting(False, "search for the fastest split rather than run every one: memory probes, the "
                                  "largest micro-batch predicted to fit, its neighbours (the default above 6 runs)")
    grid: bool = setting(False, "run every split (the reference the search is checked against)")
    run_unfit: bool = setting(False, "with the search: also run trials predicted not to fit in memory, the largest "
                                     "first; one that runs out of memory bounds the search")
    gpus: str = setting("", "run different splits at the same time, one run per GPU", metavar="0,1,...",
                        show_default=False)
    ray: str = setting("", "run every trial as Ray work, placed on the nodes of the Ray cluster at ADDRESS (auto: the "
                           "one this machine belongs to), or given alone on a Ray started for this command "
                           "(needs the ray extra)", metavar="ADDRESS", const="local", show_default=False)
    nproc_per_node: int = setting(1, "launch each run with torchrun as DDP over N processes; a split is then "
                                     "MICRO x ACCUM x world", metavar="N", low=1, high=1024)
    nnodes: int = setting(1, "torchrun: number of machines", low=1, high=65536)
    node_rank: int = setting(0, "torchrun: this machine's rank", low=0, high=65535)
    rdzv_endpoint: str = setting("", "torchrun: rendezvous endpoint", metavar="HOST:PORT", show_default=False)
    head_start: bool = setting(True, "start each next run (of a grid; of a search, where it has decided it "
                                     "already) while the one before takes its warm-up steps; built, it waits "
                                     "for its turn (never a start beside a measured step): a sweep pays about "
                                     "one run's start", negatable=True)
    stall_timeout: float | None = setting(
        None, "stop a run as stalled after SECONDS without progress (default: 10x its median step, at least "
              "60 s; before its first step at least 600 s)", kind=float, metavar="SECONDS", above=0.0,
        high=MAX_SECONDS, unit="seconds", example="300")

    # ---- derived -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def gpu_index(self) -> int:
        """The GPU that ``--device`` names (``cuda:N``), else the first."""
        return int(self.device[5:]) if self.device.startswith("cuda:") else 0

    def gpu_list(self) -> list[int]:
        return [int(g) for g in self.gpus.split(",") if g.strip()] if self.gpus.strip() else []

    def split_list(self) -> list[Trial]:
        """Every split to run, in the order given (``auto`` = all divisor pairs, smallest
        micro-batch first), for every effective batch. Under data parallelism a split is per
        rank: micro-batch x accumulation x world size makes the (global) effective batch."""
        out: list[Trial] = []
        ws = self.world_size
        if self.splits == "auto":
            for eb in self.effective_batch:
                per_rank = eb // ws if eb % ws == 0 else 0
                for mb in range(1, per_rank + 1):
                    if per_rank % mb == 0 and (self.max_micro_batch is None or mb <= self.max_micro_batch):
                        out.append(Trial(mb, per_rank // mb, ws))
        else:
            out = [Trial(s.micro_batch, s.grad_accum, ws) for s in
                   (parse_split(t) for t in self.splits.split(",") if t.strip())]
        return out

    def varied(self) -> dict[str, list[Any]]:
        """``--vary`` as knob name -> the values to compare, checked (:class:`ConfigError`)."""
        return parse_vary(self.vary)

    def trial_list(self) -> list[Trial]:
        """Every trial: each split crossed with every combination of the varied settings."""
        varied = self.varied()
        combos = [tuple(zip(varied, values)) for values in itertools.product(*varied.values())] or [()]
        return [t.with_settings(c) for t in self.split_list() for c in combos]

    def for_trial(self, trial: Trial) -> "SweepConfig":
        """This config with ``trial``'s varied settings applied (what its run trains with)."""
        return replace(self, **trial.settings_dict, vary=[])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def output_settings() -> list[tuple[str, str]]:
    """``(setting, flag)`` of every setting declared an output (``setting(..., output=True)``):
    each is refused before anything runs where it cannot be written as a whole regular file
    (:func:`tracetui.session.output_paths.check_outputs`)."""
    return [(f.name, f.metadata["flag"] or "--" + f.name.replace("_", "-")) for f in fields(SweepConfig)
            if f.metadata.get("output")]


#: each speed setting's default: what a setting left alone is
KNOB_DEFAULTS: dict[str, Any] = {name: getattr(SweepConfig(), name) for name in KNOBS}


def parse_vary(items: list[str]) -> dict[str, list[Any]]:
    """``["attn=sdpa,eager", ...]`` as knob name -> values, in the order given."""
    out: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = str(item).partition("=")
        knob = knob_named(name)
        if not sep or knob is None:
            raise ConfigError("--vary", f"{item!r} is not NAME=V1,V2 with a setting tracetui can vary",
                              f"use one of {', '.join(KNOBS)}, e.g. --vary attn_implementation=sdpa,eager")
        if knob.name in out:
            raise ConfigError("--vary", f"{knob.name} is varied twice", "give its values once, comma-separated")
        quote = next((q for q in "\"'" if q in values), None)
        if quote:  # (no value of any setting holds a comma or a quote: nothing to quote)
            raise ConfigError("--vary", f"{shown(item)} holds a quote ({quote}), and values are not quoted",
                              f"separate the values by commas alone, e.g. --vary {knob.name}="
                              + ",".join(fmt(v) for v in _examples(knob)[:2]))
        vals: list[Any] = []
        for raw in values.split(","):
            if not raw.strip():
                continue
            try:
                v = knob.coerce(raw)
            except ValueError as exc:
                raise ConfigError("--vary", f"{knob.name}: {exc}",
                                  f"give values like {', '.join(fmt(v) for v in _examples(knob)[:3])}") from None
            if v not in vals:
                vals.append(v)
        if len(vals) < 2:
            raise ConfigError("--vary", f"{knob.name} needs at least two different values to compare, got {values!r}",
                              f"e.g. --vary {knob.name}=" + ",".join(fmt(v) for v in _examples(knob)[:2]))
        out[knob.name] = vals
    return out


#: values to show in a fix for the settings whose values are open (the optimizer, the loss)
_EXAMPLES = {"optim": ("adamw_torch", "adamw_torch_fused"), "loss_type": ("nll", "dft"),
             "dataloader_workers": (0, 2)}


def _examples(knob) -> tuple:
    """Values of ``knob`` a fix may show."""
    return tuple(knob.values or _EXAMPLES.get(knob.name, ("a", "b")))


def parse_split(text: str) -> Trial:
    parts = text.strip().lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdecimal() for p in parts):
        raise ConfigError("--splits", f"{text.strip()!r} is not MICROxACCUM",
                          "write splits like 1x4,2x2,4x1 or use auto")
    mb, ga = (int(p) for p in parts)
    if mb < 1 or ga < 1:
        raise ConfigError("--splits", f"{text.strip()!r} has a zero factor",
                          "both micro-batch and accumulation must be at least 1")
    return Trial(mb, ga)


def shown(value: Any, limit: int = 40) -> str:
    """``value`` as a refusal quotes it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def model_kind(model: str) -> str:
    """``preset``, ``local`` (a directory) or ``hub`` (anything else)."""
    if model in PRESETS:
        return "preset"
    if os.path.isdir(model):
        return "local"
    return "hub"


def dataset_kind(dataset: str) -> str:
    if dataset in SYNTHETIC:
        return "synthetic"
    if (Path(dataset).suffix.lower() in DATA_SUFFIXES or os.path.exists(dataset)
            or dataset.startswith((".", "/", "~"))):
        return "file"
    return "hub"
