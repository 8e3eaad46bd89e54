"""The monitor's panels. Each takes the current :class:`~tracetui.analysis.Results` (and the
summary rows) and redraws itself; the app calls them at most a few times a second."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from ..analysis import Results, RunData, median, recommendation, scope_note, verdict
from ..columns import MONITOR, STATUS_STYLE, table_context
from ..phases import PHASES

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

def run_progress(run: RunData, total_steps: int | None) -> tuple[str, str]:
    """``step n/N`` and the time left, from the median step so far."""
    done = max((s["step"] for s in run.steps if s.get("rank", 0) == 0), default=0)
    total = total_steps or (run.started.get("config") or {}).get("steps")
    prog = f"{done}/{total}" if total else str(done)
    left = "-"
    if run.status in ("running", "warming up") and total and run.steps:
        ms = median([s["wall_ms"] for s in run.steps[-10:]])
        secs = (total - done) * ms / 1000.0
        left = f"{secs:.0f}s" if secs < 120 else f"{secs / 60:.0f}m"
    elif run.status == "ok":
        left = "done"
    return prog, left


class Verdict(Static):
    """The one-line answer at the top."""

    def update_from(self, rows: list[dict], fallback: str) -> None:
        line = verdict(rows)
        rec = recommendation(rows)
        note = scope_note(rows)
        text = Text()
        if line:
            text.append(line, style="bold")
            if rec:
                text.append("\n" + rec)
            if note:
                text.append("\n" + note, style="dim")
        else:
            text.append(fallback, style="dim")
        self.update(text)


class RunList(DataTable):
    """Every run with its status, progress and time left; the cursor picks a split for ``r``."""

    #: set once the user moves the cursor; until then the charts follow the running split
    user_moved = False

    def action_cursor_up(self) -> None:
        self.user_moved = True
        super().action_cursor_up()

    def action_cursor_down(self) -> None:
        self.user_moved = True
        super().action_cursor_down()

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        self.add_column("split", key="split", width=7)
        self.add_column("status", key="status", width=10)
        self.add_column("step", key="step", width=6)
        self.add_column("left", key="left", width=4)

    def update_from(self, results: Results, planned: list[tuple[str, str]]) -> None:
        """``planned``: (run_id, label) of runs not started yet, shown as queued."""
        rows = [(rid, run.label, run) for rid, run in results.runs.items() if run.started or run.status != "queued"]
        known = {r[0] for r in rows}
        rows += [(rid, label, None) for rid, label in planned if rid not in known]
        for rid, label, run in rows:
            if "#" in rid.rsplit("/", 1)[-1]:  # a repeat: which one
                label = f"{label}#{rid.rsplit('#', 1)[-1]}"
            status = run.status if run else "queued"
            gpu = run.started.get("gpu") if run else None
            if gpu is not None:
                label = f"{label}@{gpu}"
            prog, left = run_progress(run, None) if run else ("-", "-")
            cells = (label, Text(status, style=STATUS_STYLE.get(status, "")), prog, left)
            if rid in self.rows:
                for col, val in zip(("split", "status", "step", "left"), cells):
                    self.update_cell(rid, col, val)
            else:
                self.add_row(*cells, key=rid)


class Chart(PlotextPlot):
    """A plotext chart redrawn from scratch on each update."""

    def start(self, has_data: bool, empty_title: str):
        """Clear the figure; with no data, show ``empty_title`` and return None, else the plot."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if not has_data:
            plt.title(empty_title)
            self.refresh()
            return None
        return plt


class PhaseChart(Chart):
    """Stacked bars: the median optimizer step of each split, divided among its phases (ms)."""

    def update_from(self, rows: list[dict]) -> None:
        rows = [r for r in rows if r.get("step_ms_median")]
        plt = self.start(bool(rows), "waiting for measured steps")
        if plt is None:
            return
        labels = [r["split"] for r in rows]
        data = [[r.get(p.field) or 0.0 for r in rows] for p in PHASES]
        # Horizontal: the terminal's width gives the bars far finer steps than its height.
        plt.stacked_bar(labels, data, color=[p.rgb for p in PHASES], width=0.4, orientation="horizontal")
        self.refresh()


class StepChart(Chart):
    """Step time over steps of one run (the running one), warm-up steps marked apart."""

    def update_from(self, run: RunData | None) -> None:
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
        plt.title(f"step time (ms): {run.label}")
        plt.xlabel("optimizer step")
        self.refresh()


class ThroughputChart(Chart):
    """Tokens per second per split."""

    def update_from(self, rows: list[dict]) -> None:
        rows = [r for r in rows if r.get("tokens_per_s")]
        plt = self.start(bool(rows), "throughput (tokens/s): waiting for measured steps")
        if plt is None:
            return
        plt.bar([r["split"] for r in rows], [r["tokens_per_s"] for r in rows], color="green", width=0.4,
                orientation="horizontal")
        plt.title("throughput (tokens/s)")
        self.refresh()


class GpuChart(Chart):
    """GPU utilisation % and memory used over time, from the NVML samples of one run."""

    def update_from(self, run: RunData | None) -> None:
        samples = run.gpu[-GPU_WINDOW:] if run else []
        plt = self.start(bool(samples), "GPU: no samples")
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
        plt.title(f"GPU {run.label}")
        self.refresh()


class GpuStatus(Static):
    """One line: the latest GPU reading, or why there is none."""

    def update_from(self, run: RunData | None, results: Results) -> None:
        if run is not None and run.gpu:
            g = run.gpu[-1]
            power = f" · {g['power_w']:.0f} W" if g.get("power_w") is not None else ""
            name = (run.started.get("env") or {}).get("gpu_name") or "GPU"
            text = Text(f"{name} · util {g['util']:.0f}% · memory {g['mem_used_gib']:.1f}/"
                        f"{g['mem_total_gib']:.0f} GiB{power}")
            stopped = [n for n in run.notices if "NVML" in n]
            if stopped:
                text.append(f"\n{stopped[-1]}", style="yellow")
            self.update(text)
            return
        why = ""
        for r in reversed(list(results.runs.values())):
            for n in r.notices:
                if "GPU" in n or "NVML" in n or "CPU" in n:
                    why = n
                    break
            if why:
                break
        self.update(Text(f"No GPU samples: {why}" if why else "No GPU samples yet", style="dim"))


class SummaryTable(DataTable):
    """The side-by-side table of every split; the fastest of each effective batch in bold."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        for col in MONITOR:
            self.add_column(col.header, key=col.key)

    def update_from(self, rows: list[dict]) -> None:
        self.clear()
        ctx = table_context(rows)
        for r in rows:
            self.add_row(*(col.show(r, ctx) for col in MONITOR))
