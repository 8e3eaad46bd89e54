"""Sweep configuration: TOML file and command-line flags, validated before anything trains.

Every user mistake becomes a :class:`ConfigError` whose message names the field, says what is
wrong and how to fix it; the CLI prints it on one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import tomllib
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .knobs import KNOBS, fmt, knob_named
from .paths import data_file_problem, folder_problem, input_file_problem
from .text import clean
from .presets import PRESETS
from .trial import Trial

DATA_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text",
                 ".csv": "csv"}
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
#: built-in data sets: random tokens, every row --seq-len long, or of chat-like lengths
SYNTHETIC = ("synthetic", "synthetic-ragged")


#: ``--until-confident`` given alone: a run's median known to within 5% (95% interval). Fresh
#: processes of one split differ by 8-10% on an H200 host (docs/results/README.md), and the
#: verdict's intervals are over runs: a tighter median inside one process only costs steps
#: (benchmarks/replay_until_confident.py: the same ranking from 0.20-0.22 of four recorded
#: 100-step sweeps' training time at 5, 0.29-0.31 at 2)
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
    (:func:`add_arguments`, :func:`from_mapping`, :func:`check_fields`). ``kind``: the value's
    type (default: the default's); ``flag``: a flag other than ``--name`` (``--no-probe``);
    ``negatable``: also ``--no-name``; ``const``: the value of the flag given without one.
    ``low``/``high``: the least and greatest value allowed, ``above``/``below``: bounds the
    value must be strictly beyond (what the libraries that take it accept, or what is
    plausible); ``unit`` and ``example`` go into the one line that refuses a value. ``output``:
    the value is the path of a file tracetui writes, checked as every output is before anything
    runs (:func:`output_settings`, :func:`tracetui.session.main.check_outputs`)."""
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
    warmup: int = setting(3, "steps measured but not counted", low=0, high=1_000_000, example="3")
    #: two fresh processes per split by default: a run's steps say nothing about how much runs
    #: of the same split differ between processes (up to 40% on an H200 host), and the
    #: intervals and verdicts rest on the spread between runs (:func:`tracetui.analysis.between_run_spread`)
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
    # explicitly, at its default too, and can be compared with --vary NAME=v1,v2.
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
    sharding: str = setting("ddp", "with --nproc-per-node above 1: ddp, or fsdp (FSDP2 full shard per decoder layer)")
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
    #: what numpy's seeding takes (transformers' set_seed seeds numpy too): any other seed
    #: failed in every run
    seed: int = setting(42, "seed for weights, LoRA init and data order", low=0, high=2**32 - 1)
    device: str = setting("auto", "auto, cpu, cuda or cuda:N")
    #: at most 1 PiB (2**20 GiB): more than any one machine holds, so no real cap is refused, and
    #: well within the byte counts the CPU's cap takes (setrlimit: 2**63 bytes); 1e300 failed in
    #: every run
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
    nproc_per_node: int = setting(1, "launch each run with torchrun as DDP over N processes; a split is then "
                                     "MICRO x ACCUM x world", metavar="N", low=1, high=1024)
    nnodes: int = setting(1, "torchrun: number of machines", low=1, high=65536)
    node_rank: int = setting(0, "torchrun: this machine's rank", low=0, high=65535)
    rdzv_endpoint: str = setting("", "torchrun: rendezvous endpoint", metavar="HOST:PORT", show_default=False)
    head_start: bool = setting(True, "start each next run of a grid while the one before takes its warm-up "
                                     "steps; built, it waits for its turn (never a start beside a measured "
                                     "step): a sweep pays about one run's start", negatable=True)
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
    (:func:`tracetui.session.main.check_outputs`)."""
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


def _int_list(name: str, value: Any) -> list[int]:
    if isinstance(value, bool):
        raise ConfigError(name, f"{value!r} is not a whole number", "give e.g. 4 or 4,8")
    if isinstance(value, int):
        items: list[Any] = [value]
    elif isinstance(value, list):
        items = value
    else:
        items = [s for s in str(value).split(",") if s.strip()]
    out = []
    for item in items:
        try:
            if isinstance(item, bool) or (isinstance(item, float) and not item.is_integer()):
                raise ValueError
            out.append(int(str(item).strip()) if not isinstance(item, int) else item)
        except (ValueError, TypeError):
            raise ConfigError(name, f"{item!r} is not a whole number", "give e.g. 4 or 4,8") from None
    if not out:
        raise ConfigError(name, "is empty", "give at least one effective batch, e.g. 4")
    return out


def _coerce(name: str, value: Any, kind: type) -> Any:
    flag = "--" + name.replace("_", "-")
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value) if isinstance(value, (int, float)) else int(str(value).strip())
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if not math.isfinite(out):
                raise ValueError
            return out
        if kind is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (ValueError, TypeError, OverflowError):
        raise ConfigError(flag, f"{value!r} is not a valid {kind.__name__}",
                          "give " + {int: "a whole number", float: "a number"}.get(kind, f"a {kind.__name__} value")) from None
    return value


#: each setting's type, from its declaration
_TYPES: dict[str, Any] = {f.name: f.metadata["kind"] for f in fields(SweepConfig)}


def from_mapping(values: dict[str, Any], base: SweepConfig | None = None) -> SweepConfig:
    """Apply ``values`` (TOML table or parsed flags; ``-`` or ``_`` in keys) onto ``base``."""
    cfg = base or SweepConfig()
    fields_by_name = {f.name: f for f in fields(SweepConfig)}
    known = set(fields_by_name)
    for raw_key, value in values.items():
        key = raw_key.replace("-", "_")
        if key not in known:
            raise ConfigError(raw_key, "is not a tracetui setting",
                              "see `tracetui --help` for the settings a config file may hold")
        if value is None and fields_by_name[key].metadata["nullable"]:
            setattr(cfg, key, None)
            continue
        if key == "effective_batch":
            setattr(cfg, key, _int_list("--effective-batch", value))
        elif key == "splits" and isinstance(value, list):
            setattr(cfg, key, ",".join(str(v) for v in value))
        elif key == "vary":
            setattr(cfg, key, _vary_items(value))
        else:
            setattr(cfg, key, _coerce(key, value, _TYPES[key]))
    return cfg


def _vary_items(value: Any) -> list[str]:
    """``vary`` from flags (a list of NAME=V1,V2), or TOML (that list, or a table of
    name = [values])."""
    if isinstance(value, dict):
        for k, vs in value.items():
            for v in vs if isinstance(vs, list) else [vs]:
                if any(c in fmt(v) for c in ",\"'"):  # (it would be split at its comma)
                    raise ConfigError("vary", f"{k}: {shown(v)} holds a comma or a quote, which no value of a "
                                      "setting has", "give each value as it is named, e.g. \"adamw_torch\"")
        return [f"{k}=" + ",".join(fmt(v) for v in (vs if isinstance(vs, list) else [vs])) for k, vs in value.items()]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError("vary", f"{value!r} is not a list of NAME=V1,V2",
                      'write vary = ["attn_implementation=sdpa,eager"] or [sweep.vary] attn_implementation = ["sdpa", "eager"]')


#: a config file longer than this is no sweep's settings (and is not read into memory)
MAX_TOML_BYTES = 1 << 20
#: arrays and inline tables nested deeper than this are refused before parsing (the parser
#: recurses: 500 deep was a RecursionError traceback); a sweep's settings nest two deep
MAX_TOML_DEPTH = 16


def toml_depth(text: str) -> int:
    """How deep ``text``'s arrays and inline tables nest (``[`` and ``{`` outside strings and
    comments; a table header counts one). Linear, no recursion, whatever the text."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if ch in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else ch
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                j += 2 if quote[0] == '"' and text[j] == "\\" else 1
            i = j + len(quote)
            continue
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def load_toml(path: str) -> dict[str, Any]:

    why = input_file_problem(path)
    if why:
        raise ConfigError("--config", f"{path} {why}", "give the path of a TOML file")
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_TOML_BYTES + 1)
    except OSError as exc:
        raise ConfigError("--config", f"{path} cannot be read ({exc.strerror})", "give a readable TOML file") from None
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError("--config", f"{path} is over {MAX_TOML_BYTES >> 20} MiB, too large for a sweep's settings",
                          "give the TOML file of the sweep's settings")
    try:
        text = raw.decode("utf-8")
        if toml_depth(text) > MAX_TOML_DEPTH:
            raise ConfigError("--config", f"{path} nests arrays or tables more than {MAX_TOML_DEPTH} deep",
                              "a sweep's settings nest at most two deep: fix the file")
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        why = "nested too deep" if isinstance(exc, RecursionError) else exc
        raise ConfigError("--config", f"{path} is not valid TOML ({why})",
                          "fix the file's syntax") from None
    # Settings sit at the top level or under [sweep], not both: a key beside [sweep] would be
    # silently ignored, and a table of another name (a misspelt [swep]) holds nothing tracetui reads.
    if "sweep" in data and not isinstance(data["sweep"], dict):
        raise ConfigError("--config", f"{path}: sweep must be a table ([sweep]), not a value",
                          "write [sweep] on a line of its own, with the settings below it")
    for key, value in data.items():
        if key not in ("sweep", "vary") and isinstance(value, dict):
            raise ConfigError("--config", f"{path}: [{key}] is not a table tracetui reads",
                              "put the settings under [sweep] or at the top level")
    if "sweep" in data:
        beside = [k for k in data if k != "sweep"]
        if beside:
            raise ConfigError("--config", f"{path}: {', '.join(beside[:5])} at the top level beside [sweep] would be ignored",
                              "move them under [sweep] (above it in the file is the top level)")
        return dict(data["sweep"])
    return dict(data)


def check_sources(cfg: SweepConfig) -> None:
    """The model and the data set as named, at once (before any import or hub check that takes
    seconds): a local path that is not there, a hub id that cannot be one, a misspelt preset."""
    import difflib

    kind = model_kind(cfg.model)
    if kind == "hub" and cfg.model.startswith((".", "/", "~")):
        if cfg.model.startswith("~") and os.path.isdir(os.path.expanduser(cfg.model)):
            raise ConfigError("--model", f"{cfg.model}: a ~ in a quoted path is not expanded",
                              f"give it as {os.path.expanduser(cfg.model)}")
        raise ConfigError("--model", f"folder {cfg.model} does not exist",
                          f"give a model folder, a hub id (org/name) or a preset ({', '.join(PRESETS)})")
    if kind == "hub" and ("/" not in cfg.model or cfg.model.count("/") > 1 or " " in cfg.model):
        near = difflib.get_close_matches(cfg.model.lower(), list(PRESETS), n=1, cutoff=0.7)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ConfigError("--model", f"{cfg.model!r} is not a preset, a local directory or a hub id{hint}",
                          f"use one of {', '.join(PRESETS)}, a directory, or an id like org/name")
    near = difflib.get_close_matches(cfg.dataset, list(SYNTHETIC), n=1, cutoff=0.7)
    if dataset_kind(cfg.dataset) == "hub" and near and "/" not in cfg.dataset:
        raise ConfigError("--dataset", f"{cfg.dataset!r} is not a data set (did you mean {near[0]}?)",
                          "give a file, a hub id like org/name, or synthetic")
    if dataset_kind(cfg.dataset) == "file":
        p = Path(cfg.dataset)
        if not p.is_file():
            raise ConfigError("--dataset", f"{cfg.dataset} " + ("is not a file" if p.exists() else "does not exist")
                              + (f" (did you mean {near[0]}?)" if near else ""),
                              "give an existing .json/.jsonl/.parquet/.txt/.csv file, a hub id, or synthetic")
        if p.suffix.lower() not in DATA_SUFFIXES:
            raise ConfigError("--dataset", f"{p.suffix or 'no suffix'} is not a supported data file",
                              "use .json, .jsonl, .parquet, .txt or .csv")
        why = data_file_problem(cfg.dataset, text=DATA_SUFFIXES[p.suffix.lower()] != "parquet",
                                rows=p.suffix.lower() == ".jsonl")
        if why:
            raise ConfigError("--dataset", f"{cfg.dataset} {why}",
                              "save it as UTF-8" if "UTF-8" in why else "give a data file with rows of text in it")


def shown(value: Any, limit: int = 40) -> str:
    """``value`` as a refusal quotes it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _num(x: float) -> str:
    """A bound as written in a refusal: ``4294967295``, ``1048576``, ``0.05``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def out_of_range(value: float, meta: dict) -> str | None:
    """Why ``value`` is outside the range ``meta`` declares (:func:`setting`), in words, or None."""
    low, high, above, below, unit = (meta.get(k) for k in ("low", "high", "above", "below", "unit"))
    num = _num(value) if isinstance(value, float) else shown(value)
    if above is not None and not value > above:
        if above == 0:
            return f"must be a positive number of {unit}, got {num}" if unit else f"must be positive, got {num}"
        return f"must be more than {_num(above)}, got {num}"
    if low is not None and value < low:
        return f"must be at least {_num(low)}, got {num}"
    if below is not None and not value < below:
        return f"{num} is not below {_num(below)}"
    if high is not None and value > high:
        return f"{num} is above {_num(high)}" + (f" {unit}" if unit else "") + ", the most it may be"
    return None


def range_words(meta: dict) -> str:
    """The range ``meta`` declares, as a fix: ``give a value from 0 to 4294967295``."""
    low = meta.get("low") if meta.get("low") is not None else meta.get("above")
    high = meta.get("high") if meta.get("high") is not None else meta.get("below")
    if meta.get("example"):
        return f"give e.g. {meta['example']}"
    if low is not None and high is not None:
        return f"give a value from {_num(low)} to {_num(high)}"
    return f"give at least {_num(low)}" if low is not None else f"give at most {_num(high)}" if high is not None else ""


def whole_number(low: int, high: int):
    """An argparse ``type`` for a flag outside the sweep's settings (``--project-steps``, ``run
    --warmup``): a whole number from ``low`` to ``high``, else one line naming the flag."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number; give e.g. {max(low, 3)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {shown(value)}")
        return value

    parse.__name__ = "whole number"
    return parse


#: the most optimizer steps ``--project-steps`` may project (a billion: beyond any training run;
#: 1 followed by 400 zeros overflowed the projection's float after the sweep)
MAX_PROJECT_STEPS = 10**9


def range_help(meta: dict) -> str:
    """The range ``meta`` declares, for ``--help``: `` (at least 0, at most 4294967295)``."""
    parts = ([f"at least {_num(meta['low'])}"] if meta.get("low") is not None else
             [f"above {_num(meta['above'])}"] if meta.get("above") is not None else [])
    parts += ([f"at most {_num(meta['high'])}"] if meta.get("high") is not None else
              [f"below {_num(meta['below'])}"] if meta.get("below") is not None else [])
    return f" ({', '.join(parts)})" if parts else ""


def check_value(name: str, value: Any, flag: str | None = None) -> None:
    """``value`` for setting ``name``, by its declaration: a string of printable characters of
    at most :data:`MAX_TEXT`, a number in its declared range. A :class:`ConfigError` naming
    ``flag`` (default: the setting's) if not."""
    meta = SweepConfig.__dataclass_fields__[name].metadata
    flag = flag or "--" + name.replace("_", "-")
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ConfigError(flag, f"is {len(value)} characters long", f"give at most {MAX_TEXT}")
        if not value.isprintable():
            bad = next(ch for ch in value if not ch.isprintable())
            raise ConfigError(flag, f"{shown(value)} holds a character that is not printable ({clean(bad)})",
                              "give plain text")
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and meta["kind"] in (int, float):
        why = out_of_range(value, meta)
        if why:
            raise ConfigError(flag, why, range_words(meta))


def check_fields(cfg: SweepConfig) -> None:
    """Every setting of ``cfg`` and every value it varies, checked against its declaration
    (:func:`check_value`): one pass, derived from the declarations in :class:`SweepConfig`."""
    for f in fields(SweepConfig):
        value = getattr(cfg, f.name)
        for item in value if isinstance(value, list) else [value]:
            if item is not None and f.name != "effective_batch":
                check_value(f.name, item)
    for name, values in cfg.varied().items():
        for v in values:
            check_value(name, v, "--vary")


def validate(cfg: SweepConfig) -> list[Trial]:
    """Check everything that needs no heavy import. Return the splits to run."""
    check_fields(cfg)
    check_sources(cfg)
    if cfg.warmup >= cfg.steps:
        raise ConfigError("--warmup", f"{cfg.warmup} leaves no measured step out of --steps {cfg.steps}",
                          "make --warmup smaller than --steps")
    if cfg.precision not in PRECISIONS:
        raise ConfigError("--precision", f"{cfg.precision!r} is not one of {', '.join(PRECISIONS)}",
                          "pick one of those")
    dev = cfg.device
    if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdecimal())):
        raise ConfigError("--device", f"{dev!r} is not auto, cpu, cuda or cuda:N", "pick one of those")
    if dev == "cpu" and cfg.precision == "fp16":
        raise ConfigError("--precision", "fp16 training needs a GPU", "use fp32 or bf16 on --device cpu")
    if dev.startswith("cuda:") and int(dev[5:]) > 1023:
        raise ConfigError("--device", f"{dev} names no GPU a machine has", "give cuda:N with N the GPU's index")
    if cfg.until_confident is not None:
        if cfg.world_size > 1:
            raise ConfigError("--until-confident", "cannot stop data-parallel runs early (every rank would have to "
                              "agree on each step)", "drop it, or measure with --nproc-per-node 1")
        if cfg.warmup + cfg.min_steps > cfg.steps:
            raise ConfigError("--min-steps", f"--warmup {cfg.warmup} + --min-steps {cfg.min_steps} exceeds --steps {cfg.steps}",
                              "raise --steps (the most steps a split may take) or lower --min-steps")
    if cfg.search and cfg.grid:
        raise ConfigError("--search", "and --grid both given", "give one: --search finds the fastest split, "
                          "--grid runs every split")
    if cfg.world_size == 1 and (cfg.sharding == "fsdp" or "fsdp" in cfg.varied().get("sharding", [])):
        raise ConfigError("--sharding" if cfg.sharding == "fsdp" else "--vary", "fsdp shards the model over "
                          "several processes, but this sweep runs one", "add --nproc-per-node 2 (or more)")
    if cfg.run_unfit and cfg.grid:
        raise ConfigError("--run-unfit", "is for the search, and --grid runs every split anyway",
                          "drop one of the two")
    if cfg.search and cfg.world_size > 1:
        raise ConfigError("--search", "does not search data-parallel runs yet", "use --grid with --nproc-per-node")
    if not cfg.lora_targets.strip():
        raise ConfigError("--lora-targets", "is empty", "give all-linear or e.g. q_proj,v_proj")
    if not cfg.text_field.strip():
        raise ConfigError("--text-field", "is empty", "name the column that holds the text")
    if not 0 <= cfg.node_rank < cfg.nnodes:
        raise ConfigError("--node-rank", f"{cfg.node_rank} is not below --nnodes {cfg.nnodes}", "give 0 .. nnodes-1")
    if cfg.nnodes > 1 and not cfg.rdzv_endpoint:
        raise ConfigError("--rdzv-endpoint", "is needed with --nnodes above 1", "give HOST:PORT of the rendezvous")
    if cfg.rdzv_endpoint:
        host, sep, port = cfg.rdzv_endpoint.rpartition(":")
        if not (sep and host and port.isdecimal() and 0 < int(port) < 65536):
            raise ConfigError("--rdzv-endpoint", f"{shown(cfg.rdzv_endpoint)} is not HOST:PORT",
                              "give e.g. 10.0.0.1:29500 (a port from 1 to 65535)")
    try:
        gpus = cfg.gpu_list()
    except ValueError:
        raise ConfigError("--gpus", f"{shown(cfg.gpus)} is not a list of GPU indices", "give e.g. 0,1") from None
    if any(g > 1023 for g in gpus):
        raise ConfigError("--gpus", f"{shown(cfg.gpus)} names a GPU index no machine has", "give e.g. 0,1")
    if len(set(gpus)) != len(gpus) or any(g < 0 for g in gpus):
        raise ConfigError("--gpus", f"{cfg.gpus!r} repeats or has a negative index", "give each GPU once, e.g. 0,1")
    if gpus and cfg.device == "cpu":
        raise ConfigError("--gpus", "runs splits on GPUs, but --device is cpu", "drop one of them")
    if gpus and cfg.world_size > 1 and len(gpus) < cfg.nproc_per_node:
        raise ConfigError("--gpus", f"lists {len(gpus)} GPU(s) for --nproc-per-node {cfg.nproc_per_node}",
                          "list at least one GPU per process")
    for eb in cfg.effective_batch:
        if cfg.world_size > 1 and eb % cfg.world_size:
            raise ConfigError("--effective-batch", f"{eb} is not divisible by the world size {cfg.world_size}",
                              "give a multiple of --nproc-per-node x --nnodes")
        if eb < 1:
            raise ConfigError("--effective-batch", f"must be at least 1, got {eb}", "give e.g. 4")
        if eb > 65536:
            raise ConfigError("--effective-batch", f"{eb} is too large", "give at most 65536")
    if len(set(cfg.effective_batch)) != len(cfg.effective_batch):
        raise ConfigError("--effective-batch", "lists a value twice", "give each effective batch once")
    splits = cfg.split_list()
    if not splits and cfg.splits != "auto":
        raise ConfigError("--splits", f"{cfg.splits!r} names no split", "give splits like 1x4,2x2,4x1, or auto")
    if not splits:
        raise ConfigError("--max-micro-batch", f"{cfg.max_micro_batch} leaves no split to run",
                          "raise --max-micro-batch or give --splits")
    allowed = set(cfg.effective_batch)
    seen = set()
    ws = cfg.world_size
    for s in splits:
        if s.effective_batch not in allowed:
            want = ", ".join(str(e) for e in sorted(allowed))
            per_rank = f"{s.micro_batch}x{s.grad_accum}"
            times = f" x {ws} ranks" if ws > 1 else ""
            raise ConfigError("--splits", f"{per_rank}{times} multiplies to {s.effective_batch}, not an effective batch ({want})",
                              "give splits whose product is an --effective-batch, or add it there")
        if s in seen:
            raise ConfigError("--splits", f"{s.split} is listed twice", "give each split once")
        seen.add(s)
        if cfg.max_micro_batch is not None and s.micro_batch > cfg.max_micro_batch:
            raise ConfigError("--splits", f"{s.split} has micro-batch {s.micro_batch} above --max-micro-batch {cfg.max_micro_batch}",
                              "drop it or raise --max-micro-batch")
    for name, knob in KNOBS.items():
        try:
            knob.coerce(getattr(cfg, name))
        except ValueError as exc:
            raise ConfigError("--" + name.replace("_", "-"), str(exc), "pick one of those" if knob.values else knob.help) from None
    trials = cfg.trial_list()
    if len(trials) * cfg.repeats > 1000:
        raise ConfigError("--splits", f"{len(trials) * cfg.repeats} runs is too many",
                          "sweep fewer splits, varied values or repeats")
    return trials


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep flags, shared by the TUI, the headless export and ``tracetui sweep``, built from
    the declarations in :class:`SweepConfig`.

    Defaults are ``argparse.SUPPRESS`` so only flags actually given override the TOML.
    """
    suppress = argparse.SUPPRESS
    g = parser.add_argument_group("sweep")
    g.add_argument("--config", metavar="FILE.toml", help="read settings from a TOML file (flags override it)")
    for f in fields(SweepConfig):
        m = f.metadata
        flag = m["flag"] or "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else f.default_factory()
        given = ",".join(map(str, default)) if isinstance(default, list) else default
        help_text = m["help"] + (f" (default {given})" if m["show_default"] and default is not None
                                 and m["kind"] is not bool else "") + range_help(m)
        if m["kind"] is bool:
            if m["flag"]:  # a switch that turns a default-on setting off
                g.add_argument(flag, dest=f.name, action="store_false" if default else "store_true",
                               default=suppress, help=m["help"])
                continue
            g.add_argument(flag, dest=f.name, action="store_true", default=suppress,
                           help=help_text + (" (default off)" if not default else " (default on)"))
            if m["negatable"]:
                g.add_argument("--no-" + flag[2:], dest=f.name, action="store_false", default=suppress)
            continue
        extra = {"nargs": "?", "const": m["const"]} if m["const"] is not None else {}
        if m["append"]:
            extra = {"action": "append"}
        g.add_argument(flag, dest=f.name, default=suppress, metavar=m["metavar"], help=help_text, **extra)


SWEEP_KEYS = [f.name for f in fields(SweepConfig)]


def from_args(ns: argparse.Namespace) -> SweepConfig:
    """Build the config: defaults, then the TOML file, then the flags given."""
    cfg = SweepConfig()
    fixed: dict[str, str] = {}  # setting -> where it was fixed to one value
    if getattr(ns, "config", None):
        table = load_toml(ns.config)
        cfg = from_mapping(table, cfg)
        fixed.update({k.replace("-", "_"): f"in {ns.config}" for k in table})
    given = {k: v for k, v in vars(ns).items() if k in SWEEP_KEYS}
    cfg = from_mapping(given, cfg)
    fixed.update({k: "on the command line" for k in given})
    if "effective_batch" not in fixed and "splits" in fixed and cfg.splits != "auto":
        # splits given without an effective batch name theirs: 1x8,8x1 compares at 8, not at
        # the default 4 (a split that does not parse is refused by validate, as before)
        try:
            products = [t.effective_batch for t in cfg.split_list()]
        except ConfigError:
            products = []
        if products:
            cfg = replace(cfg, effective_batch=list(dict.fromkeys(products)))
    for name in parse_vary(cfg.vary):
        if name in fixed:
            raise ConfigError("--vary", f"{name} is varied, and also fixed to {fmt(getattr(cfg, name))} {fixed[name]}",
                              "drop one of the two: a varied setting takes each of its values in turn")
    return cfg


def check_runs_dir(path: str, flag: str = "--runs-dir") -> None:
    """``--runs-dir`` (every subcommand) before anything starts: a folder this process can
    write into, made if missing; else one line naming the flag (:class:`ConfigError`)."""
    why = folder_problem(path)
    if why:
        raise ConfigError(flag, f"{clean(path)} {why}", "give a folder you can write, or leave it out "
                          "(default tracetui_runs)")
