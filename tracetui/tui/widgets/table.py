"""The summary table: every trial side by side, its columns (:mod:`tracetui.core.columns`) chosen by
priority for the width it has."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ...core.columns import MONITOR, STATUS_STYLE, Cell, bound_text, table_context
from ...core.phases import FIELDS
from ...core.text import plain
from .base import cell, cut_words
from .names import row_name, short_machine


def _trial_cell(row: dict, ctx: dict) -> Text:
    name = row_name(row)
    if ctx.get("multi_eb"):
        name = f"{name} (eb {row['effective_batch']})"
    if ctx.get("multi_machine"):
        name = f"{short_machine(row['machine'])} {name}"
    return Text(name, style="bold green" if row.get("fastest") else "")


def _status_cell(row: dict, ctx: dict) -> Text:
    status = row["status"]
    width = ctx.get("status_width", 60)
    if status != "ok" and row.get("message"):
        status = f"{status}: {row['message']}"
    elif row.get("busy"):
        status = f"{status} (busy)"
    return cut_words(Text(status, style=STATUS_STYLE.get(row["status"], "")), width)


def _bound_cell(row: dict, ctx: dict) -> str:
    return bound_text(row) if ctx.get("bound_evidence") else row.get("bound") or "-"


#: the monitor's columns, most wanted first: the first six always come when they fit
PRIORITY = ("split", "status", "step_ms_median", "speedup", "bound", "peak_mem_gib", "tokens_per_s",
            "gpu_util_mean", "mfu_pct", "comparison", "spread", *FIELDS, "final_loss", "steps_measured", "runs",
            "energy_j_per_step", "projected_s", "activation_checkpointing", "gpus", "comm_ms", "ranks")


def pick_columns(rows: list[dict], width: int) -> tuple[list, dict]:
    """The columns that fit in ``width`` cells, chosen in :data:`PRIORITY` order and shown in the
    declared order, and the cell context. Rows failed with a long reason get a short status here
    (the failures panel and the detail pane have it whole)."""
    ctx = table_context(rows)
    by_key = {c.key: c for c in MONITOR}
    order = [k for k in PRIORITY if k in by_key] + [c.key for c in MONITOR if c.key not in PRIORITY]
    ctx["status_width"] = 24 if width < 110 else 32 if width < 160 else 60
    ctx["bound_evidence"] = width >= 150
    cell = {"split": _trial_cell, "status": _status_cell, "bound": _bound_cell}

    def show(col, row):
        f = cell.get(col.key)
        c = f(row, ctx) if f else col.show(row, ctx)
        return Text(c.text, style=c.style) if isinstance(c, Cell) else c

    def need(col) -> int:
        cells = [show(col, r) for r in rows]
        return max([len(col.header or "")] + [Text(str(c)).cell_len if not isinstance(c, Text) else c.cell_len
                                               for c in cells]) + 2

    chosen, used = [], 2  # the table's border
    first = set(PRIORITY[:6])
    for key in order:
        col = by_key[key]
        # a column with nothing in it at all (no GPU, no ranks) is left out
        if key not in ("split", "status") and rows and all(str(show(col, r)) in ("-", "", "--") for r in rows):
            continue
        w = need(col)
        if used + w <= width:
            chosen.append(col)
            used += w
        elif key not in first:
            break  # past the first six, in order only: no later column jumps a wider one
    chosen.sort(key=lambda c: MONITOR.index(c))
    return [(c, (lambda col: (lambda r: show(col, r)))(c)) for c in chosen], ctx


class SummaryTable(DataTable):
    """The side-by-side table of every trial; the fastest of each effective batch in bold. Its
    columns are chosen by priority for the width it has (split, status, step, speedup, bound,
    peak memory first)."""

    rows_shown: list[dict] = []
    keys_shown: tuple = ()

    def on_mount(self) -> None:
        self.cursor_type = "row"

    def on_resize(self) -> None:
        self.update_from(self.rows_shown)

    def update_from(self, rows: list[dict]) -> None:
        self.rows_shown = rows
        width = self.size.width or (self.app.size.width if self.app else 80)
        cols, _ctx = pick_columns(rows, width)
        keys = tuple(c.key for c, _ in cols)
        cursor = self.cursor_row
        if keys != self.keys_shown:
            self.clear(columns=True)
            for col, _ in cols:
                self.add_column(plain(col.header), key=col.key)
            self.keys_shown = keys
        else:
            self.clear()
        for i, r in enumerate(rows):
            self.add_row(*(cell(show(r)) for _, show in cols), key=str(i))
        if rows and 0 <= cursor < len(rows):
            self.move_cursor(row=cursor, animate=False)
