"""A training script's stand-in for runner tests: no torch, no model; it speaks to tracetui's
socket as TraceCallback would (the events of one run: its start, its steps, its end), with step
times set by its split: ``MS_PER_ROW`` per micro-batch row plus ``MS_PER_CALL`` per micro-batch,
so that the answer is known (fewer, larger micro-batches win). ``STUB_CRASH_AT=N`` with
``STUB_CRASH_RUN=1x4#1``: that run's process kills itself after step N (as the OOM killer would)."""

import json
import os
import signal
import socket
import sys
import time

MS_PER_ROW, MS_PER_CALL = 2.0, 8.0


def step_fields(mb: int, ga: int, step: int) -> dict:
    """One step's timings as the stubs report them: (8 + 2 x rows) ms each way per micro-batch, and
    a little step-to-step noise, the same for every split."""
    fw = [(MS_PER_CALL + MS_PER_ROW * mb) / 2] * ga
    wall = 2 * sum(fw) + 1.0 + 0.01 * (step % 3)
    return dict(wall_ms=wall, host_ms=wall, data_ms=0.5, forward_ms=fw, backward_ms=fw, optimizer_ms=0.4,
                other_ms=0.1 + 0.01 * (step % 3), loss=2.0 - 0.01 * step, tokens=64 * mb * ga, samples=mb * ga,
                peak_mem_gib=0.1 * mb, rank=0)


def flag(name: str, default: int) -> int:
    """The script's arguments from its command line, as an HfArgumentParser script reads them."""
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main() -> None:
    mb, ga = flag("--per_device_train_batch_size", 1), flag("--gradient_accumulation_steps", 1)
    # a stub times no steps to decide a warm-up by: ``auto`` takes three
    steps, warmup = flag("--max_steps", 12), int(os.environ.get("TRACETUI_WARMUP", "3").replace("auto", "3"))
    run_id = os.environ["TRACETUI_RUN_ID"]
    crash_at = int(os.environ.get("STUB_CRASH_AT", "0")) if run_id.endswith("/" + os.environ.get("STUB_CRASH_RUN", "-")) else 0
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(os.environ["TRACETUI_SOCKET"])

    def send(etype: str, **fields) -> None:
        sock.sendall((json.dumps(dict(v=1, type=etype, run_id=run_id, t=time.time(), **fields)) + "\n").encode())

    send("run_started", label=f"{mb}x{ga}", micro_batch=mb, grad_accum=ga, effective_batch=mb * ga, world_size=1,
         repeat=0, pid=os.getpid(), rank=0, precision="fp32", env={"device": "cpu", "cpu_count": 2},
         config={"steps": steps, "warmup": warmup})
    step_s = flag("--stub_step_ms", 0) / 1000  # (the time each step takes: the canned times are reported)
    for step in range(1, steps + 1):
        time.sleep(step_s)
        send("step", step=step, warmup=step <= warmup, t_end=time.time(), **step_fields(mb, ga, step))
        if step == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
    send("run_finished", train_runtime_s=0.1, steps=steps, stopped_early=False)
    sock.close()


if __name__ == "__main__":
    main()
