"""A flood of valid events into a real ``tracetui watch --export csv``: its peak memory, and how
long it takes from SIGINT (Ctrl-C) to its exit with the summary written.

Starts ``python -m tracetui watch --export csv`` on a socket of its own, connects to it as a
TraceCallback does (over the real UNIX socket), and sends ``--events`` valid events as fast as
the socket takes them: ``--runs`` runs, each a ``run_started`` then its steps, with a GPU sample
every ``--gpu-every`` steps and a notice now and then; no two steps of a run alike. Once the
watcher has logged every event (its events.jsonl holds them all), it is sent SIGINT. Printed:
the events sent and logged, the rate, the watcher's peak resident memory (``VmHWM``, the kernel's
own high-water mark, read every 0.05 s until the process is gone: its summary included), the
time from SIGINT to its exit, its exit status, and the summary's rows. Goals: at most ~200 MB for a million
events, the summary within 5 s of SIGINT after 200 000 events.

    python benchmarks/watch_flood.py [--events 1000000] [--runs 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _status(pid: int, key: str) -> int:
    """``key`` (VmRSS, VmHWM) of process ``pid`` in KiB, 0 once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def lines(n: int, runs: int, gpu_every: int, seed: int = 1):
    """``n`` valid events as JSON lines, spread over ``runs`` runs."""
    rng = random.Random(seed)
    t = time.time()
    per_run = max(1, n // runs)
    sent = 0
    for r in range(runs):
        rid = f"flood-{os.getpid()}/run{r}"
        mb = 1 << (r % 4)
        yield json.dumps({"v": 1, "type": "run_started", "run_id": rid, "t": t, "label": f"{mb}x{8 // mb}",
                          "micro_batch": mb, "grad_accum": 8 // mb, "effective_batch": 8, "world_size": 1,
                          "rank": 0, "pid": 1000 + r, "mode": "attach", "env": {"device": "cuda", "gpu_name": "NVIDIA H200"},
                          "config": {"steps": per_run, "warmup": 3}, "max_steps": per_run}).encode() + b"\n"
        sent += 1
        step = 0
        while sent < (r + 1) * per_run and sent < n:
            step += 1
            t += 0.05
            wall = 50.0 + rng.random() * 10
            yield json.dumps({"v": 1, "type": "step", "run_id": rid, "t": t, "step": step, "warmup": step <= 3,
                              "wall_ms": wall, "host_ms": wall, "data_ms": 1.0 + rng.random(),
                              "forward_ms": [wall * 0.3 / mb] * mb, "backward_ms": [wall * 0.5 / mb] * mb,
                              "optimizer_ms": 3.0, "other_ms": 1.0, "loss": 2.0 - step * 1e-6, "tokens": 4096,
                              "samples": 8, "peak_mem_gib": 40.0 + rng.random(), "rank": 0, "t_end": t}).encode() + b"\n"
            sent += 1
            if gpu_every and step % gpu_every == 0 and sent < n:
                yield json.dumps({"v": 1, "type": "gpu", "run_id": rid, "t": t, "util": 90.0 + rng.random(),
                                  "mem_used_gib": 60.0, "mem_total_gib": 141.0, "power_w": 500.0, "energy_j": None,
                                  "sm_clock_mhz": 1980.0, "temp_c": 50.0, "gpu_index": 0}).encode() + b"\n"
                sent += 1
            if step % 50_000 == 0 and sent < n:
                yield json.dumps({"v": 1, "type": "notice", "run_id": rid, "t": t, "level": "info",
                                  "message": f"step {step}"}).encode() + b"\n"
                sent += 1
    while sent < n:  # (rounding) the last run's steps
        step += 1
        yield json.dumps({"v": 1, "type": "step", "run_id": rid, "t": t, "step": step, "warmup": False,
                          "wall_ms": 50.0}).encode() + b"\n"
        sent += 1


def logged(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except OSError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--gpu-every", type=int, default=2, help="a GPU sample every N steps (0: none)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="tracetui-flood-"))
    sock, runs, out = tmp / "w.sock", tmp / "runs", tmp / "summary.csv"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    err = open(tmp / "watch.err", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tracetui", "watch", "--export", "csv", "--socket", str(sock),
                             "--runs-dir", str(runs), "-o", str(out)], cwd=tmp, env=env,
                            stdout=subprocess.DEVNULL, stderr=err)
    peak = {"rss": 0, "hwm": 0}
    done = threading.Event()

    def sample() -> None:  # VmHWM only grows: its last reading before the exit is the peak
        while not done.is_set():
            peak["rss"] = max(peak["rss"], _status(proc.pid, "VmRSS"))
            peak["hwm"] = max(peak["hwm"], _status(proc.pid, "VmHWM"))
            done.wait(0.05)

    threading.Thread(target=sample, daemon=True).start()
    deadline = time.monotonic() + 60
    while not sock.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            print("the watcher did not start:", (tmp / "watch.err").read_text())
            return 1
        time.sleep(0.05)
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(sock))
    assert c.recv(64).startswith(b"tracetui-watch")
    t0 = time.monotonic()
    buf, n = bytearray(), 0
    for line in lines(args.events, args.runs, args.gpu_every):
        buf += line
        n += 1
        if len(buf) > 1 << 20:
            c.sendall(buf)
            buf.clear()
    c.sendall(buf)
    c.close()
    sent_s = time.monotonic() - t0
    log = next(runs.glob("watch-*/events.jsonl"))
    while logged(log) < n and proc.poll() is None:
        time.sleep(0.5)
    taken_s = time.monotonic() - t0
    hwm_before = _status(proc.pid, "VmHWM")  # all events in, before the summary
    t1 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=600)
    exit_s = time.monotonic() - t1
    done.set()
    err.close()
    rows = max(0, len(out.read_text().splitlines()) - 1) if out.exists() else 0
    print(f"events sent: {n} over one connection in {sent_s:.1f} s; all {logged(log)} in the event log after "
          f"{taken_s:.1f} s ({n / taken_s:.0f} events/s)")
    print(f"event log: {log.stat().st_size / 2**20:.0f} MiB on disk (it keeps every event)")
    print(f"watcher peak resident memory: {max(peak['hwm'], peak['rss']) / 1024:.0f} MiB "
          f"(VmHWM {hwm_before / 1024:.0f} MiB with every event in, {peak['hwm'] / 1024:.0f} MiB at its last "
          f"reading before the exit, every 0.05 s)")
    print(f"SIGINT to exit: {exit_s:.2f} s; exit status {code}; summary rows: {rows}")
    tail = [l for l in (tmp / "watch.err").read_text().splitlines() if l.startswith("tracetui:")][-6:]
    print("watcher's last lines:\n  " + "\n  ".join(tail))
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"kept {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
