import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The tests never download: offline mode for the hub and datasets, set before either is imported
# (both read it once, at import). A hub id then fails at once instead of retrying a network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args, cwd=None, timeout=600, env=None):
    """Run ``python -m tracetui ARGS`` as a real subprocess."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "tracetui", *map(str, args)], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def wait_until(pred, timeout=120):
    """Poll ``pred`` until it is true; fail after ``timeout`` seconds."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out")
        time.sleep(0.1)


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory):
    """One real headless sweep on the tiny preset, shared by the tests that read its outputs."""
    d = tmp_path_factory.mktemp("sweep")
    out, steps = d / "out.csv", d / "steps.csv"
    proc = run_cli("--export", "csv", "-o", out, "--steps-csv", steps, "--splits", "1x4,2x2,4x1",
                   "--steps", 8, "--warmup", 2, "--runs-dir", d / "runs")
    logs = list((d / "runs").glob("*/events.jsonl"))
    return dict(proc=proc, out=out, steps=steps, jsonl=logs[0] if logs else None, dir=d)
