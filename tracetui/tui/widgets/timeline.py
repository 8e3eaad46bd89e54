"""The timeline: one median step of a trial drawn to scale, phase by phase and micro-batch by
micro-batch, a second trial under it to compare."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from ...analysis import RunData, median
from ...core.phases import PHASES
from .base import Pane


def median_step(run: RunData | None) -> tuple[dict | None, bool]:
    """The run's measured step whose time is the median (the middle one), and whether it is a
    warm-up step (no measured step yet)."""
    if run is None:
        return None, False
    steps = run.measured()
    if steps:
        ordered = sorted(steps, key=lambda s: s["wall_ms"])
        return ordered[(len(ordered) - 1) // 2], False
    warm = [s for s in run.steps if s.get("rank", 0) == 0]
    return (warm[-1], True) if warm else (None, False)


def step_segments(step: dict) -> list[tuple[str, str, float, tuple[int, int, int], int]]:
    """One step as it ran, in order: (label, phase, ms, colour, micro-batch index). The phases
    of one value per micro-batch run micro-batch by micro-batch (f1 b1 f2 b2 ...); a phase of one
    value per step is one block, before them if it is declared before them (the data fetch),
    else after (the optimizer, the rest)."""
    micro = [p for p in PHASES if p.per_micro]
    first = PHASES.index(micro[0]) if micro else len(PHASES)

    def value(p):
        v = step.get(p.field) or ([] if p.per_micro else 0.0)
        return (v if isinstance(v, list) else [v]) if p.per_micro else v

    values = {p.name: value(p) for p in PHASES}

    def block(p) -> tuple[str, str, float, tuple[int, int, int], int]:
        return (p.short, p.name, float(values[p.name]), p.rgb, 0)

    out = [block(p) for p in PHASES[:first] if not p.per_micro]
    for i in range(max((len(values[p.name]) for p in micro), default=0)):
        out += [(f"{p.short[0]}{i + 1}", p.name, float(values[p.name][i]), p.rgb, i)
                for p in micro if i < len(values[p.name])]
    return out + [block(p) for p in PHASES[first:] if not p.per_micro]


def _shade(rgb: tuple[int, int, int], odd: bool) -> str:
    r, g, b = rgb
    if odd:  # every other micro-batch a little darker, so where one ends shows
        r, g, b = int(r * 0.6), int(g * 0.6), int(b * 0.6)
    return f"rgb({r},{g},{b})"


def draw_bar(segments, scale_ms: float, width: int) -> tuple[Text, Text]:
    """The segments to scale in ``width`` cells (``scale_ms`` fills them), and a line of labels
    under the segments wide enough to hold theirs."""
    bar, labels = Text(), Text()
    at = 0.0
    pos = 0
    for label, phase, ms, rgb, i in segments:
        at += max(0.0, ms)
        end = min(width, int(round(at / scale_ms * width))) if scale_ms > 0 else 0
        n = end - pos
        if n <= 0:
            continue
        bar.append("█" * n, style=_shade(rgb, i % 2 == 1))
        labels.append(label[:n].center(n) if n >= len(label) + 1 else " " * n, style="dim")
        pos = end
    return bar, labels


@dataclass
class Lane:
    """One trial's median step on the timeline."""

    name: str
    step: dict
    warmup: bool
    row: dict | None


class Timeline(Pane):
    """One median step of the selected trial drawn to scale: data, then the forward and backward
    of each micro-batch, the optimizer and the other time (labelled as the phases' legend); a second trial stacked under it on the same
    scale to compare (``c`` picks it)."""

    lanes: list[Lane] = []

    def show(self, lanes: list[Lane]) -> None:
        self.lanes = lanes
        self.refresh(layout=True)

    def content(self, width: int) -> Text:
        if not self.lanes:
            return Text("no steps yet: the timeline of one median step appears once a run has stepped",
                        style="dim")
        width = max(10, width - 1)
        scale = max(sum(ms for _, _, ms, _, _ in step_segments(l.step)) for l in self.lanes) or 1.0
        text = Text()
        for n, lane in enumerate(self.lanes):
            segs = step_segments(lane.step)
            total = sum(ms for _, _, ms, _, _ in segs)
            if n:
                text.append("\n")
            text.append(lane.name, style="bold")
            text.append(f"  {total:.1f} ms" + (" (a warm-up step: none measured yet)" if lane.warmup else
                                               " (median step)"))
            mb = len([s for s in segs if s[1] == "forward"])
            text.append(f" · {mb} micro-batch{'es' if mb != 1 else ''}")
            util = (lane.row or {}).get("gpu_util_mean")
            text.append(f" · GPU busy {util:.0f}%" if util is not None else " · no GPU samples",
                        style="bold" if util is not None else "dim")
            fw = [ms for _, ph, ms, _, _ in segs if ph == "forward"]
            if fw:
                text.append(f"\n  forward {median(fw):.1f} ms per micro-batch", style="dim")
            bar, labels = draw_bar(segs, scale, width)
            text.append("\n")
            text.append_text(bar)
            text.append("\n")
            text.append_text(labels)
        axis = f"0 ms{'':{max(0, width - 4 - len(f'{scale:.0f} ms'))}}{scale:.0f} ms"
        text.append("\n" + axis, style="dim")
        legend = Text("\n")
        for p in PHASES:
            legend.append("█", style=_shade(p.rgb, False))
            legend.append(f"{p.short} ")
        legend.append("(darker: every other micro-batch) · c: compare with another trial", style="dim")
        text.append_text(legend)
        return text
