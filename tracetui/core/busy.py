"""When a run counts as measured on a busy machine: the thresholds, and the one-line reason
(:func:`judge`) from the picture a run recorded over its measured steps (:mod:`tracetui.probe.quiet`
measures it; the analysis reads it from the events). Plain data in, words out: no measuring here."""

from __future__ import annotations

from typing import Any

#: other processes' CPU use (cores, averaged over the measured steps) above which a run is
#: flagged: half a core is enough to take turns from a host-bound training thread
OTHER_CPU_CORES = 0.5
#: share of CPU time stolen by the hypervisor above which a run is flagged
STEAL_PCT = 5.0
#: share of GPU samples with a slowdown that is not the workload's own (thermal, hardware brake)
THROTTLE_SHARE = 0.1


def gpu_picture(samples: list[dict]) -> dict[str, Any]:
    """From the GPU samples of the measured steps: other processes and throttling."""
    if not samples:
        return {}
    others = [s.get("other_procs") for s in samples if s.get("other_procs") is not None]
    other_mem = [s.get("other_mem_gib") for s in samples if s.get("other_mem_gib") is not None]
    throttled = [s for s in samples if s.get("slowdown")]
    clocks = sorted(s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz"))
    out: dict[str, Any] = {"gpu_samples": len(samples)}
    if others:
        out["other_gpu_procs"] = max(others)
        out["other_gpu_mem_gib"] = round(max(other_mem), 3) if other_mem else None
    out["slowdown_share"] = round(len(throttled) / len(samples), 3)
    if throttled:
        out["slowdown"] = sorted({r for s in throttled for r in str(s["slowdown"]).split(",")})
    if clocks:
        out["sm_clock_median_mhz"] = clocks[len(clocks) // 2]
    return out


def judge(quiet: dict[str, Any]) -> str | None:
    """Why a run's steps were taken on a busy machine (one line), or None if it was quiet."""
    if not quiet:
        return None
    def num(key: str) -> float | None:  # values from a log: numbers only
        v = quiet.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    why = []
    other = num("other_cpu_cores")
    if other is not None and other > OTHER_CPU_CORES:
        why.append(f"other processes used {other:.1f} CPU cores")
    steal = num("steal_pct")
    if steal is not None and steal > STEAL_PCT:
        why.append(f"the hypervisor took {steal:.0f}% of the CPU")
    procs = num("other_gpu_procs")
    if procs:
        mem = num("other_gpu_mem_gib")
        why.append(f"{procs:.0f} other process(es) on the GPU" + (f" holding {mem:.1f} GiB" if mem else ""))
    share = num("slowdown_share") or 0.0
    if share > THROTTLE_SHARE:
        kinds = quiet.get("slowdown") if isinstance(quiet.get("slowdown"), list) else []
        why.append(f"the GPU was slowed down ({', '.join(str(k) for k in kinds)}) in {100 * share:.0f}% of samples")
    return "; ".join(why) or None
