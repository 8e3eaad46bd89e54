"""The subcommands beside the sweep: ``show`` (replay logs), ``watch`` (listen for attached
scripts) and ``sweep`` (run an unmodified training script once per split)."""

from __future__ import annotations

import sys
from pathlib import Path

from .cli import EXIT_NONE_OK, EXIT_OK, UsageError, _out_args, _Parser, finish_outputs


def _show_parser() -> _Parser:
    p = _Parser(prog="tracetui show", description=(
        "Replay saved event logs (from a sweep, a watch or a TraceCallback) into the final table "
        "and CSV. Logs from several machines are compared side by side, labelled by GPU."))
    p.add_argument("files", nargs="+", metavar="FILE.jsonl")
    _out_args(p)
    return p


def show_main(argv: list[str]) -> int:
    from .analysis import Results, recommendation, verdict
    from .store import read_events

    ns = _show_parser().parse_args(argv)
    for f in ns.files:
        if not Path(f).is_file():
            raise UsageError(f"show: {f} does not exist; give the events.jsonl of a sweep, watch or callback")
    report = read_events(ns.files)
    if report.skipped:
        sys.stderr.write(f"tracetui: {report.summary()}\n")
    results = Results().extend(report.events)
    if not results.runs:
        sys.stderr.write("tracetui: error: no valid events in " + ", ".join(ns.files) + "\n")
        return EXIT_NONE_OK
    if not ns.export:
        from .tui.app import run_replay

        return run_replay(report.events, ns, skipped=report.summary())
    rows, err = finish_outputs(results, ns, None)
    if err:
        sys.stderr.write(f"tracetui: error: {err}\n")
        return EXIT_NONE_OK
    for line in (verdict(rows), recommendation(rows)):
        if line:
            sys.stderr.write(f"tracetui: {line}\n")
    return EXIT_OK
