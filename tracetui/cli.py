"""Command line: ``tracetui`` (live TUI), ``tracetui --export csv`` (headless), and the
``watch``, ``show`` and ``sweep`` subcommands.

User errors end with one line on stderr and exit status 2; no tracebacks. Heavy libraries are
imported only on the paths that train, so ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from . import __version__
from .config import ConfigError, SweepConfig, add_arguments, from_args, validate, validate_deep

EXIT_OK, EXIT_NONE_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A bad command line: printed on one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(f"{message}; see `{self.prog} --help`")


def _out_args(p: argparse.ArgumentParser, default_out: str = "tracetui_results.csv") -> None:
    g = p.add_argument_group("output")
    g.add_argument("--export", choices=("csv", "json"), help="run headless and write the summary in this format")
    g.add_argument("-o", "--output", default=None, help=f"summary path (default {default_out}, or .json; - for stdout)")
    g.add_argument("--steps-csv", metavar="PATH", help="also write every measured step as CSV")
    g.add_argument("--dry-run", action="store_true", help="check the settings, print the planned runs, and stop")
    g.add_argument("--project-steps", type=int, default=None, metavar="N",
                   help="project the wall time of a full training run of N optimizer steps per split")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tracetui", description=(
        "Measure how to split an effective batch into micro-batch x gradient accumulation for LoRA "
        "fine-tuning (transformers + TRL + PEFT). With no --export, opens the live terminal UI. "
        "Subcommands: watch (attach to scripts using TraceCallback), show FILE.jsonl..., "
        "sweep -- python train.py ARGS."))
    p.add_argument("--version", action="version", version=f"tracetui {__version__}")
    add_arguments(p)
    _out_args(p)
    return p


def _fail(msg: str, code: int = EXIT_USAGE) -> int:
    # The message may quote what the user typed: keep it on one line whatever that holds.
    line = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in msg)
    sys.stderr.write(f"tracetui: error: {line}\n")
    return code


def _default_out(ns) -> str:
    if ns.output:
        return ns.output
    return "tracetui_results.json" if ns.export == "json" else "tracetui_results.csv"


def _check_writable(path: str, flag: str) -> None:
    if path == "-":
        return
    if Path(path).is_dir():
        raise ConfigError(flag, f"{path} is a folder", "give a file path, e.g. results.csv")
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise ConfigError(flag, f"folder {parent} does not exist", "create it or choose another path")
    if not os.access(parent, os.W_OK) or (Path(path).exists() and not os.access(path, os.W_OK)):
        raise ConfigError(flag, f"{path} is not writable", "choose a path you can write")


def load_config(ns, deep: bool = True) -> tuple[SweepConfig, list]:
    """The validated config and its splits; ``deep`` also checks model, data and device (not
    for ``sweep``, where the script owns those)."""
    cfg = from_args(ns)
    splits = validate(cfg)
    runs = Path(cfg.runs_dir)
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("--runs-dir", f"cannot create {cfg.runs_dir} ({exc.strerror})",
                          "choose a writable folder") from None
    if not os.access(runs, os.W_OK):
        raise ConfigError("--runs-dir", f"{cfg.runs_dir} is not writable", "choose a writable folder")
    if getattr(ns, "project_steps", None) is not None and ns.project_steps < 1:
        raise ConfigError("--project-steps", f"must be at least 1, got {ns.project_steps}", "give e.g. 1000")
    if getattr(ns, "export", None):
        _check_writable(_default_out(ns), "--output")
    if getattr(ns, "steps_csv", None):
        _check_writable(ns.steps_csv, "--steps-csv")
    if deep:
        validate_deep(cfg)
    return cfg, splits


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in ("show", "watch", "sweep"):
            from . import commands

            return getattr(commands, f"{argv[0]}_main")(argv[1:])
        ns = build_parser().parse_args(argv)
        cfg, splits = load_config(ns)
    except (UsageError, ConfigError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted before any run started", EXIT_INTERRUPTED)
    if getattr(ns, "dry_run", False):
        from .runner.sweep import plan_runs

        ws = f"x{cfg.world_size}" if cfg.world_size > 1 else ""
        for n, (split, rep) in enumerate(plan_runs(cfg, splits), 1):
            print(f"run {n}: {split.label}{ws} (effective batch {split.effective_batch * cfg.world_size}"
                  + (f", repeat {rep + 1}" if cfg.repeats > 1 else "") + f"), {'at most ' if cfg.until_confident is not None else ''}{cfg.steps} steps, {cfg.model}")
        return EXIT_OK
    sweep = None
    if cfg.world_size > 1:
        from .runner.script import DdpSweep

        sweep = DdpSweep(cfg, splits)
    if ns.export:
        return run_headless(cfg, splits, ns, sweep=sweep)
    from .tui.app import run_app

    return run_app(cfg, splits, ns, sweep=sweep)


def progress_printer(total_runs: int, steps: int):
    """Headless progress: one line per run start/end and per tenth of a run's steps."""
    from .events import NOTICE, RUN_FAILED, RUN_FINISHED, RUN_STARTED, STEP

    state: dict = {"n": 0, "steps": {}}

    def on_event(e: dict) -> None:
        t = e["type"]
        label = e["run_id"].split("/", 1)[-1]
        if t == RUN_STARTED:
            if e.get("rank", 0) != 0:
                return
            state["n"] += 1
            state["steps"][e["run_id"]] = steps or (e.get("config") or {}).get("steps") or 0
            env = e.get("env") or {}
            where = env.get("gpu_name") or "CPU"
            of = f"/{total_runs}" if total_runs else ""
            sys.stderr.write(f"[{state['n']}{of}] {label}: started on {where} (pid {e.get('pid')})\n")
        elif t == STEP and e.get("rank", 0) == 0:
            total = state["steps"].get(e["run_id"], steps)
            every = max(1, total // 10)
            if e["step"] % every == 0 or e["step"] == total:
                tag = " (warm-up)" if e["warmup"] else ""
                of = f"/{total}" if total else ""
                sys.stderr.write(f"  {label}: step {e['step']}{of} {e['wall_ms']:.1f} ms{tag}\n")
        elif t == RUN_FINISHED and e.get("rank", 0) == 0:
            sys.stderr.write(f"  {label}: ok\n")
        elif t == RUN_FAILED:
            sys.stderr.write(f"  {label}: {e['kind']}: {e['message']}\n")
        elif t == NOTICE and e.get("level") == "warning":
            sys.stderr.write(f"  {label}: {e['message']}\n")
        sys.stderr.flush()

    return on_event


def finish_outputs(results, ns, sweep_log: str | None) -> tuple[list[dict], str | None]:
    """Write the summary (and steps CSV). Returns the rows and an error line, if writing failed:
    the results stay in the JSONL either way."""
    from .export import export, steps_csv, write_text

    out = _default_out(ns) if getattr(ns, "export", None) else (ns.output or "tracetui_results.csv")
    fmt = ns.export or ("json" if out.endswith(".json") else "csv")
    try:
        rows = export(results, fmt, out, getattr(ns, "project_steps", None))
        if getattr(ns, "steps_csv", None):
            write_text(ns.steps_csv, steps_csv(results))
    except OSError as exc:
        from .analysis import summarise

        where = f"; every event is in {sweep_log}: export again with `tracetui show {sweep_log} -o OTHER.csv`" if sweep_log else ""
        return summarise(results), f"cannot write {exc.filename or out} ({exc.strerror or exc}){where}"
    return rows, None


def write_and_report(results, ns, log_path: str | None) -> int:
    """Write the outputs, say the verdict and the advice on stderr; the exit status for it."""
    from .analysis import recommendation, verdict

    rows, err = finish_outputs(results, ns, log_path)
    if err:
        sys.stderr.write(f"tracetui: error: {err}\n")
    for line in (verdict(rows), recommendation(rows)):
        if line:
            sys.stderr.write(f"tracetui: {line}\n")
    return EXIT_NONE_OK if err else EXIT_OK


def run_headless(cfg: SweepConfig, splits: list, ns, sweep=None) -> int:
    """Run ``sweep`` (default: a :class:`Sweep` of ``cfg``) with progress on stderr; write outputs."""
    from .analysis import Results, recommendation, verdict
    from .runner.sweep import Sweep

    results = Results()
    # A script sweep's step count is the script's own (it arrives with each run_started).
    printer = progress_printer(len(splits) * cfg.repeats, 0 if getattr(sweep, "cmd", None) else cfg.steps)

    def on_event(e: dict) -> None:
        results.add(e)
        printer(e)

    if sweep is None:
        sweep = Sweep(cfg, splits)
    sweep.on_event = on_event
    for w in sweep.warnings:
        sys.stderr.write(f"tracetui: warning: {w}\n")
    sys.stderr.write(f"tracetui: {len(sweep.plan)} run(s); events -> {sweep.log.path}\n")
    received = {}

    def on_signal(signum, frame):  # noqa: ARG001
        received["sig"] = signal.Signals(signum).name
        received["signum"] = int(signum)
        sweep.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        sweep.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sweep.close()
    rows, err = finish_outputs(results, ns, str(sweep.log.path))
    if sweep.log.error:
        sys.stderr.write(f"tracetui: warning: {sweep.log.error}\n")
    if err:
        sys.stderr.write(f"tracetui: error: {err}\n")
    line = verdict(rows)
    if line:
        sys.stderr.write(f"tracetui: {line}\n")
    rec = recommendation(rows)
    if rec:
        sys.stderr.write(f"tracetui: {rec}\n")
    if sweep.interrupted:
        done = [r["split"] for r in rows if r["status"] == "ok"]
        sys.stderr.write(f"tracetui: interrupted by {received.get('sig', 'a stop request')}; "
                         f"finished splits: {', '.join(done) or 'none'}; every measured step is in {sweep.log.path}\n")
        return 128 + received.get("signum", signal.SIGINT)
    if err:
        return EXIT_NONE_OK
    ok = any(r["status"] == "ok" for r in rows)
    return EXIT_OK if ok else EXIT_NONE_OK


if __name__ == "__main__":
    sys.exit(main())
