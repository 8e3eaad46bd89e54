"""A headless sweep's progress on stderr, one line per run's start and end and per tenth of its
steps."""

from __future__ import annotations

from ..analysis import repeat_mark
from ..core.knobs import SHORT
from ..core.text import say
from ..core.trial import Trial
from ..events.schema import ESTIMATE, NOTICE, RUN_FAILED, RUN_FINISHED, RUN_STARTED, STEP


def progress_printer(total_runs: int, steps: int):
    """Headless progress: one line per run start/end and per tenth of a run's steps."""
    state: dict = {"n": 0, "steps": {}, "labels": {}}

    def on_event(e: dict) -> None:
        t = e["type"]
        if t == RUN_STARTED:  # written as everywhere else: 1x4#2 ckpt=on (never the run id's slug)
            try:
                state["labels"][e["run_id"]] = Trial.from_fields(e).label(SHORT, repeat_mark(e["run_id"]))
            except (KeyError, TypeError, ValueError):
                pass
        label = state["labels"].get(e["run_id"]) or e["run_id"].split("/", 1)[-1]
        if t == RUN_STARTED:
            if e.get("rank", 0) != 0:
                return
            if e["run_id"].endswith("-alone"):  # a head start's run again, alone (crowded or lost): no run of the plan
                say(f"[again] {label}: started alone")
                state["steps"][e["run_id"]] = (e.get("config") or {}).get("steps") or steps or 0
                return
            state["n"] += 1
            # the run's own (a memory probe runs fewer), else the sweep's
            state["steps"][e["run_id"]] = (e.get("config") or {}).get("steps") or steps or 0
            env = e.get("env") or {}
            where = env.get("gpu_name") or "CPU"
            of = f"/{total_runs}" if total_runs else ""
            if e.get("mode") == "not started":  # skipped or unavailable: its reason follows
                say(f"[{state['n']}{of}] {label}: not started")
                return
            pid = f" (pid {e['pid']})" if e.get("pid") else ""  # (none where the supervisor reports it)
            early = ", a head start: built now, it steps once the run before it ends" if e.get("head_start") else ""
            say(f"[{state['n']}{of}] {label}: started on {where}{pid}{early}")
        elif t == STEP and e.get("rank", 0) == 0:
            total = state["steps"].get(e["run_id"], steps)
            # a tenth of the run at a time; with no total known, 1-9, 10, 20, ..., 100, 200, ...
            every = max(1, total // 10) if total else 10 ** (len(str(max(1, e["step"]))) - 1)
            if e["step"] % every == 0 or e["step"] == total:
                tag = " (warm-up)" if e["warmup"] else ""
                of = f"/{total}" if total else ""
                say(f"  {label}: step {e['step']}{of} {e['wall_ms']:.1f} ms{tag}")
        elif t == RUN_FINISHED and e.get("rank", 0) == 0:
            say(f"  {label}: ok")
        elif t == RUN_FAILED:
            say(f"  {label}: {e['kind']}: {e['message']}")
        elif t == NOTICE and e.get("level") == "warning":
            say(f"  {label}: {e['message']}")
        elif t == NOTICE and e.get("level") == ESTIMATE:
            say(f"tracetui: {e['message']}")

    return on_event
