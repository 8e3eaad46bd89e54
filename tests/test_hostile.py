"""Hostile input, by class: each class fixed once at its root, tested over whatever
hypothesis makes of it and with a real case of each.

1. Text from outside (events, logs, socket lines, settings, file names) through ``show``,
   ``watch`` and the monitor: no crash, no raw control character out, markup shown literally.
2. Settings, TOML and TRACETUI_* variables: any value is accepted or refused in one line.
3. Paths: --runs-dir in every subcommand, before anything starts; a runs folder lost mid-sweep.
4. Data rows that are not text: counted and named before anything trains.
5. Memory: whatever a listener is sent, its summary holds a bounded amount, and is quick.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tracetui.core.bounded import EvenSample, approx_bytes
from tracetui.events.schema import dumps, make
from tracetui.core.text import clean, plain, safe_text

from .conftest import ROOT, pilot_until, read_csv, run_cli

#: a raw control character, as it would reach a terminal (C0 but the line break, DEL, C1)
RAW = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

#: strings from outside: anything, and the characters that did harm, often
HOSTILE = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="[]/\\\x1b\x07\x08\r\n\t\x00\x7f\x9b\u202e\u2028:;=bold red ", min_size=1, max_size=30),
    st.sampled_from(["[/]", "[bold]x[/bold]", "\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "[link=file:///etc]x[/link]",
                     "\r\x1b[Kgone", "a\u202eb", "[", "]", "\\[/]"]),
)
CORPUS = ["[/]", "[bold red]loud[/]", "\x1b[2J\x1b[H", "\x1b]0;pwned\x07title", "\rover\x1b[K", "a\u202ereversed",
          "tab\there", "nul\x00byte", "line\nbreak", "c1\x9bcsi", "[link=https://x]y[/link]"]


def _raw(text: str) -> list[str]:
    return sorted(set(RAW.findall(text)))


def _log(tmp_path: Path, strings: list[str], name: str = "events.jsonl") -> Path:
    """An event log whose every string a person or a library could have written holds one of
    ``strings``: GPU name, varied value, settings, notice, failure, stage."""
    events = []
    for i, s in enumerate(strings):
        rid = f"s/run{i}"
        events += [
            make("run_started", rid, label="1x1", micro_batch=1, grad_accum=1, effective_batch=1, world_size=1,
                 rank=0, pid=1, env={"device": "cuda", "gpu_name": f"GPU {s}"}, varied={"optim": s},
                 config={"steps": 3, "warmup": 0, "model": s}),
            make("run_settings", rid, settings={"optim": s, "attn_implementation": s}),
            make("run_stage", rid, stage=s or "x", elapsed_s=0.5),
            *[make("step", rid, step=k, warmup=False, wall_ms=10.0 + k, forward_ms=[4.0], backward_ms=[4.0])
              for k in range(1, 4)],
            make("gpu", rid, util=50.0, mem_used_gib=1.0, mem_total_gib=80.0, slowdown=s),
            make("notice", rid, level="warning", message=f"notice {s}"),
            make("run_failed", rid, kind="error", message=f"failed {s}") if i % 2 else make("run_finished", rid),
        ]
    path = tmp_path / name
    path.write_text("".join(dumps(e) + "\n" for e in events))
    return path


# ---------------------------------------------------------------------------------------------
# 1. Text from outside


@given(HOSTILE)
def test_clean_leaves_one_printable_line_and_markup_as_it_is(s):
    out = clean(s)
    assert out.isprintable() and not _raw(out)
    if s.isprintable():
        assert out == s  # "[/]", "[bold]": text, left alone
    assert plain(s).plain == out  # a Text, never markup
    assert safe_text(s).plain == clean(s, newlines=True)


def test_safe_text_keeps_styles_and_line_breaks():
    from rich.text import Text

    t = Text("head ")
    t.append("x\x1by", style="red")
    t.append("\nnext\u202e", style="bold")
    out = safe_text(t)
    assert out.plain == "head x\\x1by\nnext\\u202e"
    assert {(s.start, s.end, str(s.style)) for s in out.spans} >= {(5, 6, "red"), (6, 10, "red")}
    assert safe_text(Text("plain")) .plain == "plain"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(strings=st.lists(HOSTILE, min_size=1, max_size=4))
def test_show_of_any_strings_writes_them_escaped(capsys, tmp_path_factory, strings):
    """`show --export`: every line on stderr and every CSV cell is printable text; the strings
    are there, escaped, never read as markup; no traceback, exit 0 or 1 (some runs failed)."""
    from tracetui.cli.main import main

    d = tmp_path_factory.mktemp("show")
    log, out = _log(d, strings), d / "out.csv"
    code = main(["show", str(log), "--export", "csv", "-o", str(out), "--steps-csv", str(d / "steps.csv")])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "Traceback" not in err and not _raw(err), err
    text = out.read_text()
    assert not _raw(text.replace("\n", "")), text
    rows = read_csv(out)
    assert {r["trial"] for r in rows} == {f"1x1 optim={clean(s)}" for s in strings}
    messages = " ".join(r["message"] for r in rows)  # (read back: the CSV's quoting undone)
    assert all(clean(f"failed {s}") in messages for i, s in enumerate(strings) if i % 2)


def test_show_with_markup_and_escapes_in_every_string(tmp_path):
    """The probe's own cases, as a real process: exit 0, one printable line each."""
    log = _log(tmp_path, CORPUS)
    proc = run_cli("show", log, "--export", "csv", "-o", tmp_path / "o.csv", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not _raw(proc.stderr) and "Traceback" not in proc.stderr
    assert "failed \\x1b]0;pwned\\x07title" in proc.stderr  # (a failure's message: said, escaped)
    csv_text = (tmp_path / "o.csv").read_text()
    assert "optim=[bold red]loud[/]" in csv_text and "failed [bold red]loud[/]" in csv_text
    assert "GPU line\\nbreak" in csv_text and not _raw(csv_text.replace("\n", ""))


def _screen(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def _every_view(app, pilot) -> list[str]:
    """The screen in each tab, and the help screen."""
    from textual.widgets import TabbedContent

    from tracetui.tui.app import HelpScreen

    seen = [_screen(app)]
    for tab in ("tab-timeline", "tab-phases", "tab-steps", "tab-throughput", "tab-gpu", "tab-memory", "tab-detail"):
        app.query_one(TabbedContent).active = tab
        await pilot_until(pilot, lambda: app.query_one(f"#{tab}").region.area)  # (shown, laid out)
        seen.append(_screen(app))
    await pilot.press("question_mark")
    await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen))
    await pilot.pause()
    seen.append(_screen(app))
    await pilot.press("escape")
    return seen


def _monitor(strings: list[str], planned=None) -> tuple[object, list[str]]:
    from tracetui.events.log import read_events
    from tracetui.tui.app import TraceApp
    from tracetui.tui.sources import ReplaySource

    import tempfile

    from .test_monitor_layout import settled

    with tempfile.TemporaryDirectory() as d:
        events = read_events([_log(Path(d), strings)]).events
    app = TraceApp(ReplaySource(events), subtitle=f"replay of {strings[0]}", note=strings[-1], planned=planned or [])
    seen: list[str] = []

    async def drive():
        async with app.run_test(size=(140, 45)) as pilot:
            await settled(pilot)
            seen.extend(await _every_view(app, pilot))
            app.say(f"said {strings[0]}", "error")
            await pilot.pause()
            seen.append(_screen(app))
            app.whole = app.in_full().plain
            await pilot.press("q")

    asyncio.run(drive())
    return app, seen


def test_monitor_shows_the_probe_cases_literally():
    """A GPU name, a varied value, settings, a notice and a failure holding markup and escape
    sequences: the monitor (its every tab and the help screen) neither crashes nor lets a control
    character through, and shows the markup as text."""
    from tracetui.core.trial import Trial

    planned = [("s/queued", Trial(1, 1, 1, {"optim": "[/]"}))]  # --vary optim=adamw_torch,[/] before it ran
    app, seen = _monitor(CORPUS, planned)
    assert app._exception is None and app.return_code == 0
    for screen in seen:
        assert not _raw(screen), _raw(screen)
    everything = "\n".join(seen)
    assert "[bold red]loud[/]" in everything and "optim=[/]" in everything
    assert "\\x1b[2J" in everything and "failed \\x1b]0;pwned" in app.whole


@pytest.mark.slow
@pytest.mark.anywhere
# A monitor's cost is its start and its walk through the views, hardly how many runs it shows
# (3 runs or 11: 1.5 s each on a quiet 2-core machine): few monitors, many strings in each.
@settings(max_examples=4, deadline=None)
@given(strings=st.lists(HOSTILE, min_size=4, max_size=10))
def test_monitor_with_any_strings_never_crashes_nor_lets_a_control_through(strings):
    app, seen = _monitor(strings)
    assert app._exception is None
    for screen in seen:
        assert not _raw(screen), _raw(screen)


class _Watch:
    """A real ``tracetui watch --export csv`` process, its stderr read line by line."""

    def __init__(self, d: Path):
        self.sock, self.out = d / "w.sock", d / "out.csv"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracetui", "watch", "--export", "csv", "--socket", str(self.sock),
             "--runs-dir", str(d / "runs"), "-o", str(self.out)], cwd=d, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.lines: list[str] = []
        self._got = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for(lambda line: line.startswith("tracetui: watching"))

    def _read(self) -> None:
        for raw in self.proc.stderr:
            with self._got:
                self.lines.append(raw.decode("utf-8", "surrogateescape"))
                self._got.notify_all()

    def wait_for(self, pred, since: int = 0, timeout: float = 60) -> str:
        end = time.monotonic() + timeout
        with self._got:
            while True:
                hit = next((l for l in self.lines[since:] if pred(l)), None)
                if hit is not None:
                    return hit
                left = end - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"watch never said it: {self.lines[-5:]}")
                self._got.wait(left)

    def send(self, events: list[dict]) -> None:
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(self.sock))
        c.recv(64)
        c.sendall(b"".join(dumps(e).encode() + b"\n" for e in events))
        c.close()

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=30)  # every line read (the pipe is at its end)
        return code, "".join(self.lines)


@pytest.fixture(scope="module")
def watcher(tmp_path_factory):
    w = _Watch(tmp_path_factory.mktemp("watch"))
    yield w
    if w.proc.poll() is None:
        w.proc.kill()


_n = iter(range(10**9))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=HOSTILE)
def test_watch_says_any_string_from_a_client_escaped(watcher, s):
    """Whatever a client sends in a valid event's strings, `watch` prints it as one printable
    line: no escape sequence reaches the terminal, markup stays text."""
    rid = f"c/{next(_n)}"
    since = len(watcher.lines)
    watcher.send([make("run_started", rid, label="1x1", micro_batch=1, grad_accum=1, effective_batch=1, world_size=1,
                       rank=0, pid=1, env={"device": "cpu", "gpu_name": s}, varied={"optim": s},
                       config={"steps": 2, "warmup": 0}),
                  make("notice", rid, level="warning", message=f"n {s}"),
                  make("run_failed", rid, kind="error", message=f"end {rid} {s}")])
    line = watcher.wait_for(lambda l: f"end {rid} " in l, since)
    assert clean(f"end {rid} {s}") in line
    new = "".join(watcher.lines[since:])
    assert not _raw(new.replace("\n", "")), new


def test_watch_of_the_probe_cases_then_its_summary(watcher):
    """(After the hypothesis cases, on the same watcher.) The summary and its lines: printable."""
    rid = "c/corpus"
    for s in CORPUS:
        watcher.send([make("notice", rid, level="warning", message=s)])
    watcher.send([make("run_failed", rid, kind="error", message="corpus done")])
    watcher.wait_for(lambda l: "corpus done" in l)
    code, err = watcher.stop()
    assert code in (0, 1), err
    assert not _raw(err.replace("\n", "")) and "Traceback" not in err
    assert not _raw(watcher.out.read_text().replace("\n", ""))


# ---------------------------------------------------------------------------------------------
# 2. Settings, TOML, environment


JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), HOSTILE),
                       lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(HOSTILE, inner, max_size=3)),
                       max_leaves=6)


def _setting_names():
    from dataclasses import fields

    from tracetui.core.config import SweepConfig

    return [f.name for f in fields(SweepConfig)]


@settings(max_examples=300, deadline=None)
@given(values=st.dictionaries(st.sampled_from(_setting_names()), JSONISH, max_size=4))
def test_any_setting_value_is_accepted_or_one_config_error(values):
    from tracetui.core.checks import validate
    from tracetui.core.coerce import from_mapping
    from tracetui.core.config import ConfigError

    try:
        validate(from_mapping(values))
    except ConfigError as exc:
        msg = str(exc)
        assert msg and "\n" not in clean(msg)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(__import__("tracetui.core.envvars", fromlist=["ENVIRONMENT"]).ENVIRONMENT)),
       value=st.one_of(HOSTILE, st.integers().map(str), st.floats().map(str), st.text(max_size=300)))
def test_any_environment_value_is_accepted_or_one_config_error(name, value):
    from tracetui.core.config import ConfigError
    from tracetui.core.envvars import check_environment

    assume("\x00" not in value)  # (no environment holds one)
    try:
        check_environment({name: value})
    except ConfigError as exc:
        assert str(exc).startswith(name + ": ")


def test_every_tracetui_variable_read_is_declared():
    from tracetui.core.envvars import ENVIRONMENT

    read = set()
    for path in (ROOT / "tracetui").rglob("*.py"):
        read |= set(re.findall(r"(?<![A-Za-z_])TRACETUI_[A-Z_]+", path.read_text()))
    assert read - set(ENVIRONMENT) == set(), "declare these in tracetui.core.envvars.ENVIRONMENT"


def test_the_environment_protocol_is_named_in_one_module():
    """A variable's name is written in tracetui/core/envvars.py only: everywhere else the code sets
    and reads it through that module's names (docstrings may speak of it). The probe's
    sitecustomize, which runs before any of tracetui is imported, is the one exception."""
    import ast

    named = []
    for path in (ROOT / "tracetui").rglob("*.py"):
        if path.name in ("envvars.py", "sitecustomize.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            text = (node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    else node.arg if isinstance(node, ast.keyword) and node.arg else "")
            if re.search(r"(?<![A-Za-z_])TRACETUI_[A-Z]", text):
                named.append(f"{path.relative_to(ROOT)}:{node.lineno if hasattr(node, 'lineno') else '?'}: {text[:60]!r}")
    assert not named, "name these through tracetui.core.envvars:\n" + "\n".join(named)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet="[]{}\"'#\n =a1,.\\", max_size=200))
def test_toml_depth_never_raises_and_bounds_the_parser(text):
    from tracetui.core.tomlfile import MAX_TOML_DEPTH, toml_depth

    depth = toml_depth(text)
    assert depth >= 0
    if depth <= MAX_TOML_DEPTH:
        import tomllib

        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            pass


ZEROS = "1" + "0" * 400


@pytest.mark.parametrize("argv, needle", [
    (["--seed", "-1"], "--seed: must be at least 0, got -1; give a value from 0 to 4294967295"),
    (["--seed", "100000000000000000000000"], "--seed: 100000000000000000000000 is above 4294967295"),
    (["--memory-limit", "1e300"], "--memory-limit: 1e+300 is above 1048576 GiB"),
    (["--stall-timeout", "1e300"], "--stall-timeout: 1e+300 is above 31536000 seconds"),
    (["--project-steps", ZEROS], "argument --project-steps: must be from 1 to 1000000000"),
    (["--dataloader-workers", "100000"], "--dataloader-workers: 100000 is above 1024"),
    (["--vary", "dataloader_workers=0,100000"], "--vary: 100000 is above 1024"),
    (["--model", "tiny\x1b[2J"], "--model: 'tiny\\x1b[2J' holds a character that is not printable"),
    (["--rdzv-endpoint", "host"], "--rdzv-endpoint: 'host' is not HOST:PORT"),
    (["--splits", "\u00b2x2"], "is not MICROxACCUM"),
])
def test_values_that_failed_late_are_refused_up_front(capsys, tmp_path, argv, needle):
    from tracetui.cli.main import main

    code = main(["--dry-run", "--runs-dir", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1 and not _raw(err), err


@pytest.mark.parametrize("sub", [["show", "x.jsonl"], ["watch"], ["run", "--", "true"]])
def test_project_steps_is_bounded_in_every_subcommand(capsys, sub):
    from tracetui.cli.main import main

    argv = [*sub[:-2], "--project-steps", ZEROS, *sub[-2:]] if "--" in sub else [*sub, "--project-steps", ZEROS]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "--project-steps: must be from 1 to 1000000000" in err and err.count("\n") == 1


def test_a_toml_value_nested_600_deep_is_one_line(capsys, tmp_path):
    from tracetui.cli.main import main

    cfg = tmp_path / "deep.toml"
    cfg.write_text("[sweep]\nsteps = " + "[" * 600 + "1" + "]" * 600 + "\n")
    code = main(["--dry-run", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code == 2 and "nests arrays or tables more than 16 deep" in err and err.count("\n") == 1
    cfg.write_text("x = 1\n" * 200_000)  # over 1 MiB: not read whole
    code = main(["--dry-run", "--config", str(cfg)])
    assert code == 2 and "too large for a sweep's settings" in capsys.readouterr().err


@pytest.mark.parametrize("env, needle", [
    ({"TRACETUI_WARMUP": "abc"}, "TRACETUI_WARMUP: 'abc' is not auto or a whole number"),
    ({"TRACETUI_SOCKET": "/tmp/" + "s" * 200}, "TRACETUI_SOCKET: is 205 characters long, over the 107"),
    ({"TRACETUI_UNTIL_CONFIDENT": "5"}, "TRACETUI_UNTIL_CONFIDENT: '5' is not PCT:MIN_STEPS"),
])
def test_a_bad_environment_variable_is_one_line_before_anything_runs(capsys, monkeypatch, tmp_path, env, needle):
    from tracetui.cli.main import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for argv in (["--dry-run", "--runs-dir", str(tmp_path)], ["watch", "--runs-dir", str(tmp_path)]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and needle in err and err.count("\n") == 1, err


def test_the_callback_says_a_bad_variable_once_and_trains_on(monkeypatch, capfd):
    from tracetui.callbacks import attach
    from tracetui.core import envvars

    monkeypatch.setenv("TRACETUI_UNTIL_CONFIDENT", "x:y")
    monkeypatch.setenv("TRACETUI_WARMUP", "-1")
    monkeypatch.setattr(envvars, "_said", set())
    assert attach._stop_rule_from_env() is None and attach._stop_rule_from_env() is None
    assert envvars.value_or(envvars.WARMUP, 3, say=True) == 3
    err = capfd.readouterr().err
    assert err.count("TRACETUI_UNTIL_CONFIDENT") == 1 and "(ignored)" in err and "TRACETUI_WARMUP" in err


# ---------------------------------------------------------------------------------------------
# 3. Paths


def _without_root_powers() -> list[str]:
    """A command prefix under which root is held to the permission bits (as any user is)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop root's power over permissions")
    return ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search",
            "--"]


SUBCOMMANDS = {
    "main": ["--dry-run"],
    "sweep": ["sweep", "--dry-run", "--", sys.executable, "-c", "pass"],
    "watch": ["watch", "--export", "csv"],
    "run": ["run", "--export", "csv", "--", "true"],
}


def _with_runs_dir(sub: str, runs) -> list[str]:
    argv = list(SUBCOMMANDS[sub])
    at = argv.index("--") if "--" in argv else len(argv)
    return argv[:at] + ["--runs-dir", str(runs)] + argv[at:]


@pytest.mark.parametrize("sub", sorted(SUBCOMMANDS))
def test_runs_dir_that_is_a_file_or_a_loop_is_refused_in_every_subcommand(capsys, tmp_path, sub):
    from tracetui.cli.main import main

    afile = tmp_path / "afile"
    afile.write_text("x")
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    for runs, needle in ((afile, "is a file, not a folder"), (loop, "is a loop of symbolic links"),
                         (afile / "sub", "is inside a file, not a folder")):
        code = main(_with_runs_dir(sub, runs))
        err = capsys.readouterr().err
        assert code == 2 and f"--runs-dir: {runs} {needle}" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("sub", sorted(SUBCOMMANDS))
def test_an_unwritable_runs_dir_is_refused_in_every_subcommand(tmp_path, sub):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        proc = subprocess.run([*_without_root_powers(), sys.executable, "-m", "tracetui", *_with_runs_dir(sub, ro)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        ro.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert f"--runs-dir: {ro} is not writable (Permission denied)" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_a_runs_folder_made_unwritable_mid_sweep_is_one_line_and_keeps_what_was_measured(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out.csv"
    runs.mkdir()
    proc = subprocess.Popen([*_without_root_powers(), sys.executable, "-m", "tracetui", "--export", "csv",
                             "--splits", "1x4,2x2,4x1", "--steps", "6", "--warmup", "2", "--seq-len", "32",
                             "--repeats", "1", "--no-head-start", "--runs-dir", str(runs), "-o", str(out)],
                            cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.strip() == "1x4: ok":
            for d in runs.iterdir():
                d.chmod(0o555)
    code = proc.wait(timeout=300)
    err = "".join(lines)
    for d in runs.iterdir():
        d.chmod(0o755)
    assert "Traceback" not in err, err
    folder = next(runs.iterdir())
    assert f"not run: the runs folder {folder} cannot be written any more (Permission denied)" in err
    rows = {r["split"]: r for r in read_csv(out)}
    assert rows["1x4"]["status"] == "ok" and rows["4x1"]["status"] == "error"
    assert code == 1


# ---------------------------------------------------------------------------------------------
# 4. Data rows


class _Rows:
    """What check_text_rows reads of a data set (datasets' JSON loader gives such mixed columns)."""

    def __init__(self, texts):
        self.texts = texts

    def __len__(self):
        return len(self.texts)

    def iter(self, batch_size):
        for i in range(0, len(self.texts), batch_size):
            yield {"text": self.texts[i:i + batch_size]}


def test_rows_whose_text_is_not_text_are_counted_and_named():
    from tracetui.core.config import ConfigError, SweepConfig
    from tracetui.runner.sources import check_text_rows

    cfg = SweepConfig(dataset="d.jsonl")
    texts = ["ok"] * 2500
    for i, v in ((2, None), (5, 7), (9, ["a"]), (12, None), (14, 1.5), (17, None), (2400, {"a": 1})):
        texts[i] = v
    with pytest.raises(ConfigError) as exc:
        check_text_rows(_Rows(texts), cfg)
    msg = str(exc.value)
    assert msg.startswith("--dataset: 7 of 2500 rows of d.jsonl have a 'text' that is not text "
                          "(3 null, 2 number, 1 list, 1 object; rows 3, 6, 10, 13, 15, ...)")
    check_text_rows(_Rows(["a", "", "b"]), cfg)  # empty rows: text all the same


def test_a_data_set_with_a_few_null_and_number_rows_is_refused_as_datasets_reads_it(tmp_path):
    """The real JSON loader (datasets' own, as a sweep's checks run it) on a file with a null and
    a number among its texts: one error naming both rows. (That the checks refuse a data set
    before anything starts, in one line, a real command shows: test_hardening's empty rows.)"""
    from tracetui.core.config import ConfigError, SweepConfig
    from tracetui.runner.sources import load_text_dataset

    data = tmp_path / "mixed.jsonl"
    data.write_text('{"text": "hello"}\n{"text": null}\n{"text": "abc"}\n{"text": 5}\n{"text": "x"}\n')
    with pytest.raises(ConfigError) as exc:
        load_text_dataset(SweepConfig(dataset=str(data)))
    assert str(exc.value) == (f"--dataset: 2 of 5 rows of {data} have a 'text' that is not text "
                              "(1 null, 1 number; rows 2, 4), which the trainer cannot take; fix or drop those rows: "
                              "training on this data set would fail on them too")


# ---------------------------------------------------------------------------------------------
# 5. Memory


@given(n=st.integers(0, 3000), thin_at=st.lists(st.integers(0, 3000), max_size=6))
def test_an_even_sample_keeps_the_first_the_latest_and_every_stride(n, thin_at):
    sample = EvenSample()
    for i in range(n):
        sample.append({"step": i})
        if i in thin_at:
            sample.thin()
    assert sample.seen == n
    if n:
        assert sample[0]["step"] == 0 and sample[-1]["step"] == n - 1
    steps = [s["step"] for s in sample]
    assert steps == sorted(set(steps))
    assert sample.size == sum(approx_bytes(x) for x in sample)
    assert len(sample) <= n // sample.stride + 4


def _step(rid, k, wall):
    return make("step", rid, step=k, warmup=k <= 3, wall_ms=wall, forward_ms=[wall / 3], backward_ms=[wall / 2],
                rank=0, tokens=64)


def test_results_stay_within_their_budget_and_count_every_step():
    from tracetui.analysis import Results, summarise

    budget = 2 << 20
    res, whole = Results(budget=budget), Results(budget=None)
    for r in range(3):
        rid = f"s/r{r}"
        start = make("run_started", rid, label=f"{2 ** r}x1", micro_batch=2 ** r, grad_accum=1, env={"device": "cpu"})
        res.add(start), whole.add(start)
        for k in range(1, 20_001):
            e = _step(rid, k, 10.0 * (r + 1) + (k % 7))
            res.add(e), whole.add(e)
    assert res.held <= budget and approx_bytes([r.steps for r in res.runs.values()]) < 1.2 * budget
    assert all(len(r.steps) < 20_000 and r.steps[-1]["step"] == 20_000 for r in res.runs.values())
    got, want = summarise(res), summarise(whole)
    for a, b in zip(got, want):
        assert a["steps_measured"] == b["steps_measured"] == 19_997 and a["warmup_steps"] == 3
        assert abs(a["step_ms_median"] - b["step_ms_median"]) <= 1.0


def test_runs_beyond_the_budget_are_left_out_and_counted():
    from tracetui.analysis import Results

    res = Results(budget=200_000)
    for r in range(2000):
        res.add(make("run_started", f"s/r{r}", label="1x1", micro_batch=1, grad_accum=1,
                     env={"device": "cpu", "pad": "x" * 500}))
        res.add(make("notice", f"s/r{r}", message="y" * 5000))
    assert len(res.runs) < 2000 and res.left_out == 2 * (2000 - len(res.runs))
    assert res.held <= 200_000 + 10_000
    assert all(len(n) <= 1000 for r in res.runs.values() for n in r.notices)


def test_a_flood_of_one_run_is_summarised_from_its_even_sample(monkeypatch):
    """A flood of one run's steps (the probe's; here 20 000 under a 1 MiB budget): the bootstrap
    takes the run's even sample, never every step (over 200 000 steps, every step took over a
    minute); the row still counts every step."""
    from tracetui.analysis import Results, compare, summarise

    took = []
    real = compare.bootstrap_medians
    monkeypatch.setattr(compare, "bootstrap_medians", lambda values, **kw: took.append(len(values)) or real(values, **kw))
    res = Results(budget=1 << 20)
    res.add(make("run_started", "s/r", label="1x1", micro_batch=1, grad_accum=1, env={"device": "cpu"}))
    for k in range(1, 20_001):
        res.add(_step("s/r", k, 50.0 + k % 13))
    row, = summarise(res)
    sample = len(res.runs["s/r"].measured())
    assert took == [sample] and sample < 20_000 // 8  # (thinned at least three times)
    assert row["steps_measured"] == 19_997 and row["step_ms_ci_low"] <= row["step_ms_median"] <= row["step_ms_ci_high"]


@pytest.mark.slow
def test_a_real_watch_flooded_with_valid_events_samples_them_and_writes_its_summary():
    """A real watcher sent 60 000 events over its socket (eight runs' steps, more than its
    summary's budget holds) keeps an even sample, says so, and writes the summary on Ctrl-C.
    How much memory and how quickly, against a million events, is the benchmark's to say
    (docs/benchmarks.md), not a test's on a shared machine."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "watch_flood.py"), "--events", "60000"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"SIGINT to exit: [\d.]+ s; exit status 0; summary rows: 4\n", proc.stdout), proc.stdout
    sampled = re.search(r"to stay within its memory, \d+ run\(s\) summarised "
                        r"from an even sample of (\d+) of their (\d+) steps", proc.stdout)
    assert sampled and int(sampled.group(1)) < int(sampled.group(2)), proc.stdout


def test_the_monitors_inbox_holds_a_bounded_number_of_events():
    """Between a listener and the screen: past its limit, what arrives is counted, not held."""
    from tracetui.tui.sources import Inbox

    inbox = Inbox(limit=1000)
    for i in range(5000):
        inbox.put({"type": "step", "i": i})
    assert len(inbox.drain()) == 1000 and inbox.dropped == 4000
    inbox.put({"type": "step", "i": -1})  # drained: room again
    assert [e["i"] for e in inbox.drain()] == [-1]
