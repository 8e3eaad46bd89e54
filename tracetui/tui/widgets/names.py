"""How the monitor names what it shows: a trial's row and a run (machine, split, repeat, GPU,
varied settings), the row a run is one run of, and the failed runs. No drawing here."""

from __future__ import annotations

from dataclasses import dataclass

from ...analysis import Results, RunData, repeat_mark
from ...events.schema import FAIL_KINDS
from ...core.knobs import SHORT
from ...core.trial import Trial, format_value


def short_machine(name: str | None) -> str:
    """``NVIDIA H200`` -> ``H200``: enough to tell machines apart in a narrow column; a replay of
    several logs keeps the log's name (``H200 (fixed_1a)`` -> ``H200(fixed_1a)``)."""
    name = name or "CPU"
    if name.endswith(")") and " (" in name:
        gpu, log = name[:-1].split(" (", 1)
        return f"{short_machine(gpu)}({log[:16]})"
    for prefix in ("NVIDIA ", "GeForce ", "Tesla ", "AMD ", "Radeon "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace(" PCIe", "").replace(" SXM", "")[:14]


def row_name(row: dict) -> str:
    """A summary row's label: its trial (the split with varied settings), else its split."""
    return row.get("trial") or row["split"]


def row_label(row: dict, multi_machine: bool) -> str:
    name = row_name(row)
    return f"{short_machine(row['machine'])} {name}" if multi_machine else name


def run_varied(run: RunData) -> dict:
    s = run.started
    return s.get("varied") or s.get("settings") or {}


def row_of(run: RunData | None, rows: list[dict]) -> dict | None:
    """The summary row (trial) that ``run`` is one run of."""
    if run is None or not run.started:
        return None
    s = run.started
    ws = s.get("world_size", 1)
    eb = s.get("effective_batch") or s.get("micro_batch", 0) * s.get("grad_accum", 0) * ws
    found = [r for r in rows if r["machine"] == run.machine and r["micro_batch"] == s.get("micro_batch")
             and r["grad_accum"] == s.get("grad_accum") and r.get("world_size", 1) == ws
             and r["effective_batch"] == eb]
    varied = run_varied(run)
    exact = [r for r in found if all(varied.get(k) == v for k, v in (r.get("varied") or {}).items())]
    return (exact or found or [None])[0]


def group_of(row: dict, rows: list[dict]) -> list[dict]:
    """The trials ``row`` is compared with: same machine and effective batch."""
    return [r for r in rows if r["machine"] == row["machine"] and r["effective_batch"] == row["effective_batch"]]


def multi_machine(results: Results) -> bool:
    return len({r.machine for r in results.runs.values() if r.started}) > 1


def failures(results: Results) -> list[tuple[str, RunData]]:
    """Every run that failed, with its label: the failures panel and the headline."""
    multi = multi_machine(results)
    return [(run_name(rid, run, multi), run) for rid, run in results.runs.items() if run.status in FAIL_KINDS]


def run_trial(run: RunData | None) -> Trial | None:
    """The trial a run measured, from its start event's fields (None before it started)."""
    return run.trial if run is not None and "micro_batch" in run.started else None


@dataclass(frozen=True)
class RunLabel:
    """How the monitor names a run: its trial as the table writes it, with the run's own marks
    beside the split (``H200 16x1#2@1 ckpt=off liger=on``: machine, repeat, GPU)."""

    #: the machine (replays of several), the split, which repeat, which GPU
    head: str
    trial: Trial | None = None

    def text(self) -> str:
        settings = self.trial.settings_label(SHORT) if self.trial else ""
        return f"{self.head} {settings}" if settings else self.head


def run_label(rid: str, run: RunData | None, multi: bool, planned: Trial | None = None) -> RunLabel:
    """A run's label (``planned``: the trial of a run not started yet)."""
    trial = run_trial(run) or planned
    if trial is not None:
        head = trial.split
    else:  # nothing says which split yet (never the run id's host-pid-time)
        head = run.label if run is not None and run.started else "starting"
    if repeat_mark(rid):  # a repeat: which one
        head += f"#{repeat_mark(rid)}"
    gpu = run.started.get("gpu") if run is not None else None
    if gpu is not None:
        head += f"@{gpu}"
    if multi and run is not None and run.started:
        head = f"{short_machine(run.machine)} {head}"
    return RunLabel(head, trial)


def run_name(rid: str, run: RunData | None, multi: bool, planned: Trial | None = None) -> str:
    """A run's label wherever the monitor names one: the detail pane, the timeline, the
    failures, the charts' titles."""
    return run_label(rid, run, multi, planned).text()


#: a setting a trial was not run with (a replay of sweeps that varied different settings)
_NOT_SET = object()


def fit_run_labels(labels: list[RunLabel], width: int) -> tuple[str, list[str]]:
    """The run list's trial column in ``width`` cells: its header and each run's label. Whole
    labels where they all fit; else each varied setting's value in a column of its own under
    its name (``16x1#2 off  on`` under ``trial  ckpt liger``): as short as the values, and no
    two trials alike (cutting whole labels made ``16x1 +c`` of two different trials)."""
    whole = [label.text() for label in labels]
    keys = sorted({k for label in labels if label.trial for k, _ in label.trial.settings})
    if not keys or max(map(len, whole), default=0) <= width:
        return "trial", whole
    columns = [("trial", [label.head for label in labels])]
    for key in keys:
        values = [label.trial.setting(key, _NOT_SET) if label.trial else _NOT_SET for label in labels]
        columns.append((SHORT.get(key, key), ["-" if v is _NOT_SET else format_value(v) for v in values]))
    widths = [max(len(head), *map(len, values)) for head, values in columns]
    header = " ".join(head.ljust(w) for (head, _), w in zip(columns, widths)).rstrip()
    rows = [" ".join(values[i].ljust(w) for (_, values), w in zip(columns, widths)).rstrip()
            for i in range(len(labels))]
    return header, rows
