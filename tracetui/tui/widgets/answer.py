"""The answer at the top (the verdict and the recommendation, or why there is none), the
failures panel, and the status line of notices."""

from __future__ import annotations

from rich.text import Text

from ...analysis import LIVE_STATUSES, Policy, Results, recommendation, scope_note, verdict
from .base import Clipped
from .names import failures


class Verdict(Clipped):
    """The answer, always on screen: the verdict, the recommendation, or why there is none."""

    def update_from(self, rows: list[dict], fallback: str, results: Results | None = None,
                    live: bool = True, ended: bool = True, policy: Policy = Policy(), speak=None) -> None:
        """``ended``: the sweep has no more runs to make; until then what the intervals cover is
        not said (a split's second run may be queued still). ``policy``: what the user allowed
        (the same as every other output's); ``speak``: how the swept trainer says a trial in its
        own keys (:class:`tracetui.outputs.writer.Outputs`)."""
        line = verdict(rows, policy)
        rec = recommendation(rows, policy, speak)
        note = scope_note(rows) if ended else ""
        text = Text()
        failed = failures(results) if results is not None else []
        running = results is not None and any(r.status in LIVE_STATUSES for r in results.runs.values())
        if line:
            text.append(line, style="bold")
            if rec:
                text.append("\n" + rec)
            if note:
                text.append("\n" + note, style="dim")
        elif failed and not running and not any(r.get("step_ms_median") for r in rows):
            kinds: dict[str, int] = {}
            for _, run in failed:
                kinds[run.status] = kinds.get(run.status, 0) + 1
            total = len([r for r in results.runs.values()])
            text.append(f"nothing could be measured: {len(failed)} of {total} runs failed "
                        f"({', '.join(f'{n} {k}' for k, n in kinds.items())})", style="bold red")
            label, run = failed[0]
            text.append(f"\n{label}: {run.status}: {run.message or 'no reason given'}")
        else:
            text.append(fallback, style="dim")
            if failed:
                text.append(f"\n{len(failed)} run(s) failed so far: see the failures panel", style="red")
        self.show(text)


class Failures(Clipped):
    """Every failed run and why, runs that failed the same way on one line (three trials
    unavailable for want of a GPU take one line, not three); hidden while nothing failed."""

    def update_from(self, results: Results) -> None:
        failed = failures(results)
        self.display = bool(failed)
        if not failed:
            return
        same: dict[tuple[str, str], list[str]] = {}
        for label, run in failed:
            same.setdefault((run.status, run.message or "no reason given"), []).append(label)
        text = Text(f"failed ({len(failed)}): ", style="bold red")
        for i, ((status, why), labels) in enumerate(same.items()):
            if i:
                text.append("\n")
            text.append(f"{', '.join(labels)}: ", style="bold")
            text.append(f"{status}: {why}")
        self.show(text)


#: how a notice of each severity is written
NOTICE_STYLE = {"warning": "yellow", "error": "bold red"}


class StatusLine(Clipped):
    """Notices (warnings, what a key did): one line above the keys, never over the table; a
    notice longer than the line is read whole on the help screen (the app keeps them all)."""

    def say(self, message: str, severity: str = "information") -> None:
        self.show(Text(message, style=NOTICE_STYLE.get(severity, "")))
