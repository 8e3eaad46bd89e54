"""The monitor at 80x24 and 120x36 on sweeps over settings (``--vary``), from a new user's
walkthrough in tmux: the answer and the status line stay on the screen, every run is told apart
in the run list, every key and tab shows, the detail pane scrolls, nothing long is cut without
saying where to read it whole, and a trial is written one way everywhere. Driven with
``App.run_test()`` on real event logs: a CPU sweep over Liger here (``liger=on`` unavailable
without a GPU, two runs per trial), and the H200 sweeps over checkpointing x Liger and DDP x FSDP."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from textual.containers import VerticalScroll
from textual.widgets import Tab

from tracetui.analysis import recommendation
from tracetui.tui.app import HelpScreen, TraceApp
from tracetui.tui.sources import ReplaySource
from tracetui.tui.widgets import (MORE, DetailPane, Failures, GpuStatus, RunLabel, RunList, StatusLine, SummaryTable, Timeline,
                                  Verdict, fit_run_labels)
from tracetui.core.trial import Trial

from .conftest import pilot_until
from .test_monitor_layout import ROOT, SIZES, drive, load, screen_text

#: a real CPU sweep: --splits 1x4,2x2,4x1 --vary liger=off,on --repeats 2 (6 runs unavailable)
LIGER = ROOT / "tests" / "data" / "cpu_vary_liger.jsonl"
KNOBS = ROOT / "docs" / "results" / "h200_knobs" / "knobs2_events.jsonl.gz"  # 8x2, 16x1 x ckpt x liger
FSDP = ROOT / "docs" / "results" / "h200x2_fsdp" / "fsdp_events.jsonl.gz"  # 4 splits x ddp, fsdp
VARIED = [LIGER, KNOBS, FSDP]


class Live(ReplaySource):
    """A replay the app takes for a sweep running on this machine."""

    live = True


def monitor(path: Path, tmp_path: Path, live: bool = False) -> TraceApp:
    """The monitor on the log at ``path``; a live one writes its summary on quitting, in ``tmp_path``."""
    return TraceApp((Live if live else ReplaySource)(load(path)), out_path=str(tmp_path / "summary.csv"))


def run_names(app) -> list[str]:
    runs = app.query_one(RunList)
    return [str(runs.get_cell_at((i, 0))) for i in range(runs.row_count)]


def first_screens(path: Path, sizes: list[tuple[int, int]], tmp_path: Path) -> dict:
    """What the first screen of the monitor of a live sweep (the CPU warning on the status line)
    of the log at ``path`` shows at each of ``sizes`` (one monitor, its terminal resized): where
    each part is, the run list, the panels, the text on the screen and the tabs; and the help
    screen, where what the main screen cuts short stands whole."""
    app = monitor(path, tmp_path, live=True)

    async def steps(pilot):
        seen = {}
        for size in sizes:
            await pilot.resize_terminal(*size)
            await pilot_until(pilot, lambda: app.screen.region.size == size)
            await pilot.pause()
            seen[size] = shown = _shown(app)
            await pilot.press("question_mark")
            await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen))
            shown.help = str(app.screen.query_one("#help Static").render())
            await pilot.press("escape")
            await pilot_until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        return seen

    return drive(app, sizes[0], steps)


def _shown(app) -> SimpleNamespace:
    runs = app.query_one(RunList)
    lines = screen_text(app).splitlines()
    answer = app.query_one(Verdict).region
    return SimpleNamespace(
        regions={name: app.query_one(name).region for name in ("Header", "#verdict", "#main", "#failures",
                                                               "#summary", "#status", "Footer")},
        scroll=app.screen.max_scroll_y, names=run_names(app),
        name_width=runs.columns[runs.coordinate_to_cell_key((0, 0)).column_key].width,
        run_list_height=runs.region.height, gpu=str(app.query_one(GpuStatus).render()),
        gpu_height=app.query_one(GpuStatus).region.height, failures=str(app.query_one(Failures).render()),
        verdict=app.query_one(Verdict).full.plain, lines=lines, tabs=[(t.label_text, t.region) for t in app.query(Tab)],
        answer="\n".join(lines[answer.y:answer.bottom]), status=str(app.query_one(StatusLine).render()),
        recommendation=recommendation(app.rows), notices=[m for _, m in app.notices])


#: every size a test reads a first screen at: 80x22 is a tmux window of 80x24 less its status bar
FIRST_SIZES = SIZES + [(80, 22)]


@pytest.fixture(scope="module")
def screens(tmp_path_factory):
    """:func:`first_screens` of a log at a size, driven once (at every size) for every test that reads it."""
    seen: dict = {}

    def at(path: Path, size: tuple[int, int]) -> SimpleNamespace:
        if path not in seen:
            seen[path] = first_screens(path, FIRST_SIZES, tmp_path_factory.mktemp("screen"))
        return seen[path][size]

    return at


# ---- 1. the answer and the status line stay on the screen ------------------------------------------
@pytest.mark.parametrize("size", FIRST_SIZES)
@pytest.mark.parametrize("path", VARIED, ids=lambda p: p.name.split(".")[0])
def test_the_answer_and_the_status_line_stay_on_the_screen(path, size, screens):
    shown = screens(path, size)
    regions, scroll = shown.regions, shown.scroll
    width, height = size
    assert scroll == 0  # the screen itself never scrolls: nothing is pushed below it
    verdict, status, footer = regions["#verdict"], regions["#status"], regions["Footer"]
    # the header (what the trainers ran with) on the first line, the answer right under it
    assert regions["Header"].y == 0 and verdict.y == regions["Header"].bottom and verdict.height >= 2
    assert regions["#main"].y >= verdict.bottom  # nothing drawn over the answer
    assert regions["#summary"].bottom <= status.y and regions["#failures"].bottom <= regions["#summary"].y
    assert status.height == 1 and status.bottom <= footer.y and footer.bottom == height


def test_a_cpu_sweep_says_so_in_one_line_and_leaves_the_run_list_its_rows(screens):
    """On the CPU the GPU panel said "no GPU samples: running on the CPU; phases timed with the host
    clock" in three lines of the narrow left panel, leaving the run list three rows at 80x24."""
    shown = screens(LIGER, (80, 24))
    assert shown.gpu == "CPU run: host clock, no GPU" and shown.gpu_height == 1
    assert shown.run_list_height >= 7  # border and header, and five runs or more


# ---- 2. every run is told apart in the run list ------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("path", VARIED, ids=lambda p: p.name.split(".")[0])
def test_every_run_list_row_is_told_apart_and_shown_whole(path, size, screens):
    names, width = screens(path, size).names, screens(path, size).name_width
    assert len(set(names)) == len(names), names
    assert max(len(n) for n in names) <= width, (names, width)  # none cut


def test_labels_too_long_for_the_column_keep_every_value_under_its_setting():
    labels = [RunLabel(f"{mb}x{16 // mb}", Trial(mb, 16 // mb, settings={"activation_checkpointing": ckpt,
                                                                         "liger": liger}))
              for mb in (8, 16) for ckpt in (False, True) for liger in (False, True)]
    header, names = fit_run_labels(labels, 40)
    assert header == "trial" and names[0] == "8x2 ckpt=off liger=off"  # whole where they fit
    header, names = fit_run_labels(labels, 16)
    assert header == "trial ckpt liger"
    assert names[:2] == ["8x2   off  off", "8x2   off  on"] and names[-1] == "16x1  on   on"
    assert len(set(names)) == len(names) and max(map(len, names)) <= 16



def test_bar_labels_as_long_as_the_chart_never_crash_it():
    """A bar chart's labels as long as its width, or a cell or two short of it: the bars keep half
    of it and the labels end in an ellipsis (a label two cells short of the width left plotext's
    bars no column, and the monitor crashed: a long GPU name in a replay of two machines)."""
    import asyncio

    from textual.app import App

    from tracetui.core.phases import FIELDS
    from tracetui.tui.widgets import PhaseChart, ThroughputChart

    width = 40
    rows = [dict({f: 2.0 for f in FIELDS}, machine="CPU", split="1x1", trial=f"1x1 optim={'w' * n}",
                 step_ms_median=12.0, tokens_per_s=100.0 + n) for n in range(width - 16, width - 8)]

    class Charts(App):
        CSS = f"PhaseChart, ThroughputChart {{ width: {width}; height: 12; }}"

        def compose(self):
            yield PhaseChart()
            yield ThroughputChart()

    async def drive():
        async with app.run_test(size=(100, 30)) as pilot:
            for chart in (app.query_one(PhaseChart), app.query_one(ThroughputChart)):
                for row in rows:
                    chart.update_from([row])
                    await pilot.pause()
                    assert app._exception is None, (type(chart).__name__, row["trial"])
                    shown.append("\n".join(strip.text for strip in chart.render_lines(chart.region.reset_offset)))

    app, shown = Charts(), []
    asyncio.run(drive())
    assert app._exception is None
    for text in shown:
        assert "1x1 optim=ww" in text and "…" in text, text

# ---- 3. every key and every tab shows at 80 columns -------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_every_key_and_every_tab_shows(size, screens):
    lines, tabs = screens(KNOBS, size).lines, screens(KNOBS, size).tabs
    footer = lines[-1]
    for binding in TraceApp.BINDINGS:
        assert f"{binding.key_display or binding.key} {binding.description}" in footer, footer
    assert [label for label, _ in tabs] == ["Detail", "Timeline", "Phases", "Steps", "Tok/s", "GPU", "Memory"]
    for label, region in tabs:
        assert region.right <= size[0] and label in lines[region.y]


# ---- 4. the detail pane scrolls -------------------------------------------------------------------------
def test_the_detail_pane_scrolls_to_its_end_from_the_keyboard(tmp_path):
    app = monitor(KNOBS, tmp_path)

    async def steps(pilot):
        app.query_one(RunList).focus()
        await pilot.press("tab", "tab")  # the run list, the tabs, the pane under them
        scroll = app.focused
        assert isinstance(scroll, VerticalScroll) and isinstance(scroll.children[0], DetailPane)
        before = screen_text(app)
        await pilot.press("end")
        # (the scroll lands after a refresh: on a busy machine, later than one pause)
        await pilot_until(pilot, lambda: scroll.max_scroll_y > 0 and scroll.scroll_y == scroll.max_scroll_y)
        await pilot.pause()
        return before, screen_text(app), app.query_one(DetailPane).content(44).plain

    before, after, detail = drive(app, (80, 24), steps)
    last = detail.splitlines()[-1].split()  # the last trial's loss curve: name, curve, final loss
    assert last[:3] == ["16x1", "ckpt=on", "liger=on"] and last[-1] == "12.3294"
    assert "12.3294" not in before and "12.3294" in after


# ---- 5, 6. nothing long is cut without saying where it is whole ---------------------------------------
def words(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces."""
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("path", [KNOBS, FSDP], ids=["knobs", "fsdp"])
def test_a_long_recommendation_is_whole_or_says_where_it_is(path, size, screens):
    got = screens(path, size)
    shown, whole, rec = got.answer, got.help, got.recommendation
    assert "in SFTConfig: " in rec
    assert rec in words(shown) or words(shown).endswith(MORE.strip())
    assert rec in words(whole)  # the help screen has it whole
    if size == (80, 24):  # too long for the four lines of the answer there
        assert rec not in words(shown) and len(shown.splitlines()) == 4


def test_the_cpu_warning_says_where_it_is_whole(screens):
    got = screens(LIGER, (80, 24))
    shown, whole, warning = got.status, got.help, got.notices[0]
    assert warning.startswith("training shares this machine's 2 CPU cores") and warning.endswith("--export csv)")
    assert shown.startswith("training shares") and shown.endswith(MORE) and len(shown) <= 78
    assert warning in words(whole)


def test_runs_that_failed_alike_take_one_line_of_the_failures_panel(screens):
    shown = screens(LIGER, (120, 36)).failures
    assert words(shown) == ("failed (6): 1x4#1 liger=on, 2x2#1 liger=on, 4x1#1 liger=on, 4x1#2 liger=on, "
                            "2x2#2 liger=on, 1x4#2 liger=on: unavailable: liger=on needs a CUDA GPU")


# ---- 7. one spelling of a trial everywhere -------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_a_trial_is_written_one_way_everywhere(size, tmp_path):
    app = monitor(LIGER, tmp_path)

    async def steps(pilot):
        app.query_one(RunList).focus()
        await pilot.press("ctrl+home")  # to the first run: 1x4, liger off, its first repeat
        await pilot.pause()
        table = app.query_one(SummaryTable)
        return (run_names(app), app.query_one(DetailPane).content(100).plain,
                [l.name for l in app.query_one(Timeline).lanes], [str(table.get_cell_at((i, 0)))
                                                                  for i in range(table.row_count)],
                str(app.query_one(Failures).render()))

    names, detail, lanes, table, failed = drive(app, size, steps)
    assert names[:2] == ["1x4#1 liger=off", "1x4#1 liger=on"]
    assert detail.startswith("1x4#1 liger=off on CPU")
    assert lanes == ["1x4#1 liger=off"]
    assert table[:2] == ["1x4 liger=off", "2x2 liger=off"]
    shown = "\n".join(names + [detail] + lanes + table + [failed])
    for other in ("+li", "-li", "liger=False", "liger=True", "1x4_liger"):
        assert other not in shown, other


def test_a_click_in_the_run_list_keeps_the_panes_on_the_clicked_run(tmp_path):
    """Every way of moving the run list's cursor (a click here; ctrl+home above) is the user's:
    the panes stay on the chosen run instead of following the sweep."""
    app = monitor(LIGER, tmp_path)

    async def steps(pilot):
        await pilot.click(RunList, offset=(3, 3))  # (the border, the header, then the second run)
        await pilot.pause()
        return run_names(app)[app.query_one(RunList).cursor_row], app.query_one(DetailPane).content(100).plain

    clicked, detail = drive(app, (120, 36), steps)
    assert clicked == "1x4#1 liger=on" and detail.startswith(f"{clicked} on CPU")


def test_the_verdict_never_names_a_run_by_its_id(screens):
    verdict = screens(LIGER, (120, 36)).verdict
    # (that log's runs shared the machine: the verdict says which, by name)
    assert "1x4#1 liger=off: other processes used" in verdict and "_liger-" not in verdict
