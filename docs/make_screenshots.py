"""Save the README's screenshots from a real sweep: the app runs the sweep headless (Textual's
``run_test``), and Textual saves SVGs of its screen mid-sweep and at the end.

    python docs/make_screenshots.py --prefix cpu_tiny                       # on this machine
    python docs/make_screenshots.py --prefix h200_qwen3-1.7b -- --model qwen3-1.7b --seq-len 512 \\
        --splits 1x4,2x2,4x1 --steps 15 --warmup 3 --precision bf16        # on the GPU
    python docs/make_screenshots.py --prefix h200_qwen3-1.7b --replay screenshots/h200_qwen3-1.7b_events.jsonl
                                     # the final table of a sweep recorded on the GPU, as `show` draws it
    python docs/make_screenshots.py --prefix h200_knobs --size 140x40 \
        --replay docs/results/h200_knobs/knobs2_events.jsonl.gz   # a sweep over settings (gzipped log)

Arguments after ``--`` are tracetui's sweep flags.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from tracetui.cli.main import build_parser
from tracetui.runner.sweep import Sweep
from tracetui.session.loading import load_config
from tracetui.tui.app import TraceApp, sweep_subtitle
from tracetui.tui.sources import SweepSource


async def shoot(app: TraceApp, out: Path, prefix: str, size: tuple[int, int]) -> None:
    async with app.run_test(size=size) as pilot:
        runs = lambda: list(app.results.runs.values())  # noqa: E731
        # mid-sweep: the first split done, the second past its warm-up
        while not (len(runs()) >= 2 and runs()[0].status == "ok" and runs()[1].status == "running"
                   and len(runs()[1].steps) >= 6):
            await pilot.pause(0.2)
        await pilot.pause(0.6)
        app.save_screenshot(f"{prefix}_mid_sweep.svg", path=str(out))
        while app.source.running() or app._dirty:
            await pilot.pause(0.5)
        await pilot.pause(1.0)
        app.save_screenshot(f"{prefix}_final.svg", path=str(out))
        await pilot.press("q")


async def shoot_replay(app: TraceApp, out: Path, prefix: str, size: tuple[int, int]) -> None:
    async with app.run_test(size=size) as pilot:
        while app.source.running() or app._dirty or not app.rows:
            await pilot.pause(0.2)
        await pilot.pause(1.0)
        app.save_screenshot(f"{prefix}_final.svg", path=str(out))
        await pilot.press("q")


def main() -> int:
    from tracetui.core import clock

    clock.mark_command_start(process=True)  # (this program is the command the screenshots show)
    argv = sys.argv[1:]
    own, flags = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", required=True)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "screenshots"))
    p.add_argument("--size", default="110x34")
    p.add_argument("--replay", metavar="EVENTS.jsonl", help="draw the final table of a recorded sweep")
    ns = p.parse_args(own)
    w, h = (int(x) for x in ns.size.split("x"))
    if ns.replay:
        from tracetui.events.log import read_events
        from tracetui.tui.sources import ReplaySource

        app = TraceApp(ReplaySource(read_events([ns.replay]).events), subtitle="replay",
                       out_path=str(Path(ns.out) / "screenshot_results.csv"))
        asyncio.run(shoot_replay(app, Path(ns.out), ns.prefix, (w, h)))
        print(f"saved {ns.prefix}_final.svg in {ns.out} from {ns.replay}")
        return 0
    sweep_ns = build_parser().parse_args(flags or ["--splits", "1x4,2x2,4x1", "--steps", "12", "--warmup", "2"])
    cfg, splits = load_config(sweep_ns)
    sweep = Sweep(cfg, splits)
    app = TraceApp(SweepSource(sweep), planned=[(s.run_id, s.trial) for s in (sweep.planned() or [])],
                   out_path=str(Path(cfg.runs_dir) / "screenshot_results.csv"),
                   subtitle=sweep_subtitle(sweep))
    t0 = time.monotonic()
    asyncio.run(shoot(app, Path(ns.out), ns.prefix, (w, h)))
    sweep.close()
    print(f"saved {ns.prefix}_mid_sweep.svg and {ns.prefix}_final.svg in {ns.out} "
          f"({time.monotonic() - t0:.0f} s); events in {sweep.log.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
