"""One column registry for the CSV, the JSON and the monitor; one phase registry."""

from pathlib import Path

import pytest

from tracetui.analysis import Results, Row, summarise
from tracetui.core.columns import COLUMNS, CSV_KEYS, MONITOR, check_rows, table_context
from tracetui.outputs.export import summary_csv
from tracetui.core.phases import FIELDS, PHASES
from tracetui.events.log import read_events

DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"


def test_every_row_key_is_a_declared_column():
    rows = summarise(Results().extend(read_events([DATA]).events))
    assert check_rows(rows) == []
    plain = [dict(r) for r in rows]  # (rows written by other code: a misspelt key is caught)
    plain[0]["step_ms_medain"] = 1.0
    assert check_rows(plain) == ["step_ms_medain"]


def test_a_misspelt_key_of_a_summary_row_fails_loudly_read_or_written():
    row = summarise(Results().extend(read_events([DATA]).events))[0]
    assert isinstance(row, Row) and row.get("peak_mem_gib") > 0 and row["step_ms_median"] > 0
    for misspelt in (lambda: row.get("peak_mem_gb"), lambda: row["step_ms_medain"],
                     lambda: row.__setitem__("speedup_vs_slowst", 1.0), lambda: row.update(tokens_per_sec=1.0),
                     lambda: Row(machine="CPU", splt="1x4")):
        with pytest.raises(KeyError, match="is not a summary column"):
            misspelt()
    assert row.get("message", "") is not None  # declared, even when absent: the default


def test_csv_and_monitor_are_drawn_from_the_registry():
    rows = summarise(Results().extend(read_events([DATA]).events))
    header = summary_csv(rows).splitlines()[0].split(",")
    assert header == list(CSV_KEYS)
    assert len(set(c.key for c in COLUMNS)) == len(COLUMNS)  # each column once
    ctx = table_context(rows)
    for row in rows:
        cells = [str(c.show(row, ctx)) for c in MONITOR]
        assert cells[0] == row["split"] and all(cells)
    assert [c.key for c in MONITOR if c.key in FIELDS] == list(FIELDS)


def test_phase_registry_drives_the_probe_and_the_rows():
    from tracetui.probe.record import PHASE_OF

    assert set(PHASE_OF.values()) == {p.name for p in PHASES}
    row = summarise(Results().extend(read_events([DATA]).events))[0]
    assert abs(sum(row[f] for f in FIELDS) - row["step_ms_median"]) < 1e-6 * row["step_ms_median"]
