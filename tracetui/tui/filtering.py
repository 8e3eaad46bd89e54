"""The monitor's table filter (``f``): only the trials of one value of a varied setting."""

from __future__ import annotations

from ..core.trial import format_value as fmt_value
from .widgets import PhaseChart, SummaryTable, ThroughputChart


class TableFilter:
    """The filter's state and its key, for :class:`~tracetui.tui.app.TraceApp` (its ``rows``,
    ``say`` and ``query_one``)."""

    #: the table's filter: one varied setting's value, or None for every trial
    setting_filter: tuple[str, object] | None = None

    def filters(self) -> list[tuple[str, object]]:
        """Every value of every varied setting among the trials: setting by setting, each's
        values in the table's order."""
        seen: dict[str, dict[object, None]] = {}
        for r in self.rows:
            for name, value in (r.get("varied") or {}).items():
                seen.setdefault(name, {}).setdefault(value, None)
        return [(name, value) for name in sorted(seen) for value in seen[name]]

    def shown_rows(self) -> list[dict]:
        """The table's rows: those of the filter's value, grouped by the varied settings (the
        trials of one combination together, by micro-batch)."""
        rows = self.rows
        if self.setting_filter is not None:
            name, value = self.setting_filter
            rows = [r for r in rows if (r.get("varied") or {}).get(name, object()) == value]
        if any(r.get("varied") for r in rows):
            rows = sorted(rows, key=lambda r: (r["machine"], r["effective_batch"],
                                               sorted((r.get("varied") or {}).items(), key=str), r["micro_batch"]))
        return rows

    def action_filter(self) -> None:
        """Show only the trials of one value of a varied setting; ``f`` again: the next value,
        then every trial."""
        options = self.filters()
        if not options:
            self.say("nothing varied to filter by (--vary NAME=V1,V2)")
            self.setting_filter = None
            return
        at = options.index(self.setting_filter) + 1 if self.setting_filter in options else 0
        self.setting_filter = options[at] if at < len(options) else None
        if self.setting_filter is None:
            self.say("table: every trial")
        else:
            name, value = self.setting_filter
            self.say(f"table: only {name}={fmt_value(value)} (f: next value)")
        self.query_one(SummaryTable).update_from(self.shown_rows())
        self.query_one(PhaseChart).update_from(self.shown_rows())
        self.query_one(ThroughputChart).update_from(self.shown_rows())
