"""Append-only JSONL event logs: every event is on disk as soon as it arrives.

One line per event, flushed at once, so a crash of anything (worker, TUI, the machine's power
aside) loses nothing already measured, and ``tracetui show`` can rebuild every table from it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable

from .events import parse_line

#: lines longer than this are not events (and not read into memory whole)
MAX_LINE = 1 << 20


class EventLog:
    """Appends events to ``path`` as JSON lines, flushing each one."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(self.path, "a", encoding="utf-8")
        self.error: str | None = None

    def append(self, event: dict) -> bool:
        """Write one event; on a write error remember it (``error``) and keep going."""
        if self._fh is None:
            return False
        try:
            self._fh.write(json.dumps(event, separators=(",", ":"), default=_json_default) + "\n")
            self._fh.flush()
            return True
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"
            return False

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None


def _json_default(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return str(obj)


@dataclass
class ReadReport:
    events: list[dict] = field(default_factory=list)
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def summary(self) -> str:
        if not self.skipped:
            return ""
        parts = ", ".join(f"{n} {r}" for r, n in sorted(self.reasons.items(), key=lambda kv: -kv[1]))
        return f"skipped {self.skipped} bad line(s): {parts}"


def read_events(paths: Iterable[str | os.PathLike], report: ReadReport | None = None) -> ReadReport:
    """Read and validate events from JSONL files, skipping (and counting) what is broken:
    truncated or garbage lines, unknown schema versions, events that break the schema."""
    report = report or ReadReport()
    for path in paths:
        with open(path, "rb") as fh:
            for raw in fh:
                if len(raw) > MAX_LINE:
                    report.skip("over-long line")
                    continue
                line = raw.strip()
                if not line:
                    continue
                event, why = parse_line(line)
                if event is not None:
                    report.events.append(event)
                else:
                    report.skip("not JSON (truncated or garbage)" if why == "not JSON" else why)
    return report
