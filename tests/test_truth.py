"""Numbers that hold: settings read back from the trainer, phases that add up, intervals that
carry run-to-run noise, verdicts held back on too little data or a busy machine, and a loss check
that two disagreeing splits cannot pass."""

import json
import math
import subprocess
import sys

import pytest

from tracetui.analysis import (MIN_INTERVAL_STEPS, Results, median, ratio_ci, t975, t_quantile,
                               recommendation, scope_note, summarise, verdict)
from tracetui.core.config import SweepConfig
from tracetui.events.schema import make
from tracetui.core.busy import judge
from tracetui.probe import quiet

from .conftest import outcome, scenarios, wait_until


def _run(events, run_id, mb, ga, walls, loss=None, env=None, quiet_info=None, settings=None, phases=None):
    events.append(make("run_started", run_id, label=f"{mb}x{ga}", micro_batch=mb, grad_accum=ga,
                       effective_batch=mb * ga, env=env or {"device": "cpu"}))
    if settings is not None:
        events.append(make("run_settings", run_id, rank=0, settings=settings))
    for i, w in enumerate(walls, 1):
        d, f, b, o = phases(i, w) if phases else (0.1 * w, 0.4 * w, 0.4 * w, 0.05 * w)
        events.append(make("step", run_id, step=i, warmup=False, wall_ms=w, data_ms=d, forward_ms=[f],
                           backward_ms=[b], optimizer_ms=o, other_ms=w - d - f - b - o,
                           loss=None if loss is None else loss(i)))
    events.append(make("run_finished", run_id, quiet=quiet_info or {}))


# ---- settings read back from a real trainer -------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", [False, True])
def test_checkpointing_flag_is_what_the_model_really_did(tmp_path, checkpointing):
    """TRL's SFTConfig turns checkpointing on when left unset: with the flag off the model must
    really run each layer's forward once per micro-batch, with it on twice (the recompute)."""
    from tracetui.probe.callback import Probe
    from tracetui.runner.worker import build_trainer, resolve_precision

    cfg = SweepConfig(steps=2, warmup=0, seq_len=32, activation_checkpointing=checkpointing, lora_dropout=0.0,
                      runs_dir=str(tmp_path))
    events = []
    probe = Probe(events.append, "t", warmup=0)
    precision, dtype = resolve_precision("fp32", "cpu")
    trainer = build_trainer(cfg, 1, 1, "cpu", precision, dtype, str(tmp_path), probe=probe)
    mlp = trainer.model.get_base_model().model.layers[0].mlp
    calls, forward = [], mlp.forward

    def counted(*args, **kwargs):  # module hooks do not see checkpointing's recompute: count calls
        calls.append(1)
        return forward(*args, **kwargs)
    mlp.forward = counted
    trainer.train()
    assert trainer.model.is_gradient_checkpointing is checkpointing
    assert len(calls) == (2 if checkpointing else 1) * cfg.steps  # what the model really ran
    settings = [e for e in events if e["type"] == "run_settings"][0]["settings"]
    assert settings["activation_checkpointing"] is checkpointing
    assert settings["precision_used"].startswith("fp32")
    assert settings["attn_implementation"] and settings["optimizer"] and settings["versions"].startswith("torch ")
    assert "q_proj" in settings["lora_targets_resolved"]  # all-linear, as PEFT resolved it


def _a_script_with_the_callback(tmp_path) -> tuple:
    """A user's script with TraceCallback (its own SFTConfig), three steps."""
    script = tmp_path / "train.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(tmp_path.parent)!r})
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer
from tracetui import TraceCallback
from tracetui.core.presets import build_config
from tracetui.runner.sources import byte_tokenizer
args = SFTConfig(output_dir={str(tmp_path / 'out')!r}, per_device_train_batch_size=2, max_steps=3, use_cpu=True,
                 bf16=False, report_to="none", save_strategy="no", disable_tqdm=True, max_length=32, logging_steps=1)
rows = Dataset.from_dict({{"text": ["a b c d e f g h i j k"] * 16}})
t = SFTTrainer(model=AutoModelForCausalLM.from_config(build_config("tiny")), args=args, train_dataset=rows,
               processing_class=byte_tokenizer(), peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
               callbacks=[TraceCallback(socket_path={str(tmp_path / 'none.sock')!r}, jsonl_path={str(tmp_path / 'ev.jsonl')!r})])
t.train()
""")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    return proc, tmp_path


scenarios(__name__, {"script": _a_script_with_the_callback})


@pytest.mark.slow
def test_callback_reads_back_the_scripts_own_settings(scenario_results):
    """Attach mode: the settings are the user's script's, read from its Trainer (here: an
    SFTConfig that leaves checkpointing at TRL's default, which is on)."""
    proc, tmp_path = outcome(scenario_results[__name__], "script")
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    types = [e["type"] for e in events]
    assert types.index("run_settings") == types.index("run_started") + 1
    settings = events[types.index("run_settings")]["settings"]
    assert settings["activation_checkpointing"] is True  # TRL's default, as the script left it
    assert settings["lora_targets_resolved"] == "q_proj,v_proj"
    rows = summarise(Results().extend(events))
    assert rows[0]["activation_checkpointing"] is True


# ---- phases add up -------------------------------------------------------------------------------

def test_phase_columns_add_up_to_the_step_column_whatever_the_distribution():
    """Medians of phases do not add: here data and forward trade places step by step, so their
    medians sum well below the median step. The columns must still add up exactly."""
    events = []
    walls = [100.0 + (i % 7) * 13 for i in range(20)]

    def phases(i, w):
        d = 0.6 * w if i % 2 else 0.05 * w
        f = 0.05 * w if i % 2 else 0.6 * w
        return d, f, 0.2 * w, 0.05 * w
    _run(events, "a", 1, 2, walls, phases=phases)
    row = summarise(Results().extend(events))[0]
    parts = sum(row[p] for p in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"))
    assert parts == pytest.approx(row["step_ms_median"], rel=1e-9)
    medians = median([0.6 * w if i % 2 else 0.05 * w for i, w in enumerate(walls, 1)])
    assert medians + median([0.05 * w if i % 2 else 0.6 * w for i, w in enumerate(walls, 1)]) < 0.5 * row["step_ms_median"]


# ---- intervals that carry run-to-run noise -------------------------------------------------------

def test_run_level_interval_covers_both_processes_a_step_interval_does_not():
    """The same split in two fresh processes: 288 and 410 ms (seen on the H200). One run's step
    interval excludes the other process; the run-level interval covers both."""
    one, two = [], []
    a = [288.0 + (i % 5) for i in range(30)]
    b = [410.0 + (i % 5) for i in range(30)]
    _run(one, "s/1x2", 1, 2, a)
    _run(one, "s/2x1", 2, 1, [100.0 + (i % 5) for i in range(30)])
    row = {r["split"]: r for r in summarise(Results().extend(one))}["1x2"]
    assert row["ci_scope"] == "steps" and row["step_ms_ci_high"] < median(b)
    _run(two, "s/1x2#1", 1, 2, a)
    _run(two, "s/1x2#2", 1, 2, b)
    _run(two, "s/2x1#1", 2, 1, [100.0 + (i % 5) for i in range(30)])
    _run(two, "s/2x1#2", 2, 1, [120.0 + (i % 5) for i in range(30)])
    rows = {r["split"]: r for r in summarise(Results().extend(two))}
    r = rows["1x2"]
    assert r["ci_scope"] == "runs" and r["step_ms_ci_low"] <= median(a) and r["step_ms_ci_high"] >= median(b)
    # the speedup's interval carries the same spread and holds its own estimate
    fast = rows["2x1"]
    assert fast["speedup_ci_low"] <= fast["speedup_vs_slowest"] <= fast["speedup_ci_high"]
    assert fast["speedup_ci_high"] / fast["speedup_ci_low"] > 1.5


def test_t_quantiles():
    """Against published tables: t(0.975) for 1, 3, 11 and 1000 degrees of freedom."""
    assert t975(1) == pytest.approx(12.706, abs=1e-3) and t975(3) == pytest.approx(3.182, abs=1e-3)
    assert t975(11) == pytest.approx(2.201, abs=1e-3) and t975(1000) == pytest.approx(1.962, abs=1e-3)
    assert t_quantile(1 - 0.025 / 3, 3) == pytest.approx(4.857, abs=2e-3)  # Bonferroni, three pairs


def test_repeats_widen_the_interval_and_the_table_says_what_it_covers():
    one, two = [], []
    _run(one, "s/1x2", 1, 2, [200.0 + (i % 3) for i in range(12)])
    _run(one, "s/2x1", 2, 1, [150.0 + (i % 3) for i in range(12)])
    rows = summarise(Results().extend(one))
    assert all(r["ci_scope"] == "steps" for r in rows) and "step noise only" in scope_note(rows)
    assert scope_note(rows[:1]) == ""  # one trial (tracetui run, a watched script): nothing compared
    _run(two, "s/1x2#1", 1, 2, [200.0 + (i % 3) for i in range(12)])
    _run(two, "s/1x2#2", 1, 2, [260.0 + (i % 3) for i in range(12)])
    _run(two, "s/2x1#1", 2, 1, [150.0 + (i % 3) for i in range(12)])
    _run(two, "s/2x1#2", 2, 1, [190.0 + (i % 3) for i in range(12)])
    rows2 = {r["split"]: r for r in summarise(Results().extend(two))}
    assert all(r["ci_scope"] == "runs" for r in rows2.values()) and scope_note(list(rows2.values())) == ""
    # every run of 2x1 beat every run of 1x2, but by less than processes differ: with two runs
    # each that is no evidence (one order in six by chance), and no "faster" is claimed
    assert verdict(list(rows2.values())).startswith("no clear difference")
    # the same gap with processes that agree is clear
    calm = []
    _run(calm, "s/1x2#1", 1, 2, [200.0 + (i % 3) for i in range(12)])
    _run(calm, "s/1x2#2", 1, 2, [204.0 + (i % 3) for i in range(12)])
    _run(calm, "s/2x1#1", 2, 1, [150.0 + (i % 3) for i in range(12)])
    _run(calm, "s/2x1#2", 2, 1, [153.0 + (i % 3) for i in range(12)])
    assert verdict(summarise(Results().extend(calm))).startswith("2x1 is 1.3")


def test_ratio_interval_needs_equal_bootstrap_samples():
    with pytest.raises(ValueError):
        ratio_ci([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        ratio_ci([1.0], [1.0])


# ---- too little data ------------------------------------------------------------------------------

def test_no_ranking_or_recommendation_from_too_few_steps():
    """A split that crashed after one measured step against one with four: no interval, no
    "faster", no advice; the verdict says why (was: "2.11x faster (95% CI 1.90-1.90x)")."""
    events = []
    _run(events, "s/1x4", 1, 4, [400.0])
    _run(events, "s/4x1", 4, 1, [190.0, 188.0, 192.0, 189.0])
    rows = {r["split"]: r for r in summarise(Results().extend(events))}
    assert rows["1x4"]["too_few_steps"] and rows["1x4"].get("step_ms_ci_low") is None
    assert rows["4x1"].get("speedup_ci_low") is None
    line = verdict(list(rows.values()))
    assert "too few steps for a verdict" in line and f"{MIN_INTERVAL_STEPS} needed" in line and "faster" not in line
    assert "no recommendation" in recommendation(list(rows.values()))


# ---- a busy or changed machine --------------------------------------------------------------------

def test_busy_run_holds_the_verdict_back_with_the_reason():
    events = []
    _run(events, "s/1x4", 1, 4, [400.0 + i for i in range(10)], quiet_info={"other_cpu_cores": 1.6, "cores": 2})
    _run(events, "s/4x1", 4, 1, [100.0 + i for i in range(10)], quiet_info={"other_cpu_cores": 0.02, "cores": 2})
    rows = summarise(Results().extend(events))
    line = verdict(rows)
    assert "held back: the machine was busy (1x4: other processes used 1.6 CPU cores)" in line
    assert "faster" not in line and "no recommendation" in recommendation(rows)
    quiet_events = [dict(e, quiet={"other_cpu_cores": 0.02}) if e["type"] == "run_finished" else e for e in events]
    assert "4x1 is" in verdict(summarise(Results().extend(quiet_events)))


def test_other_gpu_process_and_thermal_slowdown_hold_back():
    events = []
    _run(events, "s/1x4", 1, 4, [400.0 + i for i in range(10)])
    _run(events, "s/4x1", 4, 1, [100.0 + i for i in range(10)])
    t0 = min(e["t"] for e in events) - 5
    for k in range(40):
        for run in ("s/1x4", "s/4x1"):
            events.append(make("gpu", run, util=30.0, other_procs=1 if run == "s/4x1" else 0,
                               other_mem_gib=12.0 if run == "s/4x1" else 0.0,
                               slowdown="hw-thermal" if run == "s/1x4" else None))
            events[-1]["t"] = t0 + k * 0.25
    for e in events:  # steps span the samples
        if e["type"] == "step":
            e["t_end"] = t0 + 1 + e["step"] * 0.5
            e["host_ms"] = 500.0
    line = verdict(summarise(Results().extend(events)))
    assert "held back" in line and ("other process(es) on the GPU holding 12.0 GiB" in line
                                    or "the GPU was slowed down (hw-thermal)" in line)


def test_a_changed_machine_between_runs_holds_back():
    events = []
    _run(events, "s/1x4", 1, 4, [400.0 + i for i in range(10)], env={"device": "cuda", "gpu_name": "X", "driver": "550"})
    _run(events, "s/4x1", 4, 1, [100.0 + i for i in range(10)], env={"device": "cuda", "gpu_name": "X", "driver": "560"})
    line = verdict(summarise(Results().extend(events)))
    assert "held back: the machine changed between runs: driver (550, 560)" in line


def _cpu_seconds(pid: int) -> float:
    import os

    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: what a spinning process is given to use in a measuring window, in CPU seconds: on a busy
#: machine the window lasts longer, not the claim weaker
SPUN = 0.45
SPIN = "while True: pass"


def test_other_processes_cpu_time_is_measured_from_proc():
    """A real busy process beside this one shows up as other processes' CPU time: at least what
    it used over the window (more if the machine is busier still), never this process's own."""
    spin = subprocess.Popen([sys.executable, "-c", SPIN])
    idle = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(60)"])  # the measuring tree
    try:
        c0, a = _cpu_seconds(spin.pid), quiet.snapshot(root=idle.pid)
        wait_until(lambda: _cpu_seconds(spin.pid) - c0 >= SPUN, 30)  # the window: until it has spun
        c1, b = _cpu_seconds(spin.pid), quiet.snapshot(root=idle.pid)
    finally:
        for p in (spin, idle):
            p.kill()
            p.wait()
    busy = quiet.between(a, b)
    spun = c1 - c0  # CPU seconds (in /proc's ticks of 1/100 s)
    assert busy["other_cpu_cores"] * busy["seconds"] >= spun - 0.05
    assert busy["own_cpu_cores"] < 0.1  # the idle tree's own
    assert judge(dict(busy, other_cpu_cores=0.8)).startswith("other processes used 0.8 CPU cores")
    assert judge({"other_cpu_cores": 0.1, "steal_pct": 0.0}) is None


# ---- loss equivalence --------------------------------------------------------------------------------

def test_two_splits_that_disagree_are_both_flagged():
    """Was: final losses 7.46 and 7.72 both passed (each within 2% of their midpoint)."""
    events = []
    _run(events, "s/1x4", 1, 4, [100.0] * 8, loss=lambda i: 7.46 + 0.01 * i,
         settings={"precision_used": "bf16 (weights bfloat16)"})
    _run(events, "s/4x1", 4, 1, [50.0] * 8, loss=lambda i: 7.72 + 0.01 * i,
         settings={"precision_used": "bf16 (weights bfloat16)"})
    rows = {r["split"]: r for r in summarise(Results().extend(events))}
    assert rows["1x4"]["loss_ok"] is False and rows["4x1"]["loss_ok"] is False
    assert "differs from 4x1's by 3.36%" in rows["1x4"]["loss_note"]
    assert "but check" in recommendation(list(rows.values()))


def test_loss_compared_over_the_whole_curve_not_the_last_step():
    """Two curves that meet again at the end but part in the middle are not the same training."""
    events = []
    _run(events, "s/1x2", 1, 2, [100.0] * 10, loss=lambda i: 5.0 - 0.1 * i)
    _run(events, "s/2x1", 2, 1, [50.0] * 10, loss=lambda i: 5.0 - 0.1 * i + (0.3 if i == 5 else 0.0))
    rows = {r["split"]: r for r in summarise(Results().extend(events))}
    assert rows["1x2"]["loss_ok"] is False and "at step 5" in rows["1x2"]["loss_note"]


def test_rounding_level_differences_pass_in_fp32():
    events = []
    _run(events, "s/1x2", 1, 2, [100.0] * 10, loss=lambda i: 5.0 - 0.1 * i, settings={"precision_used": "fp32"})
    _run(events, "s/2x1", 2, 1, [50.0] * 10, loss=lambda i: (5.0 - 0.1 * i) * (1 + 2e-6),
         settings={"precision_used": "fp32"})
    rows = summarise(Results().extend(events))
    assert all(r["loss_ok"] for r in rows)


def test_non_finite_loss_is_never_recommended():
    events = []
    _run(events, "s/1x2", 1, 2, [100.0 + i for i in range(8)], loss=lambda i: 5.0)
    _run(events, "s/2x1", 2, 1, [50.0 + i for i in range(8)], loss=lambda i: math.nan if i > 3 else 5.0)
    rows = {r["split"]: r for r in summarise(Results().extend(events))}
    assert "loss went non-finite at step 4" in rows["2x1"]["message"]
    assert "use 1x2" in recommendation(list(rows.values()))


@pytest.mark.slow
def test_a_run_whose_loss_went_nan_is_flagged_from_its_log_too(tmp_path):
    """--lr 1e30: the loss goes NaN; the log keeps null (JSON has no NaN) and says it was not
    finite, so `show` of the log also refuses to recommend it."""
    from .conftest import run_main

    out = tmp_path / "r.json"
    # one split (with gradient accumulation, so the NaN goes through the sum of micro-batch losses)
    proc = run_main("--export", "json", "-o", out, "--splits", "1x2", "--effective-batch", 2, "--steps", 8,
                    "--warmup", 1, "--seq-len", 32, "--lr", "1e30", "--runs-dir", tmp_path / "runs")
    assert proc.returncode in (0, 1), proc.stderr
    log = next((tmp_path / "runs").glob("*/events.jsonl"))
    assert "NaN" not in log.read_text()
    shown = run_main("show", log, "--export", "json", "-o", tmp_path / "s.json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads((tmp_path / "s.json").read_text())
    assert "use " not in data["recommendation"] and "NaN or infinite" in data["recommendation"]
    assert data["splits"] and all("loss went non-finite" in s["message"] for s in data["splits"])


@pytest.mark.slow
def test_full_disk_under_the_runs_dir_is_reported_not_hidden(tmp_path):
    """--runs-dir on a filesystem that fills up mid-sweep (a real 16 KB tmpfs): the splits still
    finish ok (the worker's own log cannot stop training), the event log holds only whole lines,
    and the exit status and one line say the outputs are incomplete."""
    from .conftest import read_csv, run_main, tmpfs

    with tmpfs(tmp_path / "small", "16k") as small:
        out = tmp_path / "out.csv"
        proc = run_main("--export", "csv", "-o", out, "--splits", "1x2,2x1", "--effective-batch", 2, "--steps", 30,
                        "--warmup", 1, "--seq-len", 16, "--runs-dir", small)
        assert proc.returncode == 3, proc.stderr[-3000:]
        assert "event(s) could not be written to" in proc.stderr
        rows = read_csv(out)
        assert [r["status"] for r in rows] == ["ok", "ok"]  # healthy runs stay ok
        log = next(small.glob("*/events.jsonl"))
        text = log.read_bytes()
        assert text.endswith(b"\n") and all(json.loads(line) for line in text.splitlines())  # no torn line


def test_the_sweeps_own_processes_are_not_other_load():
    """A busy child of the measuring tree (a data loader worker, another lane of the sweep) is
    its own load, not "other processes": only load outside the tree flags a run."""
    import os

    child = subprocess.Popen([sys.executable, "-c", SPIN])
    # a process beside it, outside its tree: measured from there, the spinning child is other load
    apart = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        wait_until(lambda: _cpu_seconds(child.pid) > 0.05, 10)  # the child spins (its interpreter is up)
        c0, a, a_apart = _cpu_seconds(child.pid), quiet.snapshot(root=os.getpid()), quiet.snapshot(root=apart.pid)
        wait_until(lambda: _cpu_seconds(child.pid) - c0 >= SPUN, 30)
        c1, b, b_apart = _cpu_seconds(child.pid), quiet.snapshot(root=os.getpid()), quiet.snapshot(root=apart.pid)
    finally:
        for p in (child, apart):
            p.kill()
            p.wait()
    mine, theirs = quiet.between(a, b), quiet.between(a_apart, b_apart)
    spun = c1 - c0  # (clock ticks of 1/100 s on every side)
    assert mine["own_cpu_cores"] * mine["seconds"] >= spun - 0.05  # the spinning child is this tree's own
    assert theirs["own_cpu_cores"] * theirs["seconds"] < 0.05  # (the sleeping process used next to nothing)
    # what is other load from outside the tree is this tree's own from inside it, the same
    # windows apart from the few CPU-ms between the two snapshots of each pair
    assert theirs["other_cpu_cores"] * theirs["seconds"] >= spun - 0.05
    assert (theirs["other_cpu_cores"] * theirs["seconds"] - mine["other_cpu_cores"] * mine["seconds"]
            >= spun - 0.1)


def test_quiet_values_from_a_log_that_are_not_numbers_do_not_crash():
    """Schema-valid but odd values (strings, lists) in a run's quiet record are ignored."""
    for odd in ({"other_cpu_cores": "0.2"}, {"other_cpu_cores": [1]}, {"slowdown_share": 0.5, "slowdown": [1]},
                {"other_gpu_procs": 1, "other_gpu_mem_gib": "x"}):
        judge(odd)
    events = []
    _run(events, "s/1x2", 1, 2, [100.0 + i for i in range(8)], quiet_info={"other_cpu_cores": "9"},
         settings={"precision_used": 32}, loss=lambda i: 5.0)
    _run(events, "s/2x1", 2, 1, [0.0] * 8, loss=lambda i: 5.0)  # zero walls: not measured steps
    summarise(Results().extend(events))


def test_three_equal_splits_are_not_called_faster_by_picking_the_extremes():
    """Equal splits, two runs each, seeds 0..199: the verdict compares the fastest and slowest,
    picked after looking; with a simultaneous interval it claims "faster" rarely (plain 95%
    intervals claimed it in about 10% of such sweeps)."""
    import random

    claims = 0
    for seed in range(200):
        rng = random.Random(seed)
        events = []
        for label, (mb, ga) in (("1x4", (1, 4)), ("2x2", (2, 2)), ("4x1", (4, 1))):
            for rep in (1, 2):
                level = 100.0 * math.exp(rng.gauss(0, 0.08))  # the same split, a fresh process
                _run(events, f"s/{label}#{rep}", mb, ga, [level * (1 + 0.01 * rng.random()) for _ in range(10)])
        if "faster" in verdict(summarise(Results().extend(events))):
            claims += 1
    assert claims <= 12, claims  # 5% of 200 is 10


def test_failed_splits_are_not_ranked_and_ddp_ranks_do_not_overrule_a_failure():
    events = []
    _run(events, "s/1x4", 1, 4, [400.0 + i for i in range(10)])
    _run(events, "s/2x2", 2, 2, [200.0 + i for i in range(10)])
    events.append(make("run_started", "s/4x1", label="4x1", micro_batch=4, grad_accum=1, effective_batch=4))
    for i in range(1, 11):
        events.append(make("step", "s/4x1", step=i, warmup=False, wall_ms=50.0 + i, forward_ms=[20.0], backward_ms=[20.0]))
    events.append(make("run_failed", "s/4x1", kind="oom", message="out of memory at micro-batch 4"))
    events.append(make("run_finished", "s/4x1", rank=1))  # a later rank's finish changes nothing
    rows = {r["split"]: r for r in summarise(Results().extend(events))}
    assert rows["4x1"]["status"] == "oom"
    line = verdict(list(rows.values()))
    assert "4x1" not in line and "2x2 is" in line


@pytest.mark.slow
@pytest.mark.parametrize("warmup", [1, 3])  # 3: with head starts, a lane waits to start the next run
def test_settings_that_fail_every_run_stop_the_sweep_after_two(tmp_path, warmup):
    """A local model folder with a config but no tokenizer or weights passes the up-front checks
    and then fails in every run: after two identical failures before any step, the rest are not
    run, and one line blames the settings (exit 2), instead of exit 1 after every run."""
    from tracetui.core.presets import build_config

    from .conftest import read_csv, run_main

    model = tmp_path / "model"
    build_config("tiny").save_pretrained(model)
    out = tmp_path / "r.csv"
    proc = run_main("--export", "csv", "-o", out, "--model", model, "--splits", "1x4,2x2,4x1", "--steps", 4,
                    "--warmup", warmup, "--runs-dir", tmp_path / "runs")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert ("head starts" in proc.stderr) == (warmup >= 2)
    assert proc.stderr.count("started on") <= 2
    last = [l for l in proc.stderr.splitlines() if l.startswith("tracetui: error: every run fails the same way")]
    assert len(last) == 1 and last[0].endswith("; 1 more not run")  # 4x1, after 1x4 and 2x2 failed alike
    rows = {r["split"]: r for r in read_csv(out)} if out.exists() else {}
    assert rows.get("4x1", {}).get("status") in (None, "error")
