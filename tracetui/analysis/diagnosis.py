"""What bounds a trial (host, GPU, input, memory; on the CPU overhead or compute), from its
row's measurements and its neighbours'."""

from __future__ import annotations

import math

from ..core.columns import fmt_gib

#: GPU busy (% of the step) under which a trial is host-bound, and over which it is GPU-bound
HOST_BOUND_UTIL, GPU_BOUND_UTIL = 45, 85
#: on the CPU: the exponent of forward time per micro-batch against its rows under which a
#: trial is overhead-bound, and over which it is compute-bound
OVERHEAD_EXPONENT, COMPUTE_EXPONENT = 0.4, 0.7
#: peak memory over this share of the card (or ``--memory-limit``): memory-limited
MEMORY_SHARE = 0.9
#: data fetch over this share of the step: input-bound
INPUT_SHARE = 0.3

#: what each bound label means, in words: the help screen, the detail pane and the README say
#: the same (the README's table is checked against this in the tests)
BOUNDS: dict[str, str] = {
    "host-bound": f"GPU busy under {HOST_BOUND_UTIL}% of the step: the GPU waits for the host (Python, kernel "
                  "launches), so a larger micro-batch costs little more and fewer, larger micro-batches win",
    "GPU-bound": f"GPU busy over {GPU_BOUND_UTIL}% of the step: more rows cost proportionally more time, "
                 "so a larger micro-batch gains little per row (the measured steps say how little)",
    "mixed": f"between the two (GPU busy {HOST_BOUND_UTIL}-{GPU_BOUND_UTIL}%, or on the CPU forward time growing "
             "neither flat nor in proportion with the rows): no single limit; the measured step times decide",
    "input-bound": f"data fetch over {INPUT_SHARE:.0%} of the step: the data loader is the limit (more workers, "
                   "pinned memory, pre-tokenised data)",
    "memory-limited": f"peak memory over {MEMORY_SHARE:.0%} of the card (or --memory-limit): little headroom, "
                      "a larger micro-batch may not fit",
    "overhead-bound": "CPU: forward time per micro-batch grows far less than its rows "
                      f"(exponent under {OVERHEAD_EXPONENT:g}): fixed per-call costs dominate, fewer larger "
                      "micro-batches win",
    "compute-bound": f"CPU: forward time grows nearly in proportion with the rows (exponent over {COMPUTE_EXPONENT:g}): "
                     "arithmetic dominates, a larger micro-batch gains little per row (the measured "
                     "steps say how little)",
    "undetermined": "one micro-batch size measured and no GPU samples: nothing to compare against; or the machine "
                    "was busy during the runs the bound would be read from, which bends their times",
}


def diagnose(row: dict, rows: list[dict]) -> tuple[str, str]:
    """Label what bounds a trial, from measurements, with the evidence for it.

    Every trial with a measured step gets a label (the monitor's help and the README say what
    each means). The labels have a clear margin between them, so that neighbouring splits whose
    readings differ by noise do not flip between opposites (:data:`BOUNDS`): GPU busy under
    :data:`HOST_BOUND_UTIL` is host-bound, over :data:`GPU_BOUND_UTIL` GPU-bound, in between
    mixed; on the CPU, how forward time per micro-batch grows with the micro-batch (the exponent
    of a fit over the trial and its neighbours in micro-batch, the smallest one included) is
    overhead-bound under :data:`OVERHEAD_EXPONENT`, compute-bound over :data:`COMPUTE_EXPONENT`,
    mixed between."""
    if not row.get("step_ms_median"):
        return "", ""
    step = row["step_ms_median"]
    data_share = (row.get("data_ms") or 0.0) / step if step else 0.0
    cap = row.get("memory_limit_gib") or row.get("mem_total_gib")
    peak = row.get("peak_mem_gib")
    scaling = _forward_scaling(row, rows)
    if peak is not None and cap and peak / cap > MEMORY_SHARE:
        return "memory-limited", f"peak {peak:.1f} of {fmt_gib(cap)} GiB"
    busy = _busy_among(row, rows)
    if busy:
        return "undetermined", f"the machine was busy ({busy})"
    if data_share > INPUT_SHARE:
        return "input-bound", f"data fetch {100 * data_share:.0f}% of the step"
    util = row.get("gpu_util_mean")
    if util is not None:
        ev = f"GPU busy {util:.0f}%"
        if scaling is not None and scaling[2] > 1:
            ev += f"; forward x{scaling[1]:.1f} for x{scaling[2]:.0f} rows"
        if util < HOST_BOUND_UTIL:
            return "host-bound", ev
        if util > GPU_BOUND_UTIL:
            return "GPU-bound", ev
        return "mixed", ev
    if scaling is not None:
        if scaling[0] < OVERHEAD_EXPONENT:
            return "overhead-bound", _scaling_words(scaling)
        if scaling[0] > COMPUTE_EXPONENT:
            return "compute-bound", _scaling_words(scaling)
        return "mixed", _scaling_words(scaling)
    return "undetermined", "no GPU samples and one micro-batch size: nothing to compare"


def _busy_among(row: dict, rows: list[dict]) -> str:
    """Why the runs a bound would be read from were measured on a busy machine (the trial's own,
    and on the CPU its neighbours in micro-batch whose forward times the exponent is fitted to),
    or "": other processes' load bends step times unevenly, so the label would contradict itself."""
    if row.get("busy"):
        return str(row["busy"])
    if row.get("gpu_util_mean") is not None:
        return ""
    near, peers = _scaling_peers(row, rows)
    for peer in near + peers[:1] if near else []:  # (the smallest micro-batch: the growth's base)
        if peer.get("busy"):
            return str(peer["busy"])
    return ""


def _scaling_peers(row: dict, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The rows :func:`_forward_scaling` reads ``row``'s growth from: its neighbours in
    micro-batch (the fit's points) and every peer (same machine and varied settings, smallest
    micro-batch first); no neighbours with one size."""
    varied = row.get("varied") or {}
    peers = sorted((r for r in rows if r["machine"] == row["machine"] and (r.get("varied") or {}) == varied
                    and (r.get("forward_ms_per_micro") or 0) > 0), key=lambda r: r["micro_batch"])
    sizes = sorted({r["micro_batch"] for r in peers})
    if len(sizes) < 2 or row["micro_batch"] not in sizes:
        return [], peers
    i = sizes.index(row["micro_batch"])
    near = set(sizes[max(0, i - 1): i + 2])
    return [r for r in peers if r["micro_batch"] in near], peers


def _forward_scaling(row: dict, rows: list[dict]) -> tuple[float, float, float, int] | None:
    """How forward time per micro-batch grows with the micro-batch, as (exponent, growth from the
    smallest micro-batch, its ratio of rows, the smallest micro-batch), or None with one size.

    Fitted in log-log over this trial and its neighbours (same machine and varied settings), so
    one noisy reading moves the exponent of three trials a little rather than one label across a
    threshold."""
    near, peers = _scaling_peers(row, rows)
    if not near:
        return None
    pts = [(math.log(r["micro_batch"]), math.log(r["forward_ms_per_micro"])) for r in near]
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    small = peers[0]
    growth = row["forward_ms_per_micro"] / small["forward_ms_per_micro"]
    return slope, growth, row["micro_batch"] / small["micro_batch"], small["micro_batch"]


def _scaling_words(scaling: tuple[float, float, float, int]) -> str:
    """The evidence of a label read from the forward time's growth (:func:`_forward_scaling`)."""
    slope, growth, ratio, small = scaling
    if ratio > 1:
        return f"forward x{growth:.1f} for x{ratio:.0f} rows vs micro-batch {small} (exponent {slope:.2f})"
    return f"forward time per micro-batch grows as rows^{slope:.2f} from here"
