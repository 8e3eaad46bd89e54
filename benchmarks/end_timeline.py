"""Where a tracetui command's end goes: from its last run's ``run_finished`` to its exit.

Runs ``tracetui ARGS`` in a child interpreter (as ``python -m tracetui`` would) whose end-path
functions are timed as they are called (the sweep's close, the outputs, the verdict's lines,
the stop signals' release, the fork server's stop, the last ``atexit`` handler), and times the
child's exit and the end of its output from here. Prints one JSON line: each mark, in order, in seconds
after the sweep's end (its ``sweep`` event), and the last ``run_finished`` before it.

    python benchmarks/end_timeline.py -- --export json -o /tmp/e.json --splits 1x4,4x1 --steps 8 \\
        --repeats 1 --runs-dir /tmp/e
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

_CHILD = r"""
import atexit, sys, time
T = []
def mark(s):
    T.append((time.time(), s))
atexit.register(lambda: (mark("last atexit handler"), sys.stderr.write("".join(f"[end] {t:.4f} {s}\n" for t, s in T))))
import tracetui.session.headless as S, tracetui.runner.sweep as SW, tracetui.runner.lifetime as L, tracetui.runner.turns as TU
for owner, name in ((SW.Sweep, "close"), (TU.Turns, "close"), (S, "report"),
                    (S, "sweep_time_line"), (S.StopSignals, "release"), (S, "release_outputs"), (L, "stop_server")):
    f = getattr(owner, name)
    def timed(*a, _f=f, _n=f"{getattr(owner, '__name__', '')}.{name}", **k):
        mark(_n + " begins")
        try:
            return _f(*a, **k)
        finally:
            mark(_n + " ends")
    setattr(owner, name, timed)
from tracetui.cli.main import main
if __name__ == "__main__":
    rc = main(sys.argv[1:])
    mark("main returned")
    sys.exit(rc)
"""


def main() -> None:
    args = sys.argv[1:]
    args = args[args.index("--") + 1:] if "--" in args else args
    runs = Path(args[args.index("--runs-dir") + 1])
    script = Path(f"/tmp/tracetui_end_timeline_{time.time_ns()}.py")
    script.write_text(_CHILD)
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    exited: list[float] = []
    threading.Thread(target=lambda: (proc.wait(), exited.append(time.time())), daemon=True).start()
    out, err = proc.communicate()
    t_eof = time.time()
    script.unlink()
    logs = sorted((q for q in runs.glob("*/events.jsonl") if q.stat().st_mtime >= t0), key=lambda q: q.stat().st_mtime)
    events = [json.loads(line) for line in logs[-1].read_text().splitlines()]
    ended = next(e["times"]["ended"] for e in events if e["type"] == "sweep" and "ended" in e["times"])
    last = max(e["t"] for e in events if e["type"] in ("run_finished", "run_failed"))
    marks = [("last run_finished", round(last - ended, 4))]
    for line in err.splitlines():
        if line.startswith("[end] "):
            _, t, what = line.split(" ", 2)
            marks.append((what, round(float(t) - ended, 4)))
    if exited:
        marks.append(("process exited (here)", round(exited[0] - ended, 4)))
    marks.append(("output ended (here)", round(t_eof - ended, 4)))
    print(json.dumps({"exit": proc.returncode, "seconds_after_the_sweeps_end": marks}))


if __name__ == "__main__":
    main()
