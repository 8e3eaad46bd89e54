"""Real runs: real model/data loading from local files, and hub ids that cannot be reached. (A
worker killed mid-run: tests/test_faults.py::test_worker_sigkill_mid_run_headless.)"""

import os
import subprocess
import sys

import pytest

from tracetui.store import read_events

from .conftest import ROOT, cli_args, read_csv, run_main

pytestmark = pytest.mark.slow


def _save_tiny_model(path):
    import torch
    from transformers import AutoModelForCausalLM

    from tracetui.presets import build_config
    from tracetui.runner.sources import byte_tokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(build_config("tiny"))
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)


def test_local_model_directory_and_jsonl_text(tmp_path, monkeypatch):
    """A model folder and a data file given by paths relative to where tracetui runs. The fork
    server (one per process) is started first from another folder: a trial forked from it must
    still work where the sweep does, not where the server started (multiprocessing hands each
    child its parent's folder of the moment)."""
    from tracetui.runner.lifetime import trial_context

    monkeypatch.chdir(ROOT)
    trial_context()  # (already running if an earlier test in this process started it)
    model_dir = tmp_path / "my-model"
    _save_tiny_model(model_dir)
    data = tmp_path / "train.jsonl"
    import json

    with open(data, "w") as fh:
        for i in range(40):
            fh.write(json.dumps({"content": f"example {i}: the quick brown fox jumps over the lazy dog. " * 2}) + "\n")
    proc = run_main("--export", "csv", "-o", "out.csv", "--model", "my-model", "--dataset", "train.jsonl",
                    "--text-field", "content", "--effective-batch", 2, "--splits", "2x1", "--steps", 4, "--warmup", 1,
                    "--seq-len", 48, "--runs-dir", "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(tmp_path / "out.csv")
    assert [r["status"] for r in rows] == ["ok"], rows[0].get("message")
    events = read_events(list((tmp_path / "runs").glob("*/events.jsonl"))).events
    started = [e for e in events if e["type"] == "run_started"]
    assert started[0]["config"]["model"] == "my-model"
    steps = [e for e in events if e["type"] == "step"]
    # real text, real tokenizer: rows are shorter than seq-len and padded, so real tokens < padded
    assert all(0 < e["tokens"] <= 2 * 48 for e in steps)


def test_unreachable_hub_ids_are_config_errors(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    cases = {"--model": "nobody/no-such-model", "--dataset": "nobody/no-such-data"}
    # both at once, each a real `python -m tracetui`
    procs = {}
    for flag, name in cases.items():
        args = cli_args(["--export", "csv", flag, name, "--runs-dir", tmp_path / flag[2:]])
        procs[flag] = subprocess.Popen([sys.executable, "-m", "tracetui", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env=env)
    try:
        for flag, proc in procs.items():
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 2 and f"{flag}: cannot load '{cases[flag]}'" in err, err
            assert "Traceback" not in err
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_hub_that_cannot_be_reached_is_said_once_and_loads_go_to_the_cache(tmp_path):
    """No route to the hub (a port nobody listens on stands for it): one line says so, and the
    checks and runs load from the cache at once instead of each waiting on the hub's retries."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update(PYTHONUNBUFFERED="1", HF_ENDPOINT=f"http://127.0.0.1:{port}")
    args = cli_args(["--export", "csv", "--model", "nobody/no-such-model", "--runs-dir", tmp_path / "runs"])
    proc = subprocess.run([sys.executable, "-m", "tracetui", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert ("tracetui: 127.0.0.1 cannot be reached (Connection refused): nobody/no-such-model load from this "
            "machine's cache only (HF_HUB_OFFLINE=1); set HF_HUB_OFFLINE=0 to wait for the hub instead") in proc.stderr
    assert "--model: cannot load 'nobody/no-such-model'" in proc.stderr
    assert "Retry" not in proc.stderr and "Traceback" not in proc.stderr


def test_the_hub_is_left_alone_where_it_answers_or_the_user_decided(monkeypatch):
    import socket

    from tracetui.config import SweepConfig
    from tracetui.runner.preflight import offline_if_hub_unreachable

    cfg = SweepConfig(model="nobody/some-model")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(4)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
        assert offline_if_hub_unreachable(cfg) == "" and "HF_HUB_OFFLINE" not in os.environ
    # closed now; yet a proxy, the user's own choice, or nothing named on the hub: left alone
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert offline_if_hub_unreachable(cfg) == ""
    monkeypatch.delenv("HTTPS_PROXY")
    assert offline_if_hub_unreachable(SweepConfig()) == ""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert offline_if_hub_unreachable(cfg) == "" and os.environ["HF_HUB_OFFLINE"] == "0"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert offline_if_hub_unreachable(cfg).startswith("127.0.0.1 cannot be reached (Connection refused)")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    # an endpoint given without a scheme is named as given, not as huggingface.co
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "hub.invalid")
    assert offline_if_hub_unreachable(cfg).startswith("hub.invalid cannot be reached (")
