"""Real runs: real model/data loading from local files, and hub ids that cannot be reached. (A
worker killed mid-run: tests/test_faults.py::test_worker_sigkill_mid_run_headless.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracetui.events.log import read_events

from .conftest import ROOT, cli_args, outcome, read_csv, run_main, scenarios, wait_until


def _save_tiny_model(path):
    import torch
    from transformers import AutoModelForCausalLM

    from tracetui.core.presets import build_config
    from tracetui.runner.sources import byte_tokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(build_config("tiny"))
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)


@pytest.mark.slow
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


@pytest.mark.slow
def test_unreachable_hub_ids_are_config_errors(tmp_path):
    # (this process runs with HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1: tests/conftest.py)
    for flag, name in {"--model": "nobody/no-such-model", "--dataset": "nobody/no-such-data"}.items():
        proc = run_main("--export", "csv", flag, name, "--runs-dir", tmp_path / flag[2:])
        assert proc.returncode == 2 and f"{flag}: cannot load '{name}'" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def _no_route_to_the_hub(folder: Path):
    """A sweep of a hub id where a port nobody listens on stands for the hub (a fresh process:
    the hub settings are its environment's)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update(PYTHONUNBUFFERED="1", HF_ENDPOINT=f"http://127.0.0.1:{port}")
    args = cli_args(["--export", "csv", "--model", "nobody/no-such-model", "--runs-dir", folder / "runs"])
    return subprocess.run([sys.executable, "-m", "tracetui", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=300)


scenarios(__name__, {"no route": _no_route_to_the_hub})


@pytest.mark.slow
def test_a_hub_that_cannot_be_reached_is_said_once_and_loads_go_to_the_cache(scenario_results):
    """No route to the hub (a port nobody listens on stands for it): one line says so, and the
    checks and runs load from the cache at once instead of each waiting on the hub's retries."""
    proc = outcome(scenario_results[__name__], "no route")
    assert proc.returncode == 2, proc.stderr
    assert ("tracetui: 127.0.0.1 cannot be reached (Connection refused): nobody/no-such-model load from this "
            "machine's cache only (HF_HUB_OFFLINE=1); set HF_HUB_OFFLINE=0 to wait for the hub instead") in proc.stderr
    assert "--model: cannot load 'nobody/no-such-model'" in proc.stderr
    assert "Retry" not in proc.stderr and "Traceback" not in proc.stderr


def test_the_hub_is_left_alone_where_it_answers_or_the_user_decided(monkeypatch):
    import socket

    from tracetui.core.config import SweepConfig
    from tracetui.runner.preflight import offline_if_hub_unreachable

    cfg = SweepConfig(model="nobody/some-model")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(4)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
        assert offline_if_hub_unreachable(cfg) == "" and "HF_HUB_OFFLINE" not in os.environ
    # closed now; yet the user's own choice, or nothing named on the hub: left alone
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


class _Proxy:
    """A real HTTP proxy's first answer to ``CONNECT`` (``answer``; None: takes the connection
    and never answers), on a local port; ``asked`` holds what each client sent."""

    def __init__(self, answer: bytes | None):
        import socket
        import threading

        self.answer, self.asked = answer, []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        held = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            held.append(conn)
            data = b""
            while b"\r\n\r\n" not in data and b"\n\n" not in data:
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
            self.asked.append(data.decode("latin-1"))
            if self.answer is not None:
                try:
                    conn.sendall(self.answer)
                except OSError:  # (a client that only connected, and went)
                    pass
                conn.close()

    def close(self) -> None:
        self.sock.close()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connections are refused


def _no_hub_settings(monkeypatch) -> None:
    for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "NO_PROXY", "no_proxy", "https_proxy",
              "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)


@pytest.mark.parametrize("answer, why", [
    (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", "the proxy answered 'HTTP/1.1 502 Bad Gateway'"),
    (b"HTTP/1.0 403 Forbidden\n\n", "the proxy answered 'HTTP/1.0 403 Forbidden'"),  # (a bare newline)
    (None, "timed out"),
    ("refused", "Connection refused"),
])
def test_a_hub_reachable_neither_directly_nor_through_the_proxy_sends_loads_to_the_cache(monkeypatch, answer, why):
    """Behind an HTTPS proxy that is down, or cannot open a tunnel to the hub, every load waited
    on the hub's retries (about 30 s each): the proxy is now asked for the tunnel itself, beside
    the direct route (here a refused local endpoint stands for the hub)."""
    from tracetui.core.config import SweepConfig
    from tracetui.runner.preflight import offline_if_hub_unreachable

    _no_hub_settings(monkeypatch)
    hub = _closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"https://127.0.0.1:{hub}")
    proxy = None if answer == "refused" else _Proxy(answer)
    port = _closed_port() if proxy is None else proxy.port
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:secret@127.0.0.1:{port}")
    try:
        line = offline_if_hub_unreachable(SweepConfig(model="nobody/some-model"), timeout_s=1.0)
    finally:
        if proxy is not None:
            proxy.close()
    assert line.startswith(f"127.0.0.1 cannot be reached directly (Connection refused) or through the proxy "
                           f"http://127.0.0.1:{port} ({why}): nobody/some-model load from this machine's cache only"), line
    assert "secret" not in line and os.environ["HF_HUB_OFFLINE"] == "1"
    if proxy is not None:  # it was asked for a tunnel to the hub, with the credentials the URL gave
        assert proxy.asked and proxy.asked[0].startswith(f"CONNECT 127.0.0.1:{hub} HTTP/1.1\r\n")
        assert "Proxy-Authorization: Basic dXNlcjpzZWNyZXQ=" in proxy.asked[0]


def test_a_route_that_works_leaves_the_hub_alone(monkeypatch):
    """The proxy opens the tunnel (the direct route refused), or the direct route works (the
    proxy dead: which one the hub's client takes is its own reading of NO_PROXY), or a plain
    HTTP endpoint's proxy takes the connection (no tunnel asked for): nothing changes."""
    from tracetui.core.config import SweepConfig
    from tracetui.runner.preflight import offline_if_hub_unreachable

    cfg = SweepConfig(model="nobody/some-model")
    _no_hub_settings(monkeypatch)
    proxy = _Proxy(b"HTTP/1.1 200 Connection established\r\n\r\n")
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"https://127.0.0.1:{_closed_port()}")
        monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{proxy.port}")  # (no scheme: http, as curl reads it)
        assert offline_if_hub_unreachable(cfg, timeout_s=2.0) == "" and "HF_HUB_OFFLINE" not in os.environ
        assert proxy.asked[0].startswith("CONNECT 127.0.0.1:")
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{_closed_port()}")  # dead; the endpoint answers
        monkeypatch.setenv("HF_ENDPOINT", f"https://127.0.0.1:{proxy.port}")
        assert offline_if_hub_unreachable(cfg, timeout_s=2.0) == "" and "HF_HUB_OFFLINE" not in os.environ
        asked = len(proxy.asked)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        assert offline_if_hub_unreachable(cfg, timeout_s=2.0) == "" and "HF_HUB_OFFLINE" not in os.environ
        wait_until(lambda: len(proxy.asked) > asked, 5)
        assert proxy.asked[-1] == ""  # (the connection only: nothing was sent)
    finally:
        proxy.close()


def test_a_proxy_setting_that_cannot_be_read_is_no_crash(monkeypatch):
    from tracetui.core.config import SweepConfig
    from tracetui.runner.preflight import offline_if_hub_unreachable

    _no_hub_settings(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", f"https://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:99999")
    line = offline_if_hub_unreachable(SweepConfig(model="nobody/some-model"), timeout_s=1.0)
    assert line.startswith("127.0.0.1 cannot be reached (Connection refused): "), line
