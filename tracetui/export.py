"""Write the comparison as CSV or JSON (one row per split), and every measured step as CSV."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any

from .events import dumps
from .analysis import Results, recommendation, scope_note, summarise, time_spent, verdict
from .columns import CSV_KEYS

#: declared in :mod:`tracetui.columns`, with the monitor's table
SUMMARY_COLUMNS = list(CSV_KEYS)

STEP_COLUMNS = [
    "run_id", "split", "rank", "step", "warmup", "wall_ms", "host_ms", "data_ms", "forward_ms", "backward_ms",
    "optimizer_ms", "other_ms", "loss", "tokens", "samples", "peak_mem_gib", "forward_ms_each", "backward_ms_each",
]


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.1f}"
    return v


def summary_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=SUMMARY_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(r.get(k)) for k in SUMMARY_COLUMNS})
    return buf.getvalue()


def summary_json(rows: list[dict], time: list[dict] | None = None) -> str:
    """The summary as JSON; ``time``: where each sweep's time went (:func:`time_spent`)."""
    # NaN/Infinity (a loss gone NaN) are written as null: bare NaN is not JSON to most readers.
    return dumps({"verdict": verdict(rows), "recommendation": recommendation(rows), "note": scope_note(rows),
                  "splits": [dict({k: r.get(k) for k in SUMMARY_COLUMNS}, settings=r.get("settings") or {})
                             for r in rows],
                  "time": time or []}, indent=2)


def steps_csv(results: Results) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=STEP_COLUMNS, lineterminator="\n")
    w.writeheader()
    for run in results.runs.values():
        for s in run.steps:
            fw, bw = s.get("forward_ms") or [], s.get("backward_ms") or []
            w.writerow({
                "run_id": run.run_id, "split": run.label, "rank": s.get("rank", 0), "step": s["step"],
                "warmup": s["warmup"], "wall_ms": _cell(s["wall_ms"]), "host_ms": _cell(s.get("host_ms")),
                "data_ms": _cell(s.get("data_ms")), "forward_ms": _cell(float(sum(fw))),
                "backward_ms": _cell(float(sum(bw))), "optimizer_ms": _cell(s.get("optimizer_ms")),
                "other_ms": _cell(s.get("other_ms")), "loss": _cell(s.get("loss")), "tokens": _cell(s.get("tokens")),
                "samples": _cell(s.get("samples")), "peak_mem_gib": _cell(s.get("peak_mem_gib")),
                "forward_ms_each": " ".join(f"{x:.3f}" for x in fw),
                "backward_ms_each": " ".join(f"{x:.3f}" for x in bw),
            })
    return buf.getvalue()


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (``-`` = stdout). Raises ``OSError`` with the reason."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def export(results: Results, fmt: str, path: str, project_steps: int | None = None) -> list[dict]:
    rows = summarise(results, project_steps)
    write_text(path, summary_csv(rows) if fmt == "csv" else summary_json(rows, time_spent(results)))
    return rows
