"""The charts (plotext): the phases of each split's median step, the selected run's step times
and GPU samples, throughput, and peak memory against the micro-batch; and the GPU status line."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual.widgets import Static
from textual_plotext import PlotextPlot

from ...analysis import MEMORY_SHARE, PROBE_WHY, Results, RunData
from ...core.phases import PHASES
from ...core.text import clean, safe_text
from .names import row_label, short_machine


def phase_legend() -> Text:
    text = Text()
    for phase in PHASES:
        r, g, b = phase.rgb
        text.append("█", style=f"rgb({r},{g},{b})")
        text.append(f"{phase.short} ")
    text.append("(ms of the median step)", style="dim")
    return text


#: the step and GPU charts show this many of the latest points (plotting is per point)
STEP_WINDOW = 300
GPU_WINDOW = 600


class Chart(PlotextPlot):
    """A plotext chart redrawn from scratch on each update."""

    def start(self, has_data: bool, empty_title: str):
        """Clear the figure; with no data, show ``empty_title`` and return None, else the plot."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if not has_data:
            plt.title(clean(empty_title))
            self.refresh()
            return None
        return plt


class BarChart(Chart):
    """Horizontal bars, one per summary row, drawn again when the chart's width changes: a bar's
    label takes at most :data:`LABEL_SHARE` of the width, cut with an ellipsis (plotext fails
    when the labels leave the bars no column: a long GPU name or varied value crashed the
    monitor)."""

    rows_shown: list[dict] = []

    def on_resize(self) -> None:
        self.update_from(self.rows_shown)

    def labels(self, labels: list[str]) -> list[str]:
        width = self.size.width or (self.app.size.width if self.app else 80)
        most = max(LABEL_MIN, int(width * LABEL_SHARE))
        out = []
        for label in labels:
            text = Text(clean(label))
            text.truncate(most, overflow="ellipsis")
            out.append(text.plain)
        return out


#: the share of a bar chart's width its labels may take, and the fewest cells they keep
LABEL_SHARE = 0.5
LABEL_MIN = 8


def phase_bars(rows: list[dict]) -> tuple[list[str], list[list[float]]]:
    """The phase chart's labels and stacked values: each row's phase columns, which the analysis
    apportions so that they add up to its median step exactly (the bar ends at the step median)."""
    rows = [r for r in rows if r.get("step_ms_median")]
    multi = len({r["machine"] for r in rows}) > 1
    labels = [row_label(r, multi) for r in rows]
    data = [[r.get(p.field) or 0.0 for r in rows] for p in PHASES]
    return labels, data


class PhaseChart(BarChart):
    """Stacked bars: the median optimizer step of each split, divided among its phases (ms)."""

    def update_from(self, rows: list[dict]) -> None:
        self.rows_shown = rows
        labels, data = phase_bars(rows)
        plt = self.start(bool(labels), "waiting for measured steps")
        if plt is None:
            return
        # Horizontal: the terminal's width gives the bars far finer steps than its height.
        plt.stacked_bar(self.labels(labels), data, color=[p.rgb for p in PHASES], width=0.4, orientation="horizontal")
        self.refresh()


class StepChart(Chart):
    """Step time over steps of one run (the selected one), warm-up steps marked apart."""

    def update_from(self, run: RunData | None, name: str = "") -> None:
        steps = [s for s in (run.steps[-STEP_WINDOW:] if run else []) if s.get("rank", 0) == 0]
        plt = self.start(bool(steps), "step time (ms): no steps yet")
        if plt is None:
            return
        warm = [s for s in steps if s.get("warmup")]
        meas = [s for s in steps if not s.get("warmup")]
        if warm:
            plt.scatter([s["step"] for s in warm], [s["wall_ms"] for s in warm], label="warm-up", color="yellow", marker="x")
        if meas:
            plt.plot([s["step"] for s in meas], [s["wall_ms"] for s in meas], label="measured", color="cyan", marker="braille")
        plt.title(clean(f"step time (ms): {name or run.label}"))
        plt.xlabel("optimizer step")
        self.refresh()


class ThroughputChart(BarChart):
    """Tokens per second per split."""

    def update_from(self, rows: list[dict]) -> None:
        self.rows_shown = rows
        rows = [r for r in rows if r.get("tokens_per_s")]
        plt = self.start(bool(rows), "throughput (tokens/s): waiting for measured steps")
        if plt is None:
            return
        multi = len({r["machine"] for r in rows}) > 1
        plt.bar(self.labels([row_label(r, multi) for r in rows]), [r["tokens_per_s"] for r in rows], color="green", width=0.4,
                orientation="horizontal")
        plt.title("throughput (tokens/s)")
        self.refresh()


@dataclass
class MemoryPoints:
    """The search's memory model against what ran, per micro-batch (GiB)."""

    measured: list[tuple[int, float]] = field(default_factory=list)
    predicted: list[tuple[int, float]] = field(default_factory=list)
    limit: float | None = None
    limit_what: str = ""


def memory_points(rows: list[dict], results: Results) -> MemoryPoints:
    """Each trial's and each memory probe's measured peak, each trial's predicted peak (the
    line the search fitted from its probes), and the memory bound, for the first machine's first
    effective batch with a prediction (else with a peak)."""
    with_pred = [r for r in rows if r.get("predicted_mem_gib") is not None]
    pick = (with_pred or [r for r in rows if r.get("peak_mem_gib") is not None] or [None])[0]
    out = MemoryPoints()
    if pick is None:
        return out
    same = [r for r in rows if (r["machine"], r["effective_batch"]) == (pick["machine"], pick["effective_batch"])]
    out.measured = [(r["micro_batch"], r["peak_mem_gib"]) for r in same if r.get("peak_mem_gib") is not None]
    for run in results.runs.values():  # the probes are runs, not rows
        if run.machine == pick["machine"] and str(run.started.get("why") or "").startswith(PROBE_WHY):
            peaks = [st["peak_mem_gib"] for st in run.steps if st.get("peak_mem_gib") is not None]
            if peaks:
                out.measured.append((run.trial.micro_batch, max(peaks)))
    out.predicted = sorted((r["micro_batch"], r["predicted_mem_gib"]) for r in same
                           if r.get("predicted_mem_gib") is not None)
    limits = [r["memory_limit_gib"] for r in same if r.get("memory_limit_gib")]
    cards = [r["mem_total_gib"] for r in same if r.get("mem_total_gib")]
    if limits:
        out.limit, out.limit_what = limits[0], "--memory-limit"
    elif cards:
        out.limit, out.limit_what = cards[0], "the card"
    return out


class MemoryChart(Chart):
    """Peak memory against the micro-batch: what each trial and probe measured, the search's
    predicted line, and the memory bound's share a split may take (:data:`MEMORY_SHARE`: the
    headroom the recommendation and the search keep)."""

    points: MemoryPoints | None = None

    def update_from(self, rows: list[dict], results: Results) -> None:
        pts = self.points = memory_points(rows, results)
        plt = self.start(bool(pts.measured or pts.predicted), "peak memory (GiB): no peaks yet")
        if plt is None:
            return
        xs = [m for m, _ in pts.measured + pts.predicted]
        if pts.predicted:
            plt.plot([m for m, _ in pts.predicted], [g for _, g in pts.predicted], label="predicted",
                     color="magenta", marker="braille")
        if pts.measured:
            plt.scatter([m for m, _ in pts.measured], [g for _, g in pts.measured], label="measured",
                        color="cyan", marker="o")
        if pts.limit:
            span = [min(xs), max(xs)]
            plt.plot(span, [MEMORY_SHARE * pts.limit] * 2, label=f"{MEMORY_SHARE:.0%} of {pts.limit_what}", color="red", marker="braille")
        plt.xlabel("micro-batch")
        plt.title("peak memory (GiB) per micro-batch")
        self.refresh()


class GpuChart(Chart):
    """GPU utilisation % and memory used over time, from the NVML samples of one run."""

    def update_from(self, run: RunData | None, name: str = "") -> None:
        samples = run.gpu[-GPU_WINDOW:] if run else []
        plt = self.start(bool(samples), f"{name + ': ' if name else ''}no GPU samples")
        if plt is None:
            return
        t0 = samples[0]["t"]
        xs = [s["t"] - t0 for s in samples]
        plt.plot(xs, [s["util"] for s in samples], label="util %", color="cyan", marker="braille")
        total = samples[-1].get("mem_total_gib") or 1.0
        plt.plot(xs, [100.0 * s["mem_used_gib"] / total for s in samples], label="memory %", color="magenta",
                 marker="braille")
        plt.ylim(0, 100)
        plt.xlabel("seconds")
        plt.title(clean(f"{run.machine} {name or run.label}"))
        self.refresh()


class GpuStatus(Static):
    """One line per machine: the latest GPU reading of its selected (or latest) run, or why there
    is none. A CPU run's notice never speaks for a GPU machine."""

    def update_from(self, run: RunData | None, results: Results) -> None:
        machines: dict[str, list[RunData]] = {}
        for r in results.runs.values():
            if r.started:
                machines.setdefault(r.machine, []).append(r)
        if not machines:
            self.update(Text("No GPU samples yet", style="dim"))
            return
        multi = len(machines) > 1
        order = sorted(machines, key=lambda m: (run is None or m != run.machine, m))
        text = Text()
        for m in order[:3]:
            runs = machines[m]
            pick = run if run is not None and run.machine == m else None
            if pick is None or not pick.gpu:
                pick = next((r for r in reversed(runs) if r.gpu), pick or runs[-1])
            if text:
                text.append("\n")
            head = f"{short_machine(m)}: " if multi else ""
            if pick.gpu:
                g = pick.gpu[-1]
                power = f" · {g['power_w']:.0f} W" if g.get("power_w") is not None else ""
                name = "" if multi else f"{m} · "
                text.append(f"{head}{name}util {g['util']:.0f}% · memory {g['mem_used_gib']:.1f}/"
                            f"{g['mem_total_gib']:.0f} GiB{power}")
                stopped = [n for n in pick.notices if "NVML" in n]
                if stopped:
                    text.append(f" ({stopped[-1]})", style="yellow")
                continue
            if m == "CPU":  # one line, so that the run list keeps its rows at 80x24
                text.append(f"{head}host clock, no GPU" if multi else "CPU run: host clock, no GPU", style="dim")
                continue
            why = next((n for r in reversed(runs) for n in r.notices if "GPU" in n or "NVML" in n or "CPU" in n), "")
            text.append(f"{head}no GPU samples" + (f": {why}" if why else " yet"), style="dim")
        self.update(safe_text(text))
