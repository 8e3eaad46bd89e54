"""The fault-injection suite: each fault injected for real (processes, signals, files), and the
product must keep working and lose nothing."""

import asyncio
import json
import os
import signal
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracetui.cli.main import main
from tracetui.events.log import read_events

from .conftest import wait_until as _wait, ROOT, cli_args, kill_left, outcome, pilot_until, read_csv, run_cli, run_main, scenarios

DATA = Path(__file__).parent / "data" / "h200_sweep.jsonl"


def _start(args, tmp_path, new_session=False):
    return subprocess.Popen([sys.executable, "-m", "tracetui", *map(str, args)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=new_session, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _log(runs: Path) -> Path | None:
    logs = list(runs.glob("*/events.jsonl"))
    return logs[0] if logs else None


def _events(runs: Path) -> list[dict]:
    log = _log(runs)
    return read_events([log]).events if log else []



def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_worker_sigkill_mid_run_headless(tmp_path):
    """A worker SIGKILLed after its third step: its run is ``crashed`` (noticed within seconds,
    the signal named), every step it measured before the kill is on disk and in the outputs,
    and the sweep goes on to the next split, which finishes."""
    runs = tmp_path / "runs"
    args = ["--export", "csv", "-o", tmp_path / "out.csv", "--steps-csv", tmp_path / "steps.csv",
            "--effective-batch", 2, "--splits", "1x2,2x1", "--steps", 14, "--warmup", 1, "--seq-len", 64,
            "--repeats", 1, "--runs-dir", runs]

    def victim():
        ev = _events(runs)
        started = [e for e in ev if e["type"] == "run_started" and e["label"] == "1x2"]
        steps = [e for e in ev if e["type"] == "step" and e["run_id"].endswith("1x2")]
        return started[0]["pid"] if started and len(steps) >= 3 else None

    killed = {}

    def kill_it():  # beside the sweep, as a user's `kill -9` would be
        try:
            _wait(lambda: victim() is not None)
            killed["t"] = time.time()
            os.kill(victim(), signal.SIGKILL)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            killed["error"] = exc

    killer = threading.Thread(target=kill_it, daemon=True)
    killer.start()
    proc = run_main(*args)
    killer.join(10)
    assert "error" not in killed, killed.get("error")
    assert proc.returncode == 1, proc.stderr  # a run crashed: not a clean sweep, whatever finished
    assert "tracetui: warning: 1x2: " in proc.stderr and "killed by SIGKILL" in proc.stderr
    ev = _events(runs)
    failed = [e for e in ev if e["type"] == "run_failed"]
    assert len(failed) == 1 and failed[0]["kind"] == "crashed"
    assert "SIGKILL" in failed[0]["message"]
    assert failed[0]["t"] - killed["t"] < 5.0
    measured = [e for e in ev if e["type"] == "step" and e["run_id"].endswith("1x2")]
    assert [e["step"] for e in measured][:3] == [1, 2, 3]
    rows = {r["split"]: r for r in read_csv(tmp_path / "out.csv")}
    assert rows["1x2"]["status"] == "crashed" and rows["2x1"]["status"] == "ok"
    assert int(rows["1x2"]["steps_measured"]) == len(measured) - 1  # all but the warm-up step
    steps_csv = [r for r in read_csv(tmp_path / "steps.csv") if r["split"] == "1x2"]
    assert len(steps_csv) == len(measured) >= 3
    # the split after the crash ran all its steps
    assert sum(1 for e in ev if e["type"] == "step" and e["run_id"].endswith("2x1")) == 14


@pytest.mark.slow
def test_cpu_out_of_memory_is_oom_and_the_sweep_goes_on(cpu_oom_sweep):
    """On the CPU --memory-limit caps the worker's data size (RLIMIT_DATA): the big micro-batch
    cannot allocate, reports oom, its process (and memory) goes, the next split runs."""
    proc = cpu_oom_sweep["proc"]
    assert proc.returncode == 0, proc.stderr
    rows = {r["split"]: r for r in json.loads(cpu_oom_sweep["out"].read_text())["splits"]}
    assert rows["16x1"]["status"] == "oom" and "out of memory at micro-batch 16" in rows["16x1"]["message"]
    assert rows["1x16"]["status"] == "ok"
    pids = [e["pid"] for e in _events(cpu_oom_sweep["runs"]) if e["type"] == "run_started"]
    assert pids and not any(_alive(p) for p in pids)


FLAGS = ["--model", "--dataset", "--text-field", "--seq-len", "--effective-batch", "--splits", "--max-micro-batch",
         "--steps", "--warmup", "--repeats", "--lora-r", "--lora-alpha", "--lora-dropout", "--lora-targets",
         "--precision", "--lr", "--seed", "--device", "--memory-limit", "--sample-hz", "--until-confident",
         "--min-steps", "--gpus", "--nproc-per-node", "--nnodes", "--node-rank", "--project-steps", "--bogus"]
VALUES = st.one_of(
    st.integers(-5, 70).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["auto", "tiny", "qwen3-1.7b", "synthetic", "1x4,2x2,4x1", "2x2", "4", "4,8", "cpu", "cuda",
                     "cuda:3", "bf16", "fp8", "x", "", "0,1", "a/b", "missing.jsonl", "all-linear", "1e-4"]),
    st.text(alphabet=string.printable, max_size=12),
)
ARGV = st.lists(st.tuples(st.sampled_from(FLAGS), VALUES), max_size=6)


def _one_line_or_ok(capsys, argv) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert err.startswith("tracetui: error: ") and err.count("\n") == 1, (argv, err)
    assert "Traceback" not in err


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=ARGV)
def test_any_flags_give_a_valid_plan_or_one_line(capsys, monkeypatch, tmp_path, pairs):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    argv = ["--dry-run", "--runs-dir", str(tmp_path / "runs")]
    for flag, value in pairs:
        argv += [flag, value] if not value.startswith("-") else [f"{flag}={value}"]
    _one_line_or_ok(capsys, argv)


TOML_VALUES = st.one_of(st.integers(-3, 50), st.floats(allow_nan=False), st.booleans(),
                        st.text(alphabet=string.ascii_letters + "x,.-/0123456789", max_size=10),
                        st.lists(st.integers(-2, 9), max_size=3), st.lists(st.sampled_from(["1x4", "2x2", "9x9"]), max_size=3))


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if not isinstance(value, float) or value == value else "nan"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=st.dictionaries(st.sampled_from([f[2:] for f in FLAGS] + ["activation_checkpointing", "probe", "stepz"]),
                             TOML_VALUES, max_size=6),
       section=st.booleans(), garbage=st.binary(max_size=20))
def test_any_toml_gives_a_valid_plan_or_one_line(capsys, monkeypatch, tmp_path, table, section, garbage):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    text = ("[sweep]\n" if section else "") + "".join(f"{k} = {_toml(v)}\n" for k, v in table.items())
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(text.encode() + (garbage if garbage and garbage[0] % 3 == 0 else b""))
    _one_line_or_ok(capsys, ["--dry-run", "--config", str(cfg), "--runs-dir", str(tmp_path / "runs")])


def test_show_skips_and_counts_bad_lines(tmp_path):
    good = DATA.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    lines = good[:200] + [good[200][: len(good[200]) // 2]]  # a truncated line
    lines += ["\x00\x01 garbage", json.dumps({"v": 7, "type": "step", "run_id": "x", "t": 1}),
              json.dumps({"v": 1, "type": "step", "run_id": "x", "t": 1, "step": "one"})] + good[201:]
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.csv"
    proc = run_cli("show", bad, "--export", "csv", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "skipped 4 bad line(s)" in proc.stderr
    assert "2 not JSON (truncated or garbage)" in proc.stderr and "1 unknown schema version" in proc.stderr
    assert "1 schema mismatch" in proc.stderr
    rows = read_csv(out)
    assert [r["split"] for r in rows] == ["1x4", "2x2", "4x1"] and all(r["status"] == "ok" for r in rows)


def _without_a_terminal(folder: Path) -> dict:
    """Four commands that would start the monitor (each a real ``python -m tracetui`` whose
    stdout is a pipe), all at once; what each said."""
    runs = folder / "runs"
    commands = (["show", DATA], ["--steps", 4, "--warmup", 1, "--runs-dir", runs], ["watch", "--runs-dir", runs],
                ["sweep", "--runs-dir", runs, "--", sys.executable, "-c", "pass"])
    procs = [subprocess.Popen([sys.executable, "-m", "tracetui", *cli_args(args)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONUNBUFFERED="1")) for args in commands]
    try:
        said = [(args, proc.communicate(timeout=60)[1], proc.returncode) for args, proc in zip(commands, procs)]
    finally:
        kill_left(*procs)
    return dict(said=said, runs=runs)


@pytest.mark.slow
def test_monitor_without_a_terminal_says_so_at_once(faulted_sweeps):
    """Piped or from cron, without --export: a one-line error, nothing started or left behind
    (once a replay drew into the pipe and spun a core for as long as nobody noticed)."""
    got = outcome(faulted_sweeps, "no terminal")
    for args, err, code in got["said"]:
        assert code == 2, (args, err)
        assert err.strip().splitlines() == [
            "tracetui: error: the live monitor needs a terminal, and stdin or stdout is not one; "
            "add --export csv (or json) to run without it"]
    runs = got["runs"]
    assert not (runs.exists() and any(runs.glob("*/*.log")))  # no worker ever started


def test_the_monitor_without_a_terminal_is_refused_before_anything_starts(tmp_path, capsys, starts):
    """The built-in sweep's monitor and a script sweep's, without a terminal: the one line comes
    once the settings are checked and before the fork server (seconds of imports) or the sweep is
    started; the outputs they locked are free again."""
    from tracetui.session.output_paths import lock_output, release_outputs

    out = tmp_path / "out.json"
    for args in (["--steps", "4", "-o", str(out)], ["sweep", "-o", str(out), "--", sys.executable, "-c", "pass"]):
        assert main([*args, "--runs-dir", str(tmp_path / "runs")]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "tracetui: error: the live monitor needs a terminal, and stdin or stdout is not one; "
            "add --export csv (or json) to run without it"]
    assert starts == [] and not list((tmp_path / "runs").glob("*/*.log"))
    lock_output(str(out), "--output")  # (a lock left behind would refuse it: another sweep's)
    release_outputs()


@pytest.mark.slow
def test_output_full_disk_keeps_results_in_jsonl(tmp_path, full_disk):
    runs, out = tmp_path / "runs", full_disk / "summary.csv"
    proc = run_main("--export", "csv", "-o", out, "--splits", "2x2", "--steps", 3, "--warmup", 1,
                    "--seq-len", 32, "--runs-dir", runs, cwd=tmp_path)
    assert proc.returncode == 1
    line = [l for l in proc.stderr.splitlines() if l.startswith("tracetui: error:")][0]
    assert f"cannot write {out} (No space left on device)" in line and "tracetui show" in line
    again = tmp_path / "again.csv"
    proc = run_main("show", _log(runs), "--export", "csv", "-o", again)
    assert proc.returncode == 0 and read_csv(again)[0]["status"] == "ok"


def test_unwritable_places_refused_up_front(capsys, tmp_path):
    assert main(["--export", "csv", "-o", str(tmp_path)]) == 2
    assert "--output:" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["--export", "csv", "--runs-dir", str(blocker / "runs")]) == 2
    assert f"--runs-dir: {blocker / 'runs'} is inside a file, not a folder" in capsys.readouterr().err


class _FlakyNvml:
    """NVML that answers three times, then fails as a driver reset would."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self):
        self.calls = 0

    def nvmlDeviceGetUtilizationRates(self, h):
        self.calls += 1
        if self.calls > 3:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return type("U", (), {"gpu": 42})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"used": 2**30, "total": 8 * 2**30})()

    def nvmlDeviceGetPowerUsage(self, h):
        return 100_000

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return 5_000_000

    def nvmlDeviceGetClockInfo(self, h, c):
        return 1500

    def nvmlDeviceGetTemperature(self, h, t):
        return 50


def test_nvml_failing_mid_run_stops_sampling_with_a_notice():
    from tracetui.events.schema import make
    from tracetui.probe.gpu import GpuSampler
    from tracetui.tui.app import TraceApp
    from tracetui.tui.sources import ReplaySource
    from tracetui.tui.widgets import GpuStatus

    events = []
    sampler = GpuSampler(events.append, "r", hz=50, nvml=_FlakyNvml(), handle=object())
    assert sampler.start() is None
    _wait(lambda: any(e["type"] == "notice" for e in events), 10)
    sampler.stop()
    assert [e["type"] for e in events] == ["gpu", "gpu", "gpu", "notice"]
    assert "NVML failed mid-run" in events[-1]["message"] and "timings go on" in events[-1]["message"]
    started = make("run_started", "r", label="4x1", micro_batch=4, grad_accum=1, env={"gpu_name": "Test GPU"})
    app = TraceApp(ReplaySource([started] + events))

    async def drive():
        async with app.run_test(size=(100, 30)) as pilot:
            gpu = app.query_one(GpuStatus)
            await pilot_until(pilot, lambda: "NVML failed mid-run" in str(gpu.render()))
            assert "util 42%" in str(gpu.render())
            await pilot.press("q")

    asyncio.run(drive())


def test_no_nvml_says_why(monkeypatch):
    from tracetui.probe.gpu import open_nvml

    monkeypatch.setitem(sys.modules, "pynvml", None)
    nvml, handle, why = open_nvml(0)
    assert nvml is None and "NVML is not installed (pip install nvidia-ml-py)" in why


def test_transformers_without_a_needed_callback_event(monkeypatch, capsys):
    from transformers import TrainerCallback

    monkeypatch.delattr(TrainerCallback, "on_pre_optimizer_step")
    assert main(["--dry-run", "--runs-dir", "/tmp/tracetui-test-runs"]) == 2
    err = capsys.readouterr().err
    assert "has no TrainerCallback.on_pre_optimizer_step" in err and "install transformers 4.56.2 or newer" in err


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[-1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            pass
    return out


# ---- faults from outside a real headless sweep: its own process (a real ``python -m tracetui``),
# its trials, its fork server. Run side by side (each a real tracetui with real workers, and
# nothing they check depends on how busy the machine is), then checked one test each.

def _interrupted_headless(folder: Path, sig: int, group: bool) -> dict:
    """A headless sweep stopped by ``sig`` once its worker has measured three steps: sent to the
    whole process group (as Ctrl-C in a terminal does), or to tracetui alone."""
    runs, out, steps = folder / "runs", folder / "out.csv", folder / "steps.csv"
    proc = _start(["--export", "csv", "-o", out, "--steps-csv", steps, "--splits", "4x1,1x4", "--steps", 300,
                   "--warmup", 1, "--seq-len", 64, "--runs-dir", runs], folder, new_session=True)
    try:
        _wait(lambda: sum(e["type"] == "step" for e in _events(runs)) >= 3 or proc.poll() is not None)
        if proc.poll() is None:  # (else it ended by itself: the test says how)
            if group:  # Ctrl-C in a terminal signals the whole foreground process group
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return dict(code=proc.returncode, err=err, runs=runs, out=out, steps=steps)


def _fork_server_killed(folder: Path) -> dict:
    """A sweep of three splits whose fork server is SIGKILLed once three steps are measured (with
    head starts, --warmup 3: 2x2 is built beside 1x4 and goes with the server too; the next run
    then starts a new server as it would without them)."""
    runs, out = folder / "runs", folder / "out.csv"
    proc = _start(["--export", "csv", "-o", out, "--splits", "1x4,2x2,4x1", "--steps", 30, "--warmup", 3,
                   "--seq-len", 32, "--repeats", 1, "--runs-dir", runs], folder)
    try:
        _wait(lambda: sum(e["type"] == "step" and not e["warmup"] for e in _events(runs)) >= 3
              or proc.poll() is not None)
        servers = [c for c in _children(proc.pid)
                   if b"forkserver" in Path(f"/proc/{c}/cmdline").read_bytes()]
        if len(servers) == 1:
            os.kill(servers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        kill_left(proc)
    return dict(code=proc.returncode, err=err, servers=servers, runs=runs, out=out)


SCENARIOS = {signal.SIGINT: lambda d: _interrupted_headless(d, signal.SIGINT, group=True),
             signal.SIGTERM: lambda d: _interrupted_headless(d, signal.SIGTERM, group=False),
             "no terminal": _without_a_terminal}
if sys.platform.startswith("linux"):  # (the fork server is Linux's)
    SCENARIOS["server killed"] = _fork_server_killed
scenarios(__name__, SCENARIOS, first=[k for k in SCENARIOS if k == "server killed"])


@pytest.fixture(scope="module")
def faulted_sweeps(scenario_results):
    """The sweeps above, as the session ran them (beside the other modules' scenarios)."""
    return scenario_results[__name__]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_headless_mid_run(faulted_sweeps, sig, code):
    got = outcome(faulted_sweeps, sig)
    err, runs = got["err"], got["runs"]
    assert got["code"] == code, err
    assert f"interrupted by {sig.name}" in err and "every measured step is in" in err
    ev = _events(runs)
    pids = [e["pid"] for e in ev if e["type"] == "run_started"]
    assert pids and not any(_alive(p) for p in pids)
    on_disk = [e for e in ev if e["type"] == "step"]
    assert len(read_csv(got["steps"])) == len(on_disk) >= 3
    rows = read_csv(got["out"])
    assert rows[0]["status"] == "interrupted"
    assert [e["kind"] for e in ev if e["type"] == "run_failed"] == ["interrupted"]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")
def test_a_fork_server_killed_from_outside_costs_one_trial_not_the_sweep(faulted_sweeps):
    """Something outside tracetui (an out-of-memory killer, `pkill python`) kills the fork
    server mid-sweep: the trial forked from it goes too and says why; the next trial starts a
    new server and the sweep finishes (every later trial used to fail to start). A run built
    early (a head start) that goes with it before its first step is no run of its split: it
    runs again. The trials that died by a signal (SIGKILL, the parent-death signal's) leave no
    "leaked semaphore objects" warning from multiprocessing at tracetui's exit (a trial's
    progress-bar lock was one, which it never got to release)."""
    got = outcome(faulted_sweeps, "server killed")
    err, servers, runs, out = got["err"], got["servers"], got["runs"], got["out"]
    assert len(servers) == 1, servers
    assert got["code"] == 1, err  # the sweep finished, but a run crashed
    assert "leaked" not in err, err[-2000:]
    rows = {r["split"]: r for r in read_csv(out)}
    assert rows["1x4"]["status"] == "crashed", rows["1x4"]
    assert f"its fork server (pid {servers[0]}) was killed from outside tracetui" in rows["1x4"]["message"]
    assert rows["2x2"]["status"] == "ok" and rows["4x1"]["status"] == "ok", (rows["2x2"]["message"], err[-2000:])
    # 2x2 waited, built, beside 1x4: it went with the server, and ran again alone
    lost = [e for e in _events(runs) if e["type"] == "run_failed" and e["kind"] == "lost"]
    assert [e["run_id"].split("/")[-1] for e in lost] == ["2x2"], lost
    assert rows["2x2"]["runs"] == "1" and "it had taken no step" in rows["2x2"]["message"]
    assert any(e["type"] == "run_started" and e["run_id"].endswith("2x2-alone") for e in _events(runs))
