"""Real runs: a worker killed mid-run, real model/data loading from local files."""

import os
import signal
import time

import pytest

from tracetui.config import SweepConfig, validate
from tracetui.runner.sweep import Sweep
from tracetui.store import read_events

from .conftest import read_csv, run_cli

pytestmark = pytest.mark.slow


def test_killed_worker_becomes_crashed_and_sweep_goes_on(tmp_path):
    cfg = SweepConfig(effective_batch=[2], splits="1x2,2x1", repeats=1, steps=12, warmup=1, seq_len=64,
                      runs_dir=str(tmp_path))
    seen = []
    killed = {}

    def on_event(e):
        seen.append(e)
        if e["type"] == "run_started" and e["label"] == "1x2":
            killed["pid"] = e["pid"]
        if e["type"] == "step" and e["run_id"].endswith("1x2") and e["step"] == 3 and "t" not in killed:
            os.kill(killed["pid"], signal.SIGKILL)
            killed["t"] = time.monotonic()
        if e["type"] == "run_failed":
            killed["failed_after"] = time.monotonic() - killed["t"]

    sweep = Sweep(cfg, validate(cfg), on_event=on_event)
    outcomes = sweep.run()
    sweep.close()
    assert list(outcomes.values()) == ["crashed", "ok"]
    assert killed["failed_after"] < 5.0
    failed = [e for e in seen if e["type"] == "run_failed"][0]
    assert "SIGKILL" in failed["message"]
    # everything measured before the kill is on disk, and the other split finished
    on_disk = read_events([sweep.log.path]).events
    steps_1x2 = [e["step"] for e in on_disk if e["type"] == "step" and e["run_id"].endswith("1x2")]
    assert steps_1x2[:3] == [1, 2, 3]
    assert on_disk.count(failed) == 1
    assert sum(1 for e in on_disk if e["type"] == "step" and e["run_id"].endswith("2x1")) == 12


def _save_tiny_model(path):
    import torch
    from transformers import AutoModelForCausalLM

    from tracetui.presets import build_config
    from tracetui.runner.sources import byte_tokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(build_config("tiny"))
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)


def test_local_model_directory_and_jsonl_text(tmp_path):
    model_dir = tmp_path / "my-model"
    _save_tiny_model(model_dir)
    data = tmp_path / "train.jsonl"
    import json

    with open(data, "w") as fh:
        for i in range(40):
            fh.write(json.dumps({"content": f"example {i}: the quick brown fox jumps over the lazy dog. " * 2}) + "\n")
    out = tmp_path / "out.csv"
    proc = run_cli("--export", "csv", "-o", out, "--model", model_dir, "--dataset", data, "--text-field", "content",
                   "--effective-batch", 2, "--splits", "1x2,2x1", "--steps", 4, "--warmup", 1, "--seq-len", 48,
                   "--runs-dir", tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(out)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    events = read_events(list((tmp_path / "runs").glob("*/events.jsonl"))).events
    started = [e for e in events if e["type"] == "run_started"]
    assert started[0]["config"]["model"] == str(model_dir)
    steps = [e for e in events if e["type"] == "step"]
    # real text, real tokenizer: rows are shorter than seq-len and padded, so real tokens < padded
    assert all(0 < e["tokens"] <= 2 * 48 for e in steps)


def test_unreachable_hub_ids_are_config_errors(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = run_cli("--export", "csv", "--model", "nobody/no-such-model", env=env)
    assert proc.returncode == 2 and "--model: cannot load 'nobody/no-such-model'" in proc.stderr
    proc = run_cli("--export", "csv", "--dataset", "nobody/no-such-data", env=env)
    assert proc.returncode == 2 and "--dataset: cannot load 'nobody/no-such-data'" in proc.stderr
    assert "Traceback" not in proc.stderr
