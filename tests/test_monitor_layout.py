"""The monitor: the answer and the why at a glance, at 80x24 and 120x36, and never a
hidden failure. Driven with ``App.run_test()`` on real event logs recorded on the H200 (and a
tiny sweep recorded on a 2-core CPU for the two-machine replay)."""

import asyncio
import gzip
import io
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from tracetui.analysis import Results, diagnose, summarise
from tracetui.cli.main import main
from tracetui.outputs.writer import default_output
from tracetui.session.exits import EXIT_NONE_OK, EXIT_OK, EXIT_USAGE, exit_status
from tracetui.events.schema import make, parse_line
from tracetui.events.log import read_events
from tracetui.core.trial import Trial
from tracetui.tui.app import HelpScreen, TraceApp
from tracetui.tui.launchers import monitor_exit, watch_idle
from tracetui.tui.sources import ReplaySource
from tracetui.tui.widgets import (BOUNDS, MORE, DetailPane, Failures, GpuStatus, RunList, StatusLine, SummaryTable,
                                  Timeline, draw_bar, phase_bars, pick_columns, step_segments)

from .conftest import CPU_TINY, pilot_until

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "data" / "h200_sweep.jsonl"  # 1x4, 2x2, 4x1, one run each
MEMLIMIT = ROOT / "docs" / "results" / "h200_memory_limit" / "events.jsonl"  # 16x1 oom, 1x16 ok
FINAL = ROOT / "docs" / "results" / "h200_final_check" / "final_check_events.jsonl.gz"  # two runs per split
SIZES = [(80, 24), (120, 36)]


def load(path: Path) -> list[dict]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return [e for e, _ in map(parse_line, fh) if e is not None]
    return read_events([path]).events


def screen_text(app) -> str:
    """What the terminal shows, as text."""
    w, h = app.size
    console = Console(width=w, height=h, file=io.StringIO(), force_terminal=True, color_system=None, record=True,
                      legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


async def settled(pilot, timeout: float = 30.0) -> None:
    """Until the monitor's first screen is whole: the footer's keys are composed a refresh after
    the rest of it (read at once, the footer could still be blank)."""
    from textual.widgets._footer import FooterKey

    await pilot_until(pilot, lambda: pilot.app.screen.query(FooterKey), timeout)
    await pilot.pause()


def drive(app, size, steps):
    """Run ``app`` at ``size``; ``steps(pilot)`` is awaited inside, once its screen is whole;
    returns what it returns."""

    async def go():
        async with app.run_test(size=size) as pilot:
            await settled(pilot)
            out = await steps(pilot)
            await pilot.press("q")
            return out

    return asyncio.run(go())


class _Log:
    def __init__(self, path="events.jsonl"):
        self.path, self.incomplete = path, False


def only_oom() -> list[dict]:
    """A real sweep where nothing finished: the 16x1 run of the memory-limit sweep, which ran out
    of memory on the H200."""
    return [e for e in load(MEMLIMIT) if e["run_id"].endswith("16x1")]


# ---- a failed sweep -----------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_a_sweep_where_nothing_finished_says_so_and_why(size):
    app = TraceApp(ReplaySource(only_oom()))

    async def steps(pilot):
        return screen_text(app), str(app.query_one(RunList).get_cell_at((0, 1)))

    text, progress = drive(app, size, steps)
    assert "nothing could be measured: 1 of 1 runs failed (1 oom)" in text
    assert "16x1: oom: out of memory at micro-batch 16" in text  # the headline's second line
    assert "failed (1): 16x1: oom: out of memory" in text  # the failures panel
    assert progress.startswith("oom: out of memory")  # the reason in the run's row
    assert "waiting for the first measured steps" not in text
    # the exit status a sweep's monitor gives for this, and headless's rule for the same rows
    assert monitor_exit(app, _Log()) == EXIT_NONE_OK == exit_status(summarise(app.results))


@pytest.mark.parametrize("size", SIZES)
def test_one_failed_split_beside_one_that_finished(size):
    app = TraceApp(ReplaySource(load(MEMLIMIT)))

    async def steps(pilot):
        table = app.query_one(SummaryTable)
        return (screen_text(app), app.query_one(Failures).display,
                [str(table.get_cell_at((i, 1))) for i in range(table.row_count)])

    text, shown, statuses = drive(app, size, steps)
    assert "1x16: 8194.7 ms/step" in text  # the answer stays
    assert "failed (1): 16x1: oom" in text and shown
    assert any(s.startswith("oom: out of memory") for s in statuses)
    assert monitor_exit(app, _Log()) == EXIT_OK == exit_status(summarise(app.results))


def test_exit_status_is_one_rule_for_every_outcome():
    ok, failed = [{"status": "ok"}], [{"status": "oom"}]
    assert exit_status(ok) == 0 and exit_status(failed) == 1 and exit_status([]) == 1
    assert exit_status(failed, need_ok=False) == 0  # a replay or a watch: nothing to finish
    assert exit_status(ok, signum=2) == 130 and exit_status(ok, interrupted=True) == 130
    assert exit_status(ok, incomplete=True) == 3 and exit_status(ok, write_error=True) == 1
    assert exit_status(failed, same_failure="no such file") == EXIT_USAGE
    assert exit_status(failed, same_failure="x", signum=15) == 143


# ---- the answer, the table, the detail pane ---------------------------------------------------------
def h200_session(size) -> SimpleNamespace:
    """The monitor on the H200 log at ``size``, as a user goes through it: its first screen (the
    text, the table's columns, the run list); the detail pane of the first run (up, up); the
    timeline of 4x1 against 1x4 pinned (c, down, down, t); the help screen (?)."""
    app = TraceApp(ReplaySource(load(H200)))

    async def steps(pilot):
        table, runs = app.query_one(SummaryTable), app.query_one(RunList)
        got = SimpleNamespace(text=screen_text(app), headers=[str(c.label) for c in table.columns.values()],
                              used=sum(c.get_render_width(table) for c in table.columns.values()),
                              run_rows=runs.row_count)
        runs.focus()
        await pilot.press("up", "up")  # from the last (4x1) to the first run: 1x4
        await pilot.pause()
        got.detail = app.query_one(DetailPane).content(100).plain
        await pilot.press("c")  # pinned for comparison
        await pilot.press("down", "down")  # 4x1
        await pilot.press("t")
        await pilot.pause()
        got.timeline, got.timeline_text = app.query_one(Timeline), screen_text(app)
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        got.help = screen_text(app)
        await pilot.press("escape")
        return got

    return drive(app, size, steps)


@pytest.fixture(scope="module")
def h200():
    """:func:`h200_session` at a size, driven once for every test that reads it."""
    seen: dict = {}

    def at(size):
        if size not in seen:
            seen[size] = h200_session(size)
        return seen[size]

    return at


@pytest.mark.parametrize("size", SIZES)
def test_the_answer_and_the_first_columns_fit_at_every_size(size, h200):
    got = h200(size)
    text, headers, used = got.text, got.headers, got.used
    assert "4x1 is 3.83x faster than 1x4 (95% CI 3.61-4." in text.replace("\n ", " ")
    assert "use 4x1 for effective batch 4" in text
    for need in ("split", "status", "step ms", "speedup", "bound", "peak GiB"):
        assert need in headers, (size, headers)
    assert used <= size[0]
    assert "3.83x [3.61-4." in text and "host-bound" in text


def test_columns_are_chosen_by_priority_for_the_width():
    rows = summarise(Results().extend(load(H200)))
    for width in (60, 80, 120, 200):
        cols, _ = pick_columns(rows, width)
        keys = [c.key for c, _ in cols]
        assert keys[:2] == ["split", "status"]
        if width >= 80:
            assert {"step_ms_median", "speedup", "bound", "peak_mem_gib"} <= set(keys)
    narrow = {c.key for c, _ in pick_columns(rows, 80)[0]}
    wide = {c.key for c, _ in pick_columns(rows, 200)[0]}
    assert narrow < wide and {"forward_ms", "backward_ms"} <= wide - narrow


@pytest.mark.parametrize("size", SIZES)
def test_detail_pane_shows_the_why_of_the_selected_trial(size, h200):
    detail = h200(size).detail
    assert detail.startswith("1x4 on NVIDIA H200 · ok")
    assert "step 1688.5 ms" in detail and "1.00x vs 1x4" in detail
    assert "why: host-bound (GPU busy 15%" in detail and BOUNDS["host-bound"] in detail
    assert "phases (ms of the median step): data 38.7 · fwd 557.8 · bwd 1020.7" in detail
    assert "memory: peak 3.7 of 140 GiB" in detail
    assert "loss:" in detail and "4x1" in detail and "2x2" in detail  # beside the others


def test_the_detail_pane_grows_with_its_text():
    """A trial's detail first has two lines (before its first step), then twenty: the pane
    is as tall as the new text at once (it used to keep the old height, cutting the why)."""
    app = TraceApp(ReplaySource(load(H200)))

    async def steps(pilot):
        pane = app.query_one(DetailPane)
        row, run = app.rows[0], app.results.runs[next(iter(app.results.runs))]
        pane.show(None, None, app.rows, app.results, "", empty="starting\nbuilding the model")
        await pilot.pause()
        short = pane.size.height
        pane.show(row, run, app.rows, app.results, "1x4")
        await pilot.pause()
        lines = len(pane.content(pane.size.width).wrap(app.console, pane.size.width))
        return short, pane.size.height, lines

    short, tall, lines = drive(app, (120, 36), steps)
    assert short == 2 and tall == lines > 10


def test_detail_pane_names_the_settings_as_really_run():
    app = TraceApp(ReplaySource(load(FINAL)))

    async def steps(pilot):
        return app.query_one(DetailPane).content(120).plain

    detail = drive(app, (120, 36), steps)
    assert "ran with: checkpointing off · bf16 (weights bfloat16) · attn sdpa · AdamW (fused)" in detail
    assert "max_length 512" in detail
    assert "2 run(s)" in detail


# ---- the timeline -----------------------------------------------------------------------------
def test_a_step_is_drawn_to_scale():
    step = dict(data_ms=10.0, forward_ms=[20.0, 20.0], backward_ms=[30.0, 30.0], optimizer_ms=10.0, other_ms=0.0)
    segs = step_segments(step)
    assert [s[0] for s in segs] == ["data", "f1", "b1", "f2", "b2", "opt", "other"]
    bar, labels = draw_bar(segs, 240.0, 60)  # the step is half the scale: half the width
    assert bar.cell_len == 30 and labels.cell_len == 30
    assert bar.plain.count("█") == 30


@pytest.mark.parametrize("size", SIZES)
def test_timeline_stacks_two_trials_on_one_scale(size, h200):
    timeline, text = h200(size).timeline, h200(size).timeline_text
    lanes = timeline.lanes
    assert [l.name for l in lanes] == ["4x1", "1x4"]
    four, one = (step_segments(l.step) for l in lanes)
    assert len([s for s in four if s[1] == "forward"]) == 1 and len([s for s in one if s[1] == "forward"]) == 4
    # one scale for both: the faster trial's bar is as much shorter as its step
    drawn = timeline.content(100).plain.splitlines()
    bars = [l.strip() for l in drawn if l.strip() and set(l.strip()) == {"█"}]
    assert len(bars) == 2
    ratio = bars[0].count("█") / bars[1].count("█")
    total = [sum(s[2] for s in segs) for segs in (four, one)]
    assert abs(ratio - total[0] / total[1]) < 0.05
    assert "GPU busy 27%" in text or "GPU busy 27%" in timeline.content(100).plain
    assert "1x4" in text and "(median step)" in timeline.content(100).plain


def test_phase_bars_end_at_the_step_median():
    rows = summarise(Results().extend(load(FINAL)))
    labels, data = phase_bars(rows)
    for i, r in enumerate(rows):
        assert abs(sum(col[i] for col in data) - r["step_ms_median"]) < 1e-6 * r["step_ms_median"]


# ---- two machines ---------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_a_replay_of_two_machines_labels_every_row_and_panel(size):
    events = load(H200) + load(CPU_TINY)
    app = TraceApp(ReplaySource(events))

    async def steps(pilot):
        runs, table = app.query_one(RunList), app.query_one(SummaryTable)
        return (screen_text(app), [str(runs.get_cell_at((i, 0))) for i in range(runs.row_count)],
                [str(table.get_cell_at((i, 0))) for i in range(table.row_count)],
                str(app.query_one(GpuStatus).render()))

    text, names, splits, gpu = drive(app, size, steps)
    assert sorted(names) == sorted(["H200 1x4", "H200 2x2", "H200 4x1", "CPU 1x4", "CPU 2x2", "CPU 4x1"])
    assert {"CPU 1x4", "H200 4x1"} <= set(splits)
    assert "H200: util" in gpu  # the H200 runs carry GPU samples
    assert "H200: no GPU samples" not in gpu and "CPU: host clock, no GPU" in gpu
    assert "on NVIDIA H200" in text  # the verdict names each machine


# ---- before the first step, the header, the idle watch, the help --------------------------------------
def test_a_run_that_has_not_stepped_shows_what_it_is_doing():
    rid = "s/2x2"
    events = [make("run_stage", rid, stage="importing", elapsed_s=1.5),
              make("run_stage", rid, stage="building the model", elapsed_s=12.0)]
    app = TraceApp(ReplaySource(events), planned=[(rid, Trial(2, 2)), ("s/4x1", Trial(4, 1))])

    async def steps(pilot):
        runs = app.query_one(RunList)
        return [[str(runs.get_cell_at((i, j))) for j in range(2)] for i in range(runs.row_count)]

    cells = drive(app, (80, 24), steps)
    assert cells[0] == ["2x2", "building the model 12s"]
    assert cells[1] == ["4x1", "queued"]

def test_a_log_without_stages_still_shows_its_runs(h200):
    assert h200((80, 24)).run_rows == 3  # (the H200 one has none)


def test_a_script_sweep_header_says_what_the_script_ran_with():
    events = [e for e in load(FINAL) if e["type"] in ("run_started", "run_settings")]
    for e in events:
        if e["type"] == "run_started":
            e["config"] = dict(e["config"], steps=None)
            e["max_steps"] = 30
    app = TraceApp(ReplaySource(events), subtitle="script train_lora.py")
    drive(app, (120, 36), lambda pilot: asyncio.sleep(0))
    assert app.sub_title.startswith("script train_lora.py · 30 steps · max_length 512 · checkpointing off")
    assert "seq 256" not in app.sub_title and "20 steps" not in app.sub_title


def test_the_idle_watch_screen_says_how_to_connect(tmp_path):
    sock = str(tmp_path / "w.sock")
    app = TraceApp(ReplaySource([]), idle=watch_idle(sock))

    async def steps(pilot):
        return screen_text(app)

    text = drive(app, (120, 36), steps).replace("\n", " ")
    assert "waiting for a training script on" in text and "TraceCallback" in text
    assert "TRACETUI_SOCKET=" in text  # not the default socket: the script must be told


def test_help_screen_and_readme_say_what_each_bound_means(h200):
    readme = (ROOT / "README.md").read_text()
    for name in BOUNDS:
        assert f"`{name}`" in readme, name
    text = h200((120, 36)).help
    assert "What bounds a trial" in text and "host-bound" in text


def test_notices_go_to_the_status_line_not_over_the_table():
    app = TraceApp(ReplaySource(load(H200)), note="skipped 2 bad line(s)")

    async def steps(pilot):
        await pilot.press("r")  # a replay: nothing to run again
        await pilot.pause()
        return str(app.query_one(StatusLine).render()), list(app._notifications)

    status, toasts = drive(app, (80, 24), steps)
    assert "nothing to run again" in status and toasts == []
    assert [m for _, m in app.notices][0] == "skipped 2 bad line(s)"


# ---- bound labels ---------------------------------------------------------------------------------
def test_every_trial_gets_a_bound_and_neighbours_do_not_flip_on_noise():
    def row(mb, fwd, util=None):
        return dict(machine="CPU", micro_batch=mb, effective_batch=4, step_ms_median=100.0 * mb, data_ms=1.0,
                    forward_ms_per_micro=fwd, gpu_util_mean=util)

    # forward per micro-batch nearly proportional with a little noise: all compute-bound, the
    # smallest split included (it used to get no label)
    rows = [row(1, 10.0), row(2, 19.0), row(4, 41.0)]
    labels = [diagnose(r, rows)[0] for r in rows]
    assert labels == ["compute-bound"] * 3
    # flat: overhead-bound throughout
    rows = [row(1, 10.0), row(2, 10.4), row(4, 10.9)]
    assert [diagnose(r, rows)[0] for r in rows] == ["overhead-bound"] * 3
    # on the old single threshold (growth under half the rows) 2x and 4x fell either side of the
    # line on noise; now both are in the margin between: mixed
    rows = [row(1, 10.0), row(2, 10.0 * 2 ** 0.55), row(4, 10.0 * 4 ** 0.5)]
    assert {diagnose(r, rows)[0] for r in rows} == {"mixed"}
    # one split alone still gets a label
    assert diagnose(row(4, 10.0), [row(4, 10.0)])[0] == "undetermined"
    # GPU: busy 44% and 47% are not opposites
    a, b = row(1, 10.0, 44.0), row(2, 11.0, 47.0)
    assert {diagnose(a, [a, b])[0], diagnose(b, [a, b])[0]} <= {"host-bound", "mixed"}


# ---- outputs never overwrite silently -----------------------------------------------------------------
def test_show_writes_beside_the_log_and_never_over_a_summary(tmp_path, capsys):
    sweep = tmp_path / "20261129-215622-fcae"
    sweep.mkdir()
    shutil.copy(H200, sweep / "events.jsonl")
    assert default_output(sweep / "events.jsonl") == str(sweep / "20261129-215622-fcae.csv")
    assert main(["show", str(sweep / "events.jsonl"), "--export", "csv"]) == 0
    first = (sweep / "20261129-215622-fcae.csv").read_text()
    assert first.startswith("machine,")
    capsys.readouterr()
    assert main(["show", str(sweep / "events.jsonl"), "--export", "csv"]) == 2  # there already
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err and "--force" in err
    mine = tmp_path / "mine.csv"
    mine.write_text("my own numbers\n")
    assert main(["show", str(sweep / "events.jsonl"), "--export", "csv", "-o", str(mine)]) == 2
    assert mine.read_text() == "my own numbers\n"
    assert "tracetui: error: --output: " in capsys.readouterr().err
    assert main(["show", str(sweep / "events.jsonl"), "--export", "csv", "-o", str(mine), "--force"]) == 0
    assert mine.read_text() == first


def test_an_existing_output_is_refused_before_a_sweep_starts(tmp_path, capsys):
    out = tmp_path / "results.csv"
    out.write_text("an earlier sweep\n")
    code = main(["--export", "csv", "-o", str(out), "--splits", "2x2", "--steps", "3", "--warmup", "1",
                 "--runs-dir", str(tmp_path / "runs")])
    assert code == 2 and out.read_text() == "an earlier sweep\n"
    err = capsys.readouterr().err
    assert err == f"tracetui: error: --output: {out} already exists; give another path, or add --force to replace it\n"
    assert not list((tmp_path / "runs").glob("*/*.log"))  # nothing started


def test_the_monitor_does_not_replace_a_file_it_did_not_write(tmp_path):
    out = tmp_path / "o.csv"
    out.write_text("keep me\n")
    app = TraceApp(ReplaySource(load(H200)), out_path=str(out))

    async def steps(pilot):
        await pilot.press("e")
        await pilot.pause()
        return str(app.query_one(StatusLine).render())

    said = drive(app, (80, 24), steps)
    assert out.read_text() == "keep me\n" and said.startswith("not replaced: ")
    assert "already exists" in app.notices[-1][1]  # whole on the help screen
    app = TraceApp(ReplaySource(load(H200)), out_path=str(out), force=True)

    async def again(pilot):
        await pilot.press("e", "e")  # its own file: written again
        await pilot.pause()
        return str(app.query_one(StatusLine).render())

    said = drive(app, (80, 24), again)
    assert app.notices[-1][1] == f"wrote {out}"  # whole on the help screen; on the status line whole or cut
    assert said == f"wrote {out}" or (said.startswith("wrote ") and said.endswith(MORE)), said
    assert out.read_text().startswith("machine,")


# ---- snapshots ----------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_snapshot_failed_sweep(snap_compare, size):
    assert snap_compare(TraceApp(ReplaySource(load(MEMLIMIT))), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_detail_pane_two_runs_per_split(snap_compare, size):
    assert snap_compare(TraceApp(ReplaySource(load(FINAL))), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_timeline_compared(snap_compare, size):
    async def compare(pilot):
        pilot.app.query_one(RunList).focus()
        await pilot.press("c", "up", "t")  # the last run (1x4#2) under 4x1#2
        await pilot.pause()

    assert snap_compare(TraceApp(ReplaySource(load(FINAL))), terminal_size=size, run_before=compare)
