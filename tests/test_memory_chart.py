"""The search's memory model on screen, from the real H200 search under --memory-limit 24
(qwen3-1.7b, seq 1024, effective batch 64): the probes' and the trial's measured peaks beside
the predicted line and the bound; every trial of that sweep, skipped ones too, on the H200."""

import asyncio
import io
import json
import tarfile
from pathlib import Path

import pytest

from tracetui.analysis import Results, summarise
from tracetui.events.schema import parse_line
from tracetui.tui.app import TraceApp
from tracetui.tui.sources import ReplaySource
from tracetui.tui.widgets import MemoryChart, memory_points

ARCHIVE = Path(__file__).resolve().parent.parent / "docs" / "results" / "h200_search" / "search_vs_grid.tar.gz"


@pytest.fixture(scope="module")
def search_24() -> list[dict]:
    with tarfile.open(ARCHIVE) as tar:
        member = next(m for m in tar.getmembers() if m.name.lstrip("./").startswith("runs/search_24/")
                      and m.name.endswith("events.jsonl"))
        text = io.TextIOWrapper(tar.extractfile(member), encoding="utf-8")
        return [e for e, _ in map(parse_line, text) if e is not None]


def test_memory_points_of_the_h200_search(search_24):
    results = Results().extend(search_24)
    rows = summarise(results)
    # trials the search skipped never started, and still belong to the machine their sweep ran on
    assert {r["machine"] for r in rows} == {"NVIDIA H200"}
    pts = memory_points(rows, results)
    measured = dict(pts.measured)
    assert sorted(measured) == [1, 2, 4]  # the two probes and the trial that ran
    predicted = dict(pts.predicted)
    assert sorted(predicted) == [4, 8, 16, 32, 64]
    assert predicted[4] == pytest.approx(measured[4], rel=0.01)  # the README's "within 0.3%"
    # the predictions lie on one line (affine in the micro-batch)
    slope = (predicted[64] - predicted[8]) / 56
    assert predicted[16] == pytest.approx(predicted[8] + 8 * slope, rel=0.001)
    assert (pts.limit, pts.limit_what) == (24.0, "--memory-limit")
    started = [json.dumps(e) for e in search_24 if e["type"] == "run_started"]
    assert any("memory probe" in s for s in started)


def test_the_monitor_draws_it_in_its_own_tab(search_24, tmp_path):
    app = TraceApp(ReplaySource(search_24), out_path=str(tmp_path / "results.csv"))

    async def go():
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            app.query_one("#charts").active = "tab-memory"
            await pilot.pause()
            chart = app.query_one(MemoryChart)
            points = chart.points
            shown = chart.display and chart.region.width > 0
            await pilot.press("q")
            return points, shown

    points, shown = asyncio.run(go())
    assert shown and points is not None and dict(points.measured)[4] > 18 and points.limit == 24.0
