"""A summary row's columns on what its runs ran with and on: each rank's memory and the
communication, energy, the read-back settings, the work a step does (and its MFU), the
machine's load while the steps ran, and what differs between the machines' environments
(:func:`tracetui.analysis.summary.summarise` fills the rest)."""

from __future__ import annotations

import bisect

from ..core.busy import gpu_picture, judge
from ..core.columns import SETTING_COLUMNS
from ..core.flops import Profile, peak_tflops, profile_of_config, step_work
from ..core.knobs import SHORT
from ..core.presets import PRESETS
from .applied import split_applied
from .loss import precision_mode
from .runs import RunData, repeat_mark
from .stats import median


def window_gpu(run: RunData, measured: list[dict]) -> list[dict]:
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


def add_ranks(row: dict, runs: list[RunData]) -> None:
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


def energy_per_step(runs: list[RunData], step_ms: float | None) -> float | None:
    if not step_ms:
        return None
    powers = []
    for r in runs:
        g = [x for x in window_gpu(r, r.measured()) if x.get("energy_j") is not None]
        if len(g) >= 2 and g[-1]["t"] > g[0]["t"]:
            powers.append((g[-1]["energy_j"] - g[0]["energy_j"]) / (g[-1]["t"] - g[0]["t"]))
    if not powers:
        return None
    return sum(powers) / len(powers) * step_ms / 1000.0


def precision_of(run: RunData) -> str | None:
    return run.settings.get("precision_used") or run.started.get("precision")


def add_settings(row: dict, runs: list[RunData]) -> None:
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


def add_work(row: dict, runs: list[RunData], measured: list[dict], peak_override: float | None = None) -> None:
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
        why = next((r.settings.get("model_work_missing") for r in runs if r.settings.get("model_work_missing")), None)
        row["mfu_note"] = f"no FLOPs: {why}" if why else \
            "no FLOPs: the model's layers were not recorded (a model tracetui cannot read)"
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


def add_quiet(row: dict, runs: list[RunData]) -> None:
    """How quiet the machine was for each run of this split, and why a run counts as busy."""
    busy, others = [], []
    for r in runs:
        given = r.finished.get("quiet")
        picture = dict(given) if isinstance(given, dict) else {}
        picture.update(gpu_picture(window_gpu(r, r.measured())))
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


def add_environment_changes(rows: list[dict], groups: dict[tuple, list[RunData]]) -> None:
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
