"""The summary row: one :class:`Row` per split (its runs on one machine pooled), from the runs
:class:`~.runs.Results` folded, with its columns (:mod:`tracetui.core.columns`) filled by the
statistics, the comparison, the loss check and the diagnosis."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..core.columns import ROW_KEYS
from ..core.config import KNOB_DEFAULTS
from ..events.schema import AGAIN_KINDS, FAIL_KINDS
from ..core.knobs import SHORT
from ..core.phases import FIELDS
from .between import add_between, row_stop
from .context import (add_environment_changes, add_quiet, add_ranks, add_settings, add_work, energy_per_step,
                      precision_of, window_gpu)
from .compare import RunLevel, add_speedups, between_run_spread, cached_boots, run_medians
from .diagnosis import diagnose
from .loss import add_loss_check, add_result_changes, loss_curve
from .pairing import StepKey, step_keys
from .runs import LIVE_STATUSES, Results, RunData, repeat_mark
from .stats import enough_for_interval, median, median_ci, quantile

#: how a search's memory probe (:mod:`tracetui.planning.search`) begins its ``why``: a probe measures
#: memory at one micro-batch per step, outside the effective batches asked for, so it is no row
PROBE_WHY = "memory probe"


#: a planner's predicted peak memory, as its ``why`` says it (:func:`predicted_text`)
_PREDICTED = re.compile(r"predicted (\d+(?:\.\d+)?) GiB")


def predicted_text(gib: float) -> str:
    """A predicted peak as a planner writes it in a ``why`` (read back into ``predicted_mem_gib``)."""
    return f"predicted {gib:.2f} GiB"


class Row(dict):
    """A summary row: a dict whose keys are the ones :mod:`tracetui.core.columns` declares. Reading
    or writing any other key raises ``KeyError`` naming it: a misspelt read
    (``row.get("peak_mem_gb")``) fails the tests that reach it instead of giving None."""

    __slots__ = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for key in self:
            _declared(key)

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(_declared(key))

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(_declared(key), default)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(_declared(key), value)

    def setdefault(self, key: str, default: Any = None) -> Any:
        return super().setdefault(_declared(key), default)

    def update(self, *args, **kwargs) -> None:
        for key in dict(*args, **kwargs):
            _declared(key)
        super().update(*args, **kwargs)


def _declared(key: str) -> str:
    if key not in ROW_KEYS:
        raise KeyError(f"{key!r} is not a summary column: tracetui.core.columns declares them")
    return key


@dataclass
class SplitStats:
    """One split's pooled runs and the statistics its row and the comparison between splits
    (:func:`~.compare.add_speedups`, :func:`~.loss.add_loss_check`) need."""

    key: tuple
    runs: list[RunData]
    #: its runs' measured steps, pooled
    measured: list[dict]
    #: each run's median step (:func:`~.compare.run_medians`)
    medians: list[float]
    #: the run-level statistics, where its machine has a spread between runs and the split runs
    level: RunLevel | None = None
    #: bootstrap medians of its pooled steps, where the interval is step level
    boots: list[float] | None = None
    #: each run's measured steps as pairing reads them
    steps: list[list[StepKey]] = field(default_factory=list)
    #: the loss curve its row reports (:func:`_add_loss`)
    curve: dict[int, float] = field(default_factory=dict)


def summarise(results: Results, project_steps: int | None = None,
              peak_tflops: float | None = None) -> list[dict[str, Any]]:
    """One row per split (runs of the same split on the same machine pooled). ``peak_tflops``:
    the device's peak to measure MFU against (``--peak-tflops``), in place of :mod:`tracetui.core.flops`'s
    table."""
    groups, crowded, failed_of = _group_runs(results)
    medians = {key: run_medians(runs) for key, runs in groups.items()}
    spread = between_run_spread(medians)
    splits = [_split_stats(results, key, runs, medians[key], spread) for key, runs in groups.items()]
    rows: list[dict[str, Any]] = []
    for split in splits:
        row = _new_row(split, crowded.get(split.key, []), failed_of.get(split.key, []))
        _add_timing(row, split, spread)
        _add_resources(row, split)
        split.curve = _add_loss(row, split.runs)
        _add_context(row, split.runs, split.measured, peak_tflops)
        _add_outcome(row, split.runs, project_steps)
        rows.append(row)
    add_speedups(rows, {s.key: s.boots for s in splits if s.boots is not None}, results,
                 {s.key: s.steps for s in splits}, spread, {s.key: s.level for s in splits if s.level is not None})
    add_loss_check(rows, {s.key: s.curve for s in splits})
    add_environment_changes(rows, groups)
    for row in rows:
        row["bound"], row["evidence"] = diagnose(row, rows)
    add_result_changes(rows)
    rows.sort(key=lambda r: (r["machine"], r["effective_batch"], r["micro_batch"], sorted(r["varied"].items(), key=str)))
    return rows


def _group_runs(results: Results) -> tuple[dict[tuple, list[RunData]], dict[tuple, list[str]], dict[tuple, list[RunData]]]:
    """The runs of each split (by machine and trial), with the messages of attempts run again
    alone (``crowded``) and the failed runs left out of a split whose other runs did not fail."""
    groups: dict[tuple, list[RunData]] = {}
    for run in results.runs.values():
        if not run.started or str(run.started.get("why") or "").startswith(PROBE_WHY):
            continue
        groups.setdefault((run.machine, *run.trial.key()), []).append(run)
    crowded: dict[tuple, list[str]] = {}
    failed_of: dict[tuple, list[RunData]] = {}
    for key, runs in list(groups.items()):
        # an attempt run again alone (out of memory beside a head start, or lost with its fork
        # server before its first step) is no run of the split (its steps neither), only its
        # message stays; on its own it stays, unranked
        kept = [r for r in runs if r.status not in AGAIN_KINDS]
        if kept and len(kept) < len(runs):
            crowded[key] = [r.message for r in runs if r.status in AGAIN_KINDS and r.message]
            groups[key] = kept
        # a run that failed beside runs of its split that did not (killed mid-run, its repeat
        # finished): its partial steps are not pooled with theirs; the row says it failed
        counted = [r for r in kept if r.status not in FAIL_KINDS]
        if counted and len(counted) < len(kept):
            failed_of[key] = [r for r in kept if r.status in FAIL_KINDS]
            groups[key] = counted
    return groups, crowded, failed_of


def _split_stats(results: Results, key: tuple, runs: list[RunData], meds: list[float],
                 spread: dict[str, tuple[float, int]]) -> SplitStats:
    """A split's statistics: run level where its machine has a spread between runs (none for a
    split with no run of enough steps: no step-level interval either), else a bootstrap of its
    pooled steps where they are enough for an interval."""
    split = SplitStats(key, runs, [s for r in runs for s in r.measured()], meds,
                       steps=[step_keys(r.measured()) for r in runs if r.measured()])
    machine = key[0]
    if not split.measured:
        return split
    if machine in spread:
        var, df = spread[machine]
        if meds:
            logs = [math.log(m) for m in meds]
            split.level = RunLevel(sum(logs) / len(logs), len(logs), var, df)
    elif enough_for_interval(len(split.measured)):
        per_run = [[s["wall_ms"] for s in r.measured()] for r in runs if r.measured()]
        split.boots = cached_boots(results, key, per_run)
    return split


def _new_row(split: SplitStats, crowded: list[str], gone: list[RunData]) -> Row:
    """A split's row with what names it, its status and its runs' failures."""
    machine, eb, mb, ga, ws, varied = split.key
    runs = split.runs
    trial = runs[0].trial
    statuses = [r.split_status for r in runs]
    live = [st for st in statuses if st in LIVE_STATUSES]
    # still measuring while any run is (running before warming up before queued; a run built
    # early that waits for its turn is queued); ok once one run is; else the failure
    status = (next(st for st in ("running", "warming up", "queued") if st in live) if live
              else "ok" if "ok" in statuses else statuses[-1])
    failed = [st for st in statuses if st in FAIL_KINDS] + [r.status for r in gone]
    row = Row(
        machine=machine, nodes="; ".join(sorted({r.started["node"] for r in runs if r.started.get("node")})) or None,
        effective_batch=eb, micro_batch=mb, grad_accum=ga, world_size=ws,
        split=trial.split, trial=trial.label(SHORT), varied=dict(varied), **dict(varied),
        status=status, runs=sum(1 for r in runs if r.status not in AGAIN_KINDS),
        steps_measured=sum(r.measured_count() for r in runs), warmup_steps=sum(r.warmup_seen for r in runs),
        warmup_why="; ".join(r.warmup_why for r in runs if r.warmup_why) or None,
        message="; ".join([*crowded, *(r.message for r in runs if r.message)]),
        runs_failed=len(failed) or None, failed_kinds=failed,
    )
    if failed and status != failed[-1]:
        what = (f"{failed[0]} in {len(failed)} of {len(runs) + len(gone)} runs"
                + (f" ({', '.join(r.trial.label(SHORT, repeat_mark(r.run_id)) + ': ' + (r.message or r.status) for r in gone)}"
                   "; its steps are not pooled)" if gone else ""))
        row["message"] = "; ".join(x for x in (what, row["message"]) if x)
    return row


def _add_timing(row: Row, split: SplitStats, spread: dict[str, tuple[float, int]]) -> None:
    """The step time with its interval (run level: the median step of a typical fresh process,
    with an interval from the spread between processes; else from the pooled steps), the phases,
    the throughput and the spread between repeats."""
    measured, meds = split.measured, split.medians
    walls = [s["wall_ms"] for s in measured]
    if not walls:
        return
    row["step_ms_median"] = median(walls)
    row["step_ms_p10"] = quantile(walls, 0.1)
    row["step_ms_p90"] = quantile(walls, 0.9)
    if row["machine"] in spread:
        if split.level is not None:
            mid, lo, hi = split.level.interval()
            row.update(ci_scope="runs", step_ms_median=mid, step_ms_ci_low=lo, step_ms_ci_high=hi)
        else:
            row.update(ci_scope="runs", too_few_steps=True)
    elif split.boots is not None:
        row["ci_scope"] = "steps"
        row["step_ms_ci_low"], row["step_ms_ci_high"] = median_ci(split.boots)
    else:
        row["too_few_steps"] = True
    row.update(apportion(measured, row["step_ms_median"]))
    fwd_per_mb = [_phase(s, "forward_ms") / max(1, len(s.get("forward_ms") or [1])) for s in measured]
    row["forward_ms_per_micro"] = median(fwd_per_mb)
    secs = row["step_ms_median"] / 1000.0
    toks = [s["tokens"] for s in measured if s.get("tokens")]
    samples = [s["samples"] for s in measured if s.get("samples")]
    ws = row["world_size"]
    row["tokens_per_s"] = median(toks) * ws / secs if toks else None
    row["samples_per_s"] = median(samples) * ws / secs if samples else None
    if len(meds) > 1:
        row["repeat_spread_pct"] = 100.0 * (max(meds) - min(meds)) / median(meds)


def _add_resources(row: Row, split: SplitStats) -> None:
    """The devices and their memory, the planner's prediction, the first step and compile time,
    the energy a step takes."""
    runs, measured = split.runs, split.measured
    gpus = sorted({r.started.get("gpu") for r in runs if r.started.get("gpu") is not None})
    row["gpus"] = ",".join(str(g) for g in gpus) or None
    gpu = [g for r in runs for g in window_gpu(r, r.measured())]
    row["gpu_util_mean"] = sum(g["util"] for g in gpu) / len(gpu) if gpu else None
    peaks = [s["peak_mem_gib"] for s in measured if s.get("peak_mem_gib") is not None]
    row["peak_mem_gib"] = max(peaks) if peaks else None
    if row["world_size"] > 1:
        add_ranks(row, runs)
    whys = [r.started.get("why") or "" for r in runs]
    row["why"] = whys[0] or None
    predicted = [float(m.group(1)) for m in map(_PREDICTED.search, whys) if m]
    row["predicted_mem_gib"] = predicted[0] if predicted else None
    env = runs[0].started.get("env") or {}
    row["mem_total_gib"] = env.get("gpu_total_gib")
    cfg = runs[0].started.get("config") or {}
    row["memory_limit_gib"] = cfg.get("memory_limit")
    row["knob_values"] = {k: cfg[k] for k in KNOB_DEFAULTS if k in cfg}
    firsts = [s["wall_ms"] for r in runs for s in r.steps[:1] if s.get("rank", 0) == 0 and s.get("warmup")]
    row["first_step_ms"] = median(firsts) if firsts else None
    if row["first_step_ms"] and row.get("step_ms_median") and (varied_on(row, "torch_compile") or cfg.get("torch_compile")):
        # the first step compiles: what it took beyond an ordinary step is compile time
        row["compile_s"] = max(0.0, (row["first_step_ms"] - row["step_ms_median"]) / 1000.0)
    row["energy_j_per_step"] = energy_per_step(runs, row.get("step_ms_median"))


def _add_context(row: Row, runs: list[RunData], measured: list[dict], peak_tflops: float | None) -> None:
    """What the runs ran with: precision, where their start went, the read-back settings, the
    work a step does (and its MFU) and the machine's load."""
    row["precision_used"] = precision_of(runs[0])
    _add_start(row, runs)
    add_settings(row, runs)
    add_work(row, runs, measured, peak_tflops)
    add_quiet(row, runs)


def _add_loss(row: Row, runs: list[RunData]) -> dict[int, float]:
    """The final loss and whether it stayed finite; returns the loss curve it is from (that of
    the last run that finished, else of the last with one)."""
    with_loss = [r for r in runs if loss_curve(r)]
    source = ([r for r in with_loss if r.status == "ok"] or with_loss or [None])[-1]
    curve = loss_curve(source) if source is not None else {}
    row["final_loss"] = curve[max(curve)] if curve else None
    bad_steps = [k for r in with_loss for k, v in loss_curve(r).items() if not math.isfinite(v)]
    row["loss_finite"] = not bad_steps
    if bad_steps:
        bad = min(bad_steps)
        row["message"] = "; ".join(x for x in (row["message"], f"loss went non-finite at step {bad}") if x)
    return curve


def _add_outcome(row: Row, runs: list[RunData], project_steps: int | None) -> None:
    """How the runs ended (stopped early, and why), their training time, and the projection of
    a run of ``project_steps`` (attach mode: the run's own ``max_steps``) with the trainer's work
    between steps where the real run does it."""
    row["stopped_early"] = any(r.finished.get("stopped_early") for r in runs)
    reasons = sorted({r.finished["stop_reason"] for r in runs if r.finished.get("stop_reason")})
    row["stop_reason"] = "/".join(reasons) or None
    row["trainer_stop"] = row_stop(runs)
    rt = [r.finished.get("train_runtime_s") for r in runs if r.finished.get("train_runtime_s") is not None]
    row["train_runtime_s"] = sum(rt) / len(rt) if rt else None
    planned = project_steps or max((r.started.get("max_steps") or 0 for r in runs), default=0)
    if planned and row.get("step_ms_median"):
        row["projected_s"] = planned * row["step_ms_median"] / 1000.0 + (row.get("compile_s") or 0.0)
    # evaluations, saves and logs: never in a step; in the projection where the real run does them
    add_between(row, runs, planned if row.get("projected_s") else 0)
    if row.get("projected_between_s"):
        row["projected_s"] += row["projected_between_s"]


def _phase(step: dict, name: str) -> float:
    v = step.get(name, 0.0)
    return float(sum(v)) if isinstance(v, list) else float(v or 0.0)


def apportion(measured: list[dict], step_ms: float) -> dict[str, float]:
    """Each phase's share of the measured time, applied to the median step: the phase columns
    then add up to the step column exactly, whatever the distribution (medians of phases do not
    add: each phase's median may come from a different step, and on a loaded machine they miss
    the median step by whole percent)."""
    total = sum(s["wall_ms"] for s in measured)
    if total <= 0:
        return {ph: 0.0 for ph in FIELDS}
    return {ph: step_ms * sum(_phase(s, ph) for s in measured) / total for ph in FIELDS}


#: a run's start, split into its parts: column -> (the stage it starts at, the stage it ends at);
#: tracetui's own runs have the first four, a swept script the interpreter, the script and the
#: trainer (it builds its model and data in its own code)
START_PARTS = {
    "start_imports_s": (None, "building the model"),
    "start_model_s": ("building the model", "preparing data"),
    "start_data_s": ("preparing data", "building the trainer"),
    "start_interpreter_s": (None, "running the script"),
    "start_script_s": ("running the script", "building the trainer"),
    "start_trainer_s": ("building the trainer", "first step"),
    "start_s": (None, "first step"),
}


def _add_start(row: dict, runs: list[RunData]) -> None:
    """Where each run's start went, process start to its first step (medians over the runs):
    the interpreter and imports, building the model, preparing data, building the trainer."""
    for col, (a, b) in START_PARTS.items():
        spans = [r.stages[b] - (r.stages[a] if a else 0.0) for r in runs
                 if b in r.stages and (a is None or a in r.stages)]
        row[col] = median(spans) if spans else None


def varied_on(row: dict, name: str) -> bool:
    return bool((row.get("varied") or {}).get(name))
