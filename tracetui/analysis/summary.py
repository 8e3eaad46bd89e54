"""The summary row: one :class:`Row` per split (its runs on one machine pooled), from the runs
:class:`~.runs.Results` folded, with its columns (:mod:`tracetui.core.columns`) filled by the
statistics, the comparison, the loss check and the diagnosis."""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..core.busy import gpu_picture, judge
from ..core.columns import ROW_KEYS, SETTING_COLUMNS
from ..core.config import KNOB_DEFAULTS
from ..events.schema import AGAIN_KINDS, FAIL_KINDS
from ..core.flops import Profile, peak_tflops, profile_of_config, step_work
from ..core.knobs import SHORT
from ..core.phases import FIELDS
from ..core.presets import PRESETS
from .applied import split_applied
from .between import add_between, row_stop
from .compare import RunLevel, add_speedups, between_run_spread, cached_boots, run_medians
from .diagnosis import diagnose
from .loss import add_loss_check, add_result_changes, loss_curve, precision_mode
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
    _add_environment_changes(rows, groups)
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
        machine=machine, effective_batch=eb, micro_batch=mb, grad_accum=ga, world_size=ws,
        split=trial.split, trial=trial.label(SHORT), varied=dict(varied), **dict(varied),
        status=status, runs=sum(1 for r in runs if r.status not in AGAIN_KINDS),
        steps_measured=sum(r.measured_count() for r in runs), warmup_steps=sum(r.warmup_seen for r in runs),
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
    gpu = [g for r in runs for g in _window_gpu(r, r.measured())]
    row["gpu_util_mean"] = sum(g["util"] for g in gpu) / len(gpu) if gpu else None
    peaks = [s["peak_mem_gib"] for s in measured if s.get("peak_mem_gib") is not None]
    row["peak_mem_gib"] = max(peaks) if peaks else None
    if row["world_size"] > 1:
        _add_ranks(row, runs)
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
    row["energy_j_per_step"] = _energy_per_step(runs, row.get("step_ms_median"))


def _add_context(row: Row, runs: list[RunData], measured: list[dict], peak_tflops: float | None) -> None:
    """What the runs ran with: precision, where their start went, the read-back settings, the
    work a step does (and its MFU) and the machine's load."""
    row["precision_used"] = _precision_of(runs[0])
    _add_start(row, runs)
    _add_settings(row, runs)
    _add_work(row, runs, measured, peak_tflops)
    _add_quiet(row, runs)


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


def _window_gpu(run: RunData, measured: list[dict]) -> list[dict]:
    """GPU samples taken while the measured steps ran: not while the trainer evaluated, saved or
    logged between them (the time a step's ``between_ms`` says followed it)."""
    if not measured or not run.gpu:
        return []
    t0 = min(s.get("t_end", s["t"]) - s.get("host_ms", s["wall_ms"]) / 1000.0 for s in measured)
    t1 = max(s.get("t_end", s["t"]) for s in measured)
    inside = [g for g in run.gpu if t0 <= g["t"] <= t1]
    gaps = sorted((s.get("t_end", s["t"]), sum(sum(v) for v in s["between_ms"].values() if isinstance(v, list)) / 1000.0)
                  for s in run.steps if isinstance(s.get("between_ms"), dict))
    if not gaps:
        return inside
    starts = [a for a, _ in gaps]
    out = []
    for g in inside:
        i = bisect.bisect_left(starts, g["t"]) - 1  # the last gap that began before the sample
        if i < 0 or g["t"] > gaps[i][0] + gaps[i][1]:
            out.append(g)
    return out


def _phase(step: dict, name: str) -> float:
    v = step.get(name, 0.0)
    return float(sum(v)) if isinstance(v, list) else float(v or 0.0)


def apportion(measured: list[dict], step_ms: float) -> dict[str, float]:
    """Each phase's share of the measured time, applied to the median step: the phase columns
    then add up to the step column exactly, whatever the distribution (medians of phases do not
    add: on a loaded machine they were 7-12% off the median step)."""
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


def _add_ranks(row: dict, runs: list[RunData]) -> None:
    """Data-parallel columns: each rank's peak memory, the communication (DDP: the exposed
    all-reduce time, estimated from the synchronising micro-batch; FSDP: none, see below), and
    how far the slowest rank's compute lags the fastest."""
    steps = [s for r in runs for s in r.steps if not s.get("warmup")]
    peaks: dict[int, float] = {}
    for s in steps:
        if s.get("peak_mem_gib") is not None:
            rank = s.get("rank", 0)
            peaks[rank] = max(peaks.get(rank, 0.0), s["peak_mem_gib"])
    if peaks:
        # what each GPU must hold is the largest rank's peak, not rank 0's
        row["peak_mem_gib_ranks"] = " / ".join(f"{peaks[r]:.2f}" for r in sorted(peaks))
        row["peak_mem_gib"] = max(peaks.values())
    comm = [s["comm_est_ms"] for s in steps if s.get("rank", 0) == 0 and s.get("comm_est_ms") is not None]
    row["comm_ms"] = median(comm) if comm else None
    sync = [s["backward_sync_ms"] for s in steps if s.get("rank", 0) == 0 and s.get("backward_sync_ms") is not None]
    row["backward_sync_ms"] = median(sync) if sync else None
    sharding = next((r.settings.get("sharding_used") for r in runs if r.settings.get("sharding_used")), None)
    if sharding and sharding.startswith("fsdp"):
        row["comm_note"] = ("FSDP communicates in every micro-batch (all-gathers in forward and backward, "
                            "reduce-scatters in backward): no micro-batch runs without it to compare against, "
                            "so its exposed time is not estimated; see comm_gib_per_step")
    per_rank: dict[int, list[float]] = {}
    for s in steps:
        # compute outside the synchronising micro-batch (DDP); FSDP has none: all of it
        bwd = s.get("backward_nosync_ms") if s.get("backward_sync_ms") is not None else sum(s.get("backward_ms") or [])
        work = sum(s.get("forward_ms") or []) + (bwd or 0.0)
        per_rank.setdefault(s.get("rank", 0), []).append(work)
    meds = {r: median(v) for r, v in per_rank.items() if v}
    row["ranks"] = len(meds)
    if len(meds) > 1 and min(meds.values()) > 0:
        slow = max(meds, key=meds.get)
        row["slowest_rank"] = slow
        row["rank_spread_pct"] = 100.0 * (meds[slow] - min(meds.values())) / min(meds.values())


def _energy_per_step(runs: list[RunData], step_ms: float | None) -> float | None:
    if not step_ms:
        return None
    powers = []
    for r in runs:
        g = [x for x in _window_gpu(r, r.measured()) if x.get("energy_j") is not None]
        if len(g) >= 2 and g[-1]["t"] > g[0]["t"]:
            powers.append((g[-1]["energy_j"] - g[0]["energy_j"]) / (g[-1]["t"] - g[0]["t"]))
    if not powers:
        return None
    return sum(powers) / len(powers) * step_ms / 1000.0


def _precision_of(run: RunData) -> str | None:
    return run.settings.get("precision_used") or run.started.get("precision")


def _add_settings(row: dict, runs: list[RunData]) -> None:
    """The read-back settings as columns; runs of one split that ran with different settings
    are said to differ (they are not repeats of one thing)."""
    have = [r.settings for r in runs if r.settings]
    first = have[0] if have else {}
    for name in SETTING_COLUMNS:
        row[name] = first.get(name, row.get(name))  # a log without read-back keeps what it had
    row["settings"] = first
    how = split_applied(first)
    if how:
        row["split_applied"] = how
    trained = sorted({str(r.started["trained"]) for r in runs if r.started.get("trained")})
    if trained:
        row["trained"] = ", ".join(trained)
    differ = sorted({k for s in have[1:] for k in SETTING_COLUMNS if s.get(k) != first.get(k)})
    if differ:
        row["message"] = "; ".join(x for x in (row.get("message"), "runs differ in " + ", ".join(differ)) if x)


def _add_work(row: dict, runs: list[RunData], measured: list[dict], peak_override: float | None = None) -> None:
    """The work each optimizer step did (:mod:`tracetui.core.flops`: model FLOPs from the model's linear
    layers and the tokens it really processed, padding included; hardware FLOPs with
    checkpointing's recomputation), the FLOP/s achieved at the median step, and MFU against the
    device's dense peak for the precision that ran (``peak_override``, ``--peak-tflops``, first)."""
    if not measured or not row.get("step_ms_median"):
        return
    cfg = runs[0].started.get("config") or {}
    profile = next((p for p in (Profile.from_dict(r.settings.get("model_work")) for r in runs) if p), None)
    if profile is None and cfg.get("model") in PRESETS:
        # a log from before the layers were read back: a preset's configuration says the same
        profile = profile_of_config(PRESETS[cfg["model"]][0], cfg.get("lora_r"), cfg.get("lora_targets"))
    if profile is None:
        row["mfu_note"] = "no FLOPs: the model's layers were not recorded (a model tracetui cannot read)"
        return
    ckpt = row.get("activation_checkpointing")
    ckpt = bool(cfg.get("activation_checkpointing") if ckpt is None else ckpt)
    works, padded, real = [], 0, 0
    for s in measured:
        shapes = s.get("micro_shapes") or _full_rows(s, row, cfg)
        if not shapes:
            continue
        w = step_work(profile, [tuple(x) for x in shapes], checkpointing=ckpt, head_tokens=s.get("scored_tokens"),
                      pairs=s.get("token_pairs"))
        works.append(w)
        padded += w.tokens
        real += s.get("tokens") or w.tokens
    if not works:
        row["mfu_note"] = "no FLOPs: the steps did not record the shapes of their micro-batches"
        return
    row["tflop_per_step"] = median([w.model for w in works]) / 1e12
    row["hw_tflop_per_step"] = median([w.hardware for w in works]) / 1e12
    row["padding_pct"] = max(0.0, 100.0 * (1 - real / padded)) if padded else None
    row["tflops"] = row["tflop_per_step"] / (row["step_ms_median"] / 1000.0)
    env = runs[0].started.get("env") or {}
    mode = precision_mode(row.get("precision_used"))
    if mode == "fp32" and (row.get("settings") or {}).get("tf32"):
        mode = "tf32"
    override = peak_override or cfg.get("peak_tflops")
    if override:
        peak, which = float(override), "--peak-tflops"
    else:
        peak, which = peak_tflops(env.get("gpu_name") if env.get("device", "cuda") != "cpu" else None, mode)
    row["peak_tflops"] = peak
    row["mfu_pct"] = 100.0 * row["tflops"] / peak if peak else None
    pad = row["padding_pct"]
    row["mfu_note"] = ((f"against the {which} peak, {peak:g} TFLOP/s" if peak else which)
                       + (f"; {pad:.0f}% of the positions processed were padding (counted as work)"
                          if pad is not None and pad >= 0.5 else ""))


def _full_rows(step: dict, row: dict, cfg: dict) -> list[list[int]] | None:
    """A step's micro-batch shapes where a log from before they were recorded implies them: every
    row full (``--seq-len`` tokens each, as the built-in ``synthetic`` data has them)."""
    seq, mb, ga = cfg.get("seq_len"), row["micro_batch"], row["grad_accum"]
    if seq and step.get("samples") == mb * ga and step.get("tokens") == mb * ga * seq:
        return [[mb, seq]] * ga
    return None


def _add_quiet(row: dict, runs: list[RunData]) -> None:
    """How quiet the machine was for each run of this split, and why a run counts as busy."""
    busy, others = [], []
    for r in runs:
        given = r.finished.get("quiet")
        picture = dict(given) if isinstance(given, dict) else {}
        picture.update(gpu_picture(_window_gpu(r, r.measured())))
        why = judge(picture)
        if why:
            busy.append(f"{r.trial.label(SHORT, repeat_mark(r.run_id))}: {why}")
        if isinstance(picture.get("other_cpu_cores"), (int, float)):
            others.append(picture["other_cpu_cores"])
    row["other_cpu_cores"] = max(others) if others else None
    row["busy"] = "; ".join(busy) or None


#: what a run's result depends on besides its settings: a change between runs of one sweep
#: makes their times incomparable
_ENV_KEYS = ("host", "gpu_name", "driver", "cuda", "python", "torch", "transformers", "trl", "peft", "accelerate",
             "cpu_count")


def _add_environment_changes(rows: list[dict], groups: dict[tuple, list[RunData]]) -> None:
    """Flag every row of an effective batch whose runs did not all see the same machine and
    libraries (a different host, GPU model, driver or library version)."""
    by_eb: dict[tuple, list[RunData]] = {}
    for (machine, eb, *_), runs in groups.items():
        by_eb.setdefault((machine, eb), []).extend(runs)
    for (machine, eb), runs in by_eb.items():
        seen: dict[str, set] = {}
        for r in runs:
            env = r.started.get("env") or {}
            for k in _ENV_KEYS:
                if k in env:
                    seen.setdefault(k, set()).add(str(env[k]))
        changed = [f"{k} ({', '.join(sorted(v))})" for k, v in seen.items() if len(v) > 1]
        if changed:
            for row in rows:
                if row["machine"] == machine and row["effective_batch"] == eb:
                    row["env_changed"] = "the machine changed between runs: " + "; ".join(changed)
