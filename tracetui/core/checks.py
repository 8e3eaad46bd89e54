"""The checks of a sweep's settings that need no heavy import, before anything trains: each
setting against the range its declaration gives (:func:`check_fields`), the model and data set as
named (:func:`check_sources`), the settings against each other (:func:`validate`), and the runs
folder (:func:`check_runs_dir`). Each refusal is one :class:`~tracetui.core.config.ConfigError`.
"""

from __future__ import annotations

import importlib.util

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from .config import (
    DATA_SUFFIXES,
    MAX_TEXT,
    PRECISIONS,
    SYNTHETIC,
    ConfigError,
    SweepConfig,
    dataset_kind,
    model_kind,
    shown,
)
from .knobs import KNOBS
from .paths import data_file_problem, folder_problem
from .presets import PRESETS
from .text import clean
from .trial import Trial
from . import warmup


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
    """Check everything that needs no heavy import. Return the trials to run. The checks run in
    a fixed order (the first refusal is the one line shown): each setting alone, then the settings
    that go together, the processes and GPUs, the effective batches, the splits, the knobs."""
    check_fields(cfg)
    check_sources(cfg)
    _check_run(cfg)
    _check_modes(cfg)
    _check_processes(cfg)
    _check_gpus(cfg)
    _check_effective_batches(cfg)
    _check_splits(cfg)
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


def _check_run(cfg: SweepConfig) -> None:
    """Steps, precision and device, together."""
    if warmup.most(cfg.warmup, cfg.steps) >= cfg.steps:
        raise ConfigError("--warmup", f"{cfg.warmup} leaves no measured step out of --steps {cfg.steps}",
                          "make --warmup smaller than --steps" if cfg.warmup != warmup.AUTO else "give --steps 2 or more")
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


def _check_modes(cfg: SweepConfig) -> None:
    """The ways a sweep runs (early stops, search or grid, sharding) against each other."""
    if cfg.until_confident is not None:
        if cfg.world_size > 1:
            raise ConfigError("--until-confident", "cannot stop data-parallel runs early (every rank would have to "
                              "agree on each step)", "drop it, or measure with --nproc-per-node 1")
        if warmup.most(cfg.warmup, cfg.steps) + cfg.min_steps > cfg.steps:
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


def _check_processes(cfg: SweepConfig) -> None:
    """The machines of a data-parallel run and their rendezvous."""
    if not 0 <= cfg.node_rank < cfg.nnodes:
        raise ConfigError("--node-rank", f"{cfg.node_rank} is not below --nnodes {cfg.nnodes}", "give 0 .. nnodes-1")
    if cfg.nnodes > 1 and not cfg.rdzv_endpoint:
        raise ConfigError("--rdzv-endpoint", "is needed with --nnodes above 1", "give HOST:PORT of the rendezvous")
    if cfg.rdzv_endpoint:
        host, sep, port = cfg.rdzv_endpoint.rpartition(":")
        if not (sep and host and port.isdecimal() and 0 < int(port) < 65536):
            raise ConfigError("--rdzv-endpoint", f"{shown(cfg.rdzv_endpoint)} is not HOST:PORT",
                              "give e.g. 10.0.0.1:29500 (a port from 1 to 65535)")


def _check_gpus(cfg: SweepConfig) -> None:
    """``--gpus``: indices a machine can have, each once, with the device and processes it serves."""
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
    if gpus and cfg.ray:
        raise ConfigError("--gpus", "picks this machine's GPUs, but --ray runs the trials on the cluster's, "
                                    "as Ray gives them", "drop one of them")
    if cfg.ray and importlib.util.find_spec("ray") is None:
        raise ConfigError("--ray", "Ray is not installed here", "pip install 'tracetui[ray]' (in a checkout: "
                                                                "pip install -e '.[ray]')")
    if cfg.ray and cfg.nnodes > 1:
        raise ConfigError("--nnodes", "spreads a trial over machines by hand, but --ray keeps each trial on one "
                                      "node", "drop --nnodes (or --ray)")


def _check_effective_batches(cfg: SweepConfig) -> None:
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


def _check_splits(cfg: SweepConfig) -> None:
    """At least one split, each once, each of an effective batch asked for and within
    ``--max-micro-batch``."""
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


def check_runs_dir(path: str, flag: str = "--runs-dir") -> None:
    """``--runs-dir`` (every subcommand) before anything starts: a folder this process can
    write into, made if missing; else one line naming the flag (:class:`ConfigError`)."""
    why = folder_problem(path)
    if why:
        raise ConfigError(flag, f"{clean(path)} {why}", "give a folder you can write, or leave it out "
                          "(default tracetui_runs)")
