"""The comparison as CSV or JSON text (one row per split), and every measured step as CSV text.
Written to files by :mod:`tracetui.outputs.writer`, the one writer.

The summary's formats are one registry, :data:`FORMATS`: each :class:`Format` names itself, the
extensions of the files it goes into and the function that writes it. ``--export``'s choices,
the format a ``-o`` file's extension asks for, and the writer's choice of function all read it,
so a new format is one :func:`register` call."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..events.schema import dumps
from ..analysis import Results
from ..core.columns import CSV_KEYS
from ..core.phases import BETWEEN, FIELDS, PHASES
from ..core.text import clean

#: declared in :mod:`tracetui.core.columns`, with the monitor's table
SUMMARY_COLUMNS = list(CSV_KEYS)

#: a phase measured per micro-batch has its step's sum and, in ``<phase>_ms_each``, each value;
#: ``<kind>_ms_after``: the trainer's work after the step, before the next (in no step's wall)
STEP_COLUMNS = (["run_id", "split", "rank", "step", "warmup", "wall_ms", "host_ms"] + list(FIELDS)
                + ["loss", "tokens", "samples", "peak_mem_gib"] + [f"{p.field}_each" for p in PHASES if p.per_micro]
                + [f"{b.name}_ms_after" for b in BETWEEN])


def _cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):  # (no reader's number: left empty)
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.1f}"
    return v


#: every character that ends a line for some reader (``str.splitlines``'s): a field holding one
#: is quoted, so that no reader splits a row (the csv module quotes only ``\n``, not ``\r``)
_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _field(v: Any) -> str:
    # what a field quotes from outside (a message, a GPU name) is one line of printable text,
    # whatever reads the file (a terminal given `cat`); quoted below all the same
    s = clean(_cell(v))
    if "," in s or '"' in s or not _BREAKS.isdisjoint(s):
        return '"' + s.replace('"', '""') + '"'
    return s


def csv_text(columns: list[str], rows: Iterable[dict]) -> str:
    """CSV (RFC 4180 quoting, ``\n`` between rows) of ``rows``' values under ``columns``."""
    return "".join(",".join(_field(v) for v in line) + "\n"
                   for line in [columns] + [[r.get(k) for k in columns] for r in rows])


def summary_csv(rows: list[dict]) -> str:
    return csv_text(SUMMARY_COLUMNS, rows)


def summary_json(rows: list[dict], answer, time: list[dict] | None = None, handoff: dict | None = None) -> str:
    """The summary as JSON: ``answer`` (:class:`tracetui.outputs.writer.Answer`), the rows, where each
    sweep's time went (:func:`tracetui.analysis.time_spent`) and ``handoff`` (the recommendation's
    command and config file, and the policy it was given under)."""
    # NaN/Infinity (a loss gone NaN) are written as null: bare NaN is not JSON to most readers.
    return dumps(dict({"verdict": answer.verdict, "recommendation": answer.recommendation, "note": answer.note},
                      **(handoff or {}),
                      splits=[dict({k: r.get(k) for k in SUMMARY_COLUMNS}, settings=r.get("settings") or {})
                              for r in rows],
                      time=time or []), indent=2)


def steps_csv(results: Results) -> str:
    def lines():
        for run in results.runs.values():
            for s in run.steps:
                line = {"run_id": run.run_id, "split": run.label, "rank": s.get("rank", 0), "step": s["step"],
                        "warmup": s["warmup"], "wall_ms": s["wall_ms"], "host_ms": s.get("host_ms"),
                        "loss": s.get("loss"), "tokens": s.get("tokens"), "samples": s.get("samples"),
                        "peak_mem_gib": s.get("peak_mem_gib")}
                for p in PHASES:
                    if p.per_micro:
                        each = s.get(p.field) or []
                        line[p.field] = float(sum(each))
                        line[f"{p.field}_each"] = " ".join(f"{x:.3f}" for x in each)
                    else:
                        line[p.field] = s.get(p.field)
                after = s.get("between_ms") if isinstance(s.get("between_ms"), dict) else {}
                for b in BETWEEN:
                    each = after.get(b.name)
                    line[f"{b.name}_ms_after"] = float(sum(each)) if isinstance(each, list) else None
                yield line

    return csv_text(STEP_COLUMNS, lines())


@dataclass(frozen=True)
class Summary:
    """What a summary format writes from: the rows and their answer, and (asked for only by the
    formats that hold them, as they take time) where the time went and the recommendation
    handed on (:meth:`tracetui.outputs.writer.Outputs.handoff_data`)."""

    rows: list[dict]
    answer: Any
    time: Callable[[], list[dict]]
    handoff: Callable[[], dict]


@dataclass(frozen=True)
class Format:
    """One summary format: its ``--export`` name, the extensions of the files it goes into
    (lowercase, with the dot) and the function that writes its text."""

    name: str
    extensions: tuple[str, ...]
    write: Callable[[Summary], str]


#: every summary format by name, in ``--export``'s order; the first is the default
FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    FORMATS[fmt.name] = fmt
    return fmt


def format_of_path(path: str, default: str = "csv") -> str:
    """The format whose extension ``path`` has, else ``default``."""
    low = (path or "").lower()
    for fmt in FORMATS.values():
        if any(low.endswith(ext) for ext in fmt.extensions):
            return fmt.name
    return default


register(Format("csv", (".csv",), lambda s: summary_csv(s.rows)))
register(Format("json", (".json",), lambda s: summary_json(s.rows, s.answer, s.time(), s.handoff())))
