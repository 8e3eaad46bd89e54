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
    """Run ``python -m tracetui ARGS`` as a real subprocess. A sweep runs one repeat unless the
    test asks for more (the default of two doubles every sweep's time; the tests that are about
    repeats say so)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    args = [str(a) for a in args]
    if "--repeats" not in args and not (args and args[0] in ("show", "watch")):
        cut = args.index("--") if "--" in args else len(args)
        args = args[:cut] + ["--repeats", "1"] + args[cut:]
    return subprocess.run([sys.executable, "-m", "tracetui", *args], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def claims_or_holds_back(text: str, *claims: str) -> bool:
    """True if ``text`` makes every one of ``claims``, or holds its verdict back because the
    machine was busy while it measured (other processes' CPU time, as tracetui records it: a
    shared test machine can be busy, and then a ranking must not be claimed)."""
    return all(c in text for c in claims) or "held back: the machine was busy (" in text


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
