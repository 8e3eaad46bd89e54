"""The detail pane: the selected trial's step, speedup and why it failed, what bounds it in words
(:data:`~tracetui.analysis.BOUNDS`), its phases, work, memory, start, settings and loss curve."""

from __future__ import annotations

import math

from rich.text import Text

from ...analysis import BOUNDS, MEMORY_SHARE, Results, RunData, step_span
from ...analysis.between import between_words
from ...analysis.compare import ends_of
from ...core.columns import STATUS_STYLE, fmt
from ...events.schema import FAIL_KINDS
from ...core.phases import PHASES
from ...probe.settings import describe
from .base import Pane
from .names import group_of, row_label, row_name, row_of
from .timeline import draw_bar

#: how the detail pane names a stage that is named for what comes next
_STAGE_WORDS = {"first step": "starting to train", "built, waiting for its turn": "waiting for its turn"}


def start_words(run: RunData) -> str:
    """Where a run's start went, from its process being asked for to its first step: each stage
    it reported (``run_stage``) and how long it took, the last one to the first step's begin
    (for a run built early, its wait for the turn)."""
    stages = sorted(run.stages.items(), key=lambda kv: kv[1])
    steps = [s for s in run.steps if s.get("rank", 0) == 0]
    if not stages or not steps or run.asked_at is None:
        return ""
    first = min(step_span(s)[0] for s in steps) - run.asked_at
    ends = [t for _, t in stages[1:]] + [first]
    parts = [f"{_STAGE_WORDS.get(name, name)} {max(0.0, end - t):.1f}" for (name, t), end in zip(stages, ends)
             if end - t >= 0.05]
    return f"{first:.1f} s from its start to its first step" + (f": {' · '.join(parts)}" if parts else "")


def _bound_words(row: dict) -> Text:
    text = Text()
    bound = row.get("bound")
    if bound:
        text.append(bound, style="bold")
        if row.get("evidence"):
            text.append(f" ({row['evidence']})")
        words = BOUNDS.get(bound)
        if words:
            text.append(f": {words}", style="dim")
    else:
        text.append("bound: not known yet" + (f" ({row['evidence']})" if row.get("evidence") else ""), style="dim")
    return text


def _loss_spark(curve: list[float], width: int = 16) -> str:
    vals = [v for v in curve if v is not None and math.isfinite(v)]
    if not vals:
        return ""
    if len(vals) > width:
        step = len(vals) / width
        vals = [vals[int(i * step)] for i in range(width)]
    lo, hi = min(vals), max(vals)
    ticks = "▁▂▃▄▅▆▇█"
    if hi - lo <= 0:
        return ticks[3] * len(vals)
    return "".join(ticks[min(7, int((v - lo) / (hi - lo) * 7.999))] for v in vals)


def loss_curve(run: RunData) -> list[float]:
    return [s.get("loss") for s in run.steps if s.get("rank", 0) == 0 and s.get("loss") is not None]


def _comm_words(row: dict) -> Text:
    """What the ranks exchange and, for DDP, what it costs: one or two lines."""
    text = Text()
    settings = row.get("settings") or {}
    gib = row.get("comm_gib_per_step")
    if row.get("comm_ms") is not None:
        text.append(f"\ncommunication: all-reduce exposed {row['comm_ms']:.1f} ms per step")
    elif row.get("comm_note"):
        text.append("\ncommunication: exposed time not separable (FSDP communicates in every micro-batch)")
    if gib is not None:
        text.append(f"\n  sends {gib * 1024:.0f} MiB per step per rank: {settings.get('comm_pattern') or ''}",
                    style="dim")
    return text


def _work_words(row: dict) -> Text:
    """The work one step does and how far it is from the device's peak (:mod:`tracetui.core.flops`)."""
    text = Text()
    if row.get("tflop_per_step") is None:
        return text
    text.append(f"\nwork: {_flop(row['tflop_per_step'])} per step")
    if row.get("hw_tflop_per_step") and row["hw_tflop_per_step"] > row["tflop_per_step"] * 1.001:
        text.append(f" ({_flop(row['hw_tflop_per_step'])} with checkpointing's recompute)")
    text.append(f" · {row['tflops']:.3g} TFLOP/s")
    if row.get("mfu_pct") is not None:
        text.append(f" · MFU {row['mfu_pct']:.1f}%", style="bold")
    note = row.get("mfu_note")
    if note:
        text.append(f"\n  {note}", style="dim")
    return text


def _flop(tflop: float) -> str:
    return f"{tflop:.3g} TFLOP" if tflop >= 0.1 else f"{tflop * 1000:.3g} GFLOP"


class DetailPane(Pane):
    """The selected trial: its step and speedup and why it failed, then the bound with its
    evidence in words (the why, near the top), the phase breakdown, memory against the card, the
    settings as really run, the loss curve beside the others' (on a small screen these scroll
    into view)."""

    row: dict | None = None
    run: RunData | None = None
    rows: list[dict] = []
    runs_of: dict = {}
    name: str = ""
    empty: str = "select a run in the run list (arrows)"

    def show(self, row: dict | None, run: RunData | None, rows: list[dict], results: Results, name: str,
             empty: str | None = None) -> None:
        self.row, self.run, self.rows, self.name = row, run, rows, name
        self.runs_of = {}
        for r in results.runs.values():
            key = id(row_of(r, rows))
            self.runs_of.setdefault(key, []).append(r)
        if empty:
            self.empty = empty
        self.refresh(layout=True)  # as tall as its new text (it scrolls in its container)

    def content(self, width: int) -> Text:
        row, run = self.row, self.run
        if run is None and row is None:
            return Text(self.empty, style="dim")
        text = self._head_words(row, run)
        if row and row.get("step_ms_median"):
            text.append_text(self._step_words(row, width))
        if row and row.get("trainer_stop"):
            text.append(f"\n{row['trainer_stop']}", style="yellow")
        if row and row.get("peak_mem_gib") is not None:
            text.append_text(_memory_words(row))
        if row and (row.get("world_size") or 1) > 1:
            text.append_text(_comm_words(row))
        started = start_words(run) if run is not None else ""
        if started:
            text.append(f"\nstarted: {started}", style="dim")
        settings = (run.settings if run is not None and run.settings else (row or {}).get("settings")) or {}
        if settings:
            text.append("\nran with: " + describe(settings), style="dim")
            if settings.get("max_length"):
                text.append(f" · max_length {settings['max_length']}", style="dim")
        if row is not None:
            text.append_text(self._loss_words(row))
        return text

    def _head_words(self, row: dict | None, run: RunData | None) -> Text:
        """The first line: the trial, where it ran, its status and how much was measured; then
        why it failed."""
        text = Text(no_wrap=False)
        multi = len({r["machine"] for r in self.rows}) > 1
        where = row["machine"] if row else (run.machine if run and run.started else "")
        head = self.name or (row_label(row, multi) if row else "")
        text.append(head, style="bold")
        if where:
            text.append(f" on {where}")
        node = (run.started.get("node") if run is not None else None) or (row.get("nodes") if row else None)
        if node:  # (--ray: the node it ran on; a split's row: the nodes of its runs)
            text.append(f" · node {node}")
        status = run.status if run is not None else row["status"]
        text.append(" · ")
        text.append(status, style=STATUS_STYLE.get(status, ""))
        if row:
            text.append(f" · {row.get('runs', 1)} run(s), {row.get('steps_measured', 0)} measured steps")
        if run is not None and run.status in FAIL_KINDS:
            text.append(f"\nwhy it failed: {run.message or 'no reason given'}", style="red")
        return text

    def _step_words(self, row: dict, width: int) -> Text:
        """A measured trial's step: its time, speedup, throughput and work, the bound in words, the
        phases (with their bar), how busy the GPU was and what happened between steps."""
        text = Text()
        text.append(f"\nstep {row['step_ms_median']:.1f} ms")
        if row.get("step_ms_ci_low") is not None:
            text.append(f" (95% CI {row['step_ms_ci_low']:.0f}-{row['step_ms_ci_high']:.0f})")
        sp = row.get("speedup_vs_slowest")
        if sp is not None:
            group = [r for r in group_of(row, self.rows) if r.get("step_ms_median")]
            slow = ends_of(group)[1] if group else row
            text.append(f" · {sp:.2f}x vs {row_name(slow)}", style="bold" if row.get("fastest") else "")
            if row.get("speedup_ci_low") is not None and row["speedup_ci_low"] != row.get("speedup_ci_high"):
                text.append(f" [{row['speedup_ci_low']:.2f}-{row['speedup_ci_high']:.2f}]")
            if row.get("comparison"):
                text.append(f" ({row['comparison']})", style="dim")
        if row.get("tokens_per_s"):
            text.append(f" · {row['tokens_per_s']:.0f} tok/s")
        text.append_text(_work_words(row))
        text.append("\nwhy: ")
        text.append_text(_bound_words(row))
        parts = [f"{p.short} {row.get(p.field) or 0.0:.1f}" for p in PHASES]
        text.append("\nphases (ms of the median step): " + " · ".join(parts))
        segs = [(p.short, p.name, row.get(p.field) or 0.0, p.rgb, 0) for p in PHASES]
        bar, _ = draw_bar(segs, row["step_ms_median"], max(10, width - 2))
        text.append("\n")
        text.append_text(bar)
        if row.get("gpu_util_mean") is not None:
            text.append(f"\nGPU busy {row['gpu_util_mean']:.0f}% of the time")
        between = between_words(row)
        if between:
            text.append(f"\nbetween steps, per run (in no step): {between}")
        return text

    def _loss_words(self, row: dict) -> Text:
        """The loss curve of each trial of the row's group, the row's marked; its loss note."""
        text = Text()
        curves = []
        for other in group_of(row, self.rows):
            runs = [r for r in self.runs_of.get(id(other), []) if loss_curve(r)]
            if runs:
                curves.append((other, loss_curve(runs[-1])))
        if curves:
            text.append("\nloss:")
            for other, curve in curves:
                mark = "▶" if other is row else " "
                last = curve[-1]
                text.append(f"\n {mark}{row_name(other):>8} {_loss_spark(curve)} "
                            f"{fmt(last, '.4f') if last is not None and math.isfinite(last) else 'NaN'}",
                            style="bold" if other is row else "")
            if row.get("loss_ok") is False and row.get("loss_note"):
                text.append(f"\n {row['loss_note']}", style="yellow")
        return text


def _memory_words(row: dict) -> Text:
    """The peak memory against the card's (or ``--memory-limit``), with its bar; per rank."""
    text = Text()
    cap = row.get("memory_limit_gib") or row.get("mem_total_gib")
    text.append(f"\nmemory: peak {row['peak_mem_gib']:.1f}")
    if cap:
        share = row["peak_mem_gib"] / cap
        text.append(f" of {cap:.0f} GiB ({100 * share:.0f}%"
                    + (", --memory-limit" if row.get("memory_limit_gib") else "") + ") ")
        n = 20
        k = min(n, int(round(share * n)))
        text.append("█" * k, style="red" if share > MEMORY_SHARE else "green")
        text.append("░" * (n - k), style="dim")
    else:
        text.append(" GiB")
    if row.get("peak_mem_gib_ranks"):
        text.append(f"\n  per rank (GiB): {row['peak_mem_gib_ranks']}", style="dim")
    return text
