"""The answer in words: the verdict (which split is fastest, by how much, or why no claim is
made), the recommendation (the fastest trial that fits and computes the same, with the
``SFTConfig`` arguments that run it), and what the user allowed them to be (:class:`Policy`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..core.columns import fmt_duration, fmt_gib
from ..events.schema import MISMATCH, RUN_FAILED_KINDS
from ..core.knobs import KNOBS
from ..core.knobs import sft_args as knob_sft_args
from .compare import ends_of, faster_first
from .diagnosis import MEMORY_SHARE
from .runs import LIVE_STATUSES
from .stats import MIN_INTERVAL_STEPS


#: how to go on from a verdict held back for a busy machine (every place that line is shown)
BUSY_WAY_ON = ("rerun with --allow-busy for the verdict marked as measured on a busy machine, or measure "
               "again on a quiet machine")


def held_back(group: list[dict], allow_busy: bool = False) -> str | None:
    """Why no ranking may be claimed for a group of splits (one effective batch), or None.
    ``allow_busy``: a busy machine holds nothing back (:func:`busy_mark` says so instead)."""
    few = [r for r in group if r.get("too_few_steps")]
    if few:
        r = few[0]
        stop = f"; {r['trainer_stop']}" if r.get("trainer_stop") else ""
        return (f"too few steps for a verdict ({r['trial']}: {r['steps_measured']} measured, "
                f"{MIN_INTERVAL_STEPS} needed for an interval{stop})")
    busy = [r for r in group if r.get("busy")]
    if busy and not allow_busy:
        return f"held back: the machine was busy ({busy[0]['busy']}); {BUSY_WAY_ON}"
    changed = [r for r in group if r.get("env_changed")]
    if changed:
        return f"held back: {changed[0]['env_changed']}"
    return None


def not_as_planned(rows: list[dict]) -> dict[tuple, str]:
    """(machine, effective batch) -> why no answer is given for it: a trial whose runs trained
    another split or setting than planned (:func:`tracetui.runner.supervise.as_planned`). The
    others' answer would look complete while a planned split was never measured."""
    out: dict[tuple, list[str]] = {}
    for r in rows:
        if MISMATCH in (r.get("failed_kinds") or ()) or r.get("status") == MISMATCH:
            trained = f" (trained {r['trained']})" if r.get("trained") else ""
            out.setdefault((r["machine"], r["effective_batch"]), []).append(f"{r['trial']}{trained}")
    return {k: f"{_and(v)} did not train what was planned, so the splits were not all measured"
            for k, v in out.items()}


def busy_mark(group: list[dict]) -> str:
    """The words every answer given under ``--allow-busy`` carries for a group measured on a
    busy machine ("" when it was quiet)."""
    busy = [r for r in group if r.get("busy")]
    return f" [measured on a busy machine: {busy[0]['busy']}]" if busy else ""


def scope_note(rows: list[dict]) -> str:
    """What the intervals cover: with one run per split, only step-to-step noise. Nothing where
    nothing is compared (one trial: ``tracetui run``, a watched script)."""
    timed = [r for r in rows if r.get("step_ms_median")]
    if len(timed) > 1 and all(r.get("ci_scope") == "steps" for r in timed):
        if any((r.get("runs") or 1) > 1 for r in timed):
            return ("intervals cover step noise only: the runs were too short to measure how fresh processes "
                    "differ (more --steps)")
        return "one run per split: intervals cover step noise only, not how fresh processes differ (--repeats 2+)"
    return ""


@dataclass(frozen=True)
class Policy:
    """What the user allowed the answer to be (``--allow-result-changes``, ``--allow-busy``):
    one value, so that the verdict, the recommendation and every output that carries them agree."""

    allow_result_changes: bool = False
    allow_busy: bool = False

    @classmethod
    def of(cls, obj) -> "Policy":
        """From a config or parsed flags (whichever attributes they have)."""
        return cls(bool(getattr(obj, "allow_result_changes", False)), bool(getattr(obj, "allow_busy", False)))


def verdict(rows: list[dict], policy: Policy = Policy()) -> str:
    """The one-line answer, per effective batch: which split is fastest and by how much."""
    lines = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("step_ms_median") and r["status"] not in RUN_FAILED_KINDS:  # a failed split is not ranked
            groups.setdefault((r["machine"], r["effective_batch"], r["world_size"]), []).append(r)
    unplanned = not_as_planned(rows)
    for machine, eb in unplanned:
        if not any(k[:2] == (machine, eb) for k in groups):
            groups[(machine, eb, 0)] = []
    multi_machine = len({k[0] for k in groups}) > 1
    for (machine, eb, _ws), group in groups.items():
        where = f" on {machine}" if multi_machine else ""
        if (machine, eb) in unplanned:
            lines.append(f"effective batch {eb}{where}: no verdict ({unplanned[(machine, eb)]})")
            continue
        fastest, slowest = ends_of(group)
        mem = ""
        if fastest.get("peak_mem_gib") is not None:
            cap = fastest.get("memory_limit_gib") or fastest.get("mem_total_gib")
            mem = f"; peak memory {fastest['peak_mem_gib']:.1f}" + (f" of {fmt_gib(cap)} GiB" if cap else " GiB")
        busy = busy_mark(group) if policy.allow_busy else ""
        if len(group) == 1:
            lines.append(f"{fastest['trial']}: {fastest['step_ms_median']:.1f} ms/step at effective batch {eb}{where}{mem}{busy}")
            continue
        why = held_back(group, policy.allow_busy)
        if why:
            lines.append(f"effective batch {eb}{where}: {why}")
            continue
        lo, hi = fastest.get("speedup_ci_low"), fastest.get("speedup_ci_high")
        how = fastest.get("comparison") or "unpaired"
        paired = how.startswith("paired")
        # "Faster" only when the speedup's interval excludes 1 (paired step by step, or at run
        # level), or, unpaired with one run per split, when the two median intervals are apart.
        if paired or (fastest.get("ci_scope") == "runs" and slowest.get("ci_scope") == "runs"):
            clear = lo is not None and lo > 1.0  # the speedup's interval excludes 1
        else:
            clear = (fastest.get("step_ms_ci_high") is not None and slowest.get("step_ms_ci_low") is not None
                     and fastest["step_ms_ci_high"] < slowest["step_ms_ci_low"])
        if clear:
            ci = f" (95% CI {lo:.2f}-{hi:.2f}x, {how})" if lo is not None else f" ({how})"
            lines.append(f"{fastest['trial']} is {fastest['speedup_vs_slowest']:.2f}x faster than {slowest['trial']}"
                         f"{ci} at effective batch {eb}{where}{mem}{busy}")
        else:
            why = ("the speedup's interval includes 1" if paired or fastest.get("ci_scope") == "runs"
                   else "intervals overlap")
            lines.append(f"no clear difference between {fastest['trial']} and {slowest['trial']} "
                         f"at effective batch {eb}{where} ({why}; {how}){busy}")
    return " | ".join(lines)


def recommendation(rows: list[dict], policy: Policy = Policy(), speak: Callable[[dict], str] | None = None) -> str:
    """The fastest trial that fits with at least 10% memory headroom and computes what the
    others do (unless ``allow_result_changes``), per effective batch, with the ``SFTConfig``
    arguments that run it; ``speak``: how the swept trainer says a trial in its own keys instead
    (a config-file trainer's: :meth:`tracetui.launch.dialects.ConfigFile.words`)."""
    return " | ".join(text for _best, text in _recommend(rows, policy, speak))


def recommended_rows(rows: list[dict], policy: Policy = Policy()) -> list[dict]:
    """The rows :func:`recommendation` recommends (one per machine and effective batch)."""
    return [best for best, _text in _recommend(rows, policy) if best is not None]


def _overlap(a: dict, b: dict) -> bool:
    """Whether two trials are as fast within the intervals: compared step by step where their
    steps pair (the interval of the ratio holds 1), else their step-time intervals overlap (no
    interval: no claim either way)."""
    paired = (a.get("paired_vs") or {}).get(b["trial"])
    if paired is not None:
        return paired[1] <= 1.0 <= paired[2]
    lo_a, hi_a, lo_b, hi_b = (x.get(k) for x in (a, b) for k in ("step_ms_ci_low", "step_ms_ci_high"))
    if None in (lo_a, hi_a, lo_b, hi_b):
        return False
    return lo_b <= hi_a and lo_a <= hi_b


def limit_words(row: dict) -> str:
    """How far a trial is from the device's limit, for the recommendation: its MFU against the
    peak, or why there is none ("" on the CPU, which has no peak to speak of)."""
    mfu = row.get("mfu_pct")
    note = (row.get("mfu_note") or "").split(";")[0]
    if mfu is not None:
        share = f"{mfu:.1f}%" if mfu < 10 else f"{mfu:.0f}%"
        return f"; it runs at {share} MFU ({row['tflops']:.1f} TFLOP/s {note})"
    if row.get("tflops") is not None and note and not note.startswith("no GPU"):
        return f"; it runs at {row['tflops']:.1f} TFLOP/s ({note})"
    return ""


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _recommend(rows: list[dict], policy: Policy, speak: Callable[[dict], str] | None = None):
    """``(row or None, text)`` per machine and effective batch."""
    unfinished = {(r["machine"], r["effective_batch"]) for r in rows
                  if r["status"] in LIVE_STATUSES}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("step_ms_median") and r["status"] == "ok":
            groups.setdefault((r["machine"], r["effective_batch"]), []).append(r)
    unplanned = not_as_planned(rows)
    for key in unplanned:
        groups.setdefault(key, [])
    for (_m, eb), group in groups.items():
        if (_m, eb) in unfinished:
            continue  # no advice while splits of this effective batch are still running
        if (_m, eb) in unplanned:
            yield None, f"effective batch {eb}: no recommendation ({unplanned[(_m, eb)]})"
            continue
        group = [r for r in group if r.get("loss_finite", True)]  # a run whose loss went NaN diverged
        ok, same, refused = _candidates(group, eb, policy)
        if refused:
            yield None, refused
            continue
        best = min(same, key=faster_first(same))
        text = _recommendation(best, eb, group, ok, same, policy, speak)
        if len({k[0] for k in groups}) > 1:  # logs of several machines (or files): which one
            text = text.replace(f"effective batch {eb}", f"effective batch {eb} on {_m}", 1)
        yield best, text


def _fits(r: dict) -> bool:
    """Whether a split's peak leaves the memory headroom (of its limit, else of the device)."""
    cap = r.get("memory_limit_gib") or r.get("mem_total_gib")
    return r.get("peak_mem_gib") is None or not cap or r["peak_mem_gib"] <= MEMORY_SHARE * cap


def _candidates(group: list[dict], eb: Any, policy: Policy) -> tuple[list[dict], list[dict], str]:
    """The splits of an effective batch that fit (``ok``) and of those the ones that may be
    recommended (``same``: not changing the result unless allowed), or why none is."""
    if not group:
        return [], [], f"effective batch {eb}: no recommendation (every split's loss went NaN or infinite)"
    why = held_back(group, policy.allow_busy)
    if why:
        return [], [], f"effective batch {eb}: no recommendation ({why})"
    ok = [r for r in group if _fits(r)]
    if not ok:
        return [], [], f"effective batch {eb}: no split leaves {1 - MEMORY_SHARE:.0%} memory headroom"
    same = ok if policy.allow_result_changes else [r for r in ok if not r.get("changes_result")]
    if not same:
        return ok, [], (f"effective batch {eb}: every trial that fits changes the result "
                        "(--allow-result-changes to recommend one anyway)")
    return ok, same, ""


def _recommendation(best: dict, eb: Any, group: list[dict], ok: list[dict], same: list[dict], policy: Policy,
                    speak: Callable[[dict], str] | None) -> str:
    """The advice for ``best``: its ties, what to check, a faster split that changes the result,
    how to set it, the projected runs, its limits and the machine's load."""
    text = f"use {best['trial']} for effective batch {eb}"
    if best.get("changes_result"):
        text += f" (it changes the result: {best['changes_result']})"
    ties = [r["trial"] for r in same if r is not best and _overlap(best, r)]
    if ties:
        text += f" ({_and(ties)} {'is' if len(ties) == 1 else 'are'} as fast within the intervals)"
    faster = [r for r in ok if r["step_ms_median"] < best["step_ms_median"] and r.get("changes_result")]
    drift = [r for r in group if r.get("loss_ok") is False and not r.get("changes_result")]
    if drift:
        text += f" (but check: {drift[0]['trial']}'s {drift[0]['loss_note']})"
    if faster:
        f = min(faster, key=lambda r: r["step_ms_median"])
        text += (f" ({f['trial']} is faster but changes the result: {f['changes_result']}; "
                 "--allow-result-changes to recommend it)")
    text += speak(best) if speak is not None else _how_to_set(best)
    proj = [r for r in sorted(group, key=lambda r: r["step_ms_median"]) if r.get("projected_s")]
    if proj:
        text += " (" + "; ".join(f"{r['trial']}: {fmt_duration(r['projected_s'])}" for r in proj) + ")"
    text += limit_words(best)
    if policy.allow_busy:
        text += busy_mark(group)
    return text


def _how_to_set(best: dict) -> str:
    """A varied trial's settings as the script would write them (SFTConfig, loading the model)."""
    if not best.get("varied"):
        return ""
    args = sft_arguments(best)
    keep = {"per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing"}
    keep |= {k for name, v in best["varied"].items() for k in KNOBS[name].sft(v)}
    text = "; in SFTConfig: " + ", ".join(f"{k}={v!r}" for k, v in args.items() if k in keep)
    model = {k: v for name, v in best["varied"].items() for k, v in KNOBS[name].model(v).items()}
    if model:
        text += "; loading the model: " + ", ".join(f"{k}={v!r}" for k, v in model.items())
    return text


def sft_arguments(row: dict) -> dict[str, Any]:
    """The ``SFTConfig`` arguments that run ``row``'s trial as tracetui measured it: the split,
    and each speed setting at the value it ran with (defaults included, as TRL's differ)."""
    values = dict(row.get("knob_values") or {})
    values.update(row.get("varied") or {})
    out: dict[str, Any] = {"per_device_train_batch_size": row["micro_batch"],
                           "gradient_accumulation_steps": row["grad_accum"]}
    out.update(knob_sft_args(values))
    return out
