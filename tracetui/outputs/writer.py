"""Every output of every mode, from one writer: the summary (CSV or JSON), the steps CSV, the
TRL config of the recommendation (``--emit-config``), and the lines that close the command.

The monitor, headless runs, ``show``, ``watch``, ``sweep`` and ``run`` all ask for their outputs
with the same flags (:func:`tracetui.session.parser.add_output_args`) and hand them here, so that each
flag means the same in every mode and the answer reads the same wherever it is shown: the
verdict and the recommendation are computed once per write (:class:`Answer`), under one
:class:`~tracetui.analysis.Policy` (``--allow-result-changes``, ``--allow-busy``), and the CSV,
the JSON, the closing lines on stderr and the monitor's screen all take them from there.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import Policy, Results, recommendation, recommended_rows, scope_note, summarise, time_spent, verdict
from ..analysis.applied import derived_note
from ..analysis.between import closing_notes
from ..analysis.timing import mark_exit
from .emit import prepare, script_changes, script_file, shown_path, winning_line, write_config
from .export import FORMATS, Summary, format_of_path, steps_csv
from ..core import clock
from ..core.paths import OutputRefused, output_file_problem, write_whole
from ..launch.dialects import launcher_for
from ..core.trial import Trial


def output_format(ns) -> str:
    """The summary's format: ``--export``'s, else the one whose extension the ``-o`` file has
    (:data:`tracetui.outputs.export.FORMATS`: JSON into ``.json``), else CSV."""
    return getattr(ns, "export", None) or format_of_path(getattr(ns, "output", None) or "")


def default_output(events_path, fmt: str = "csv") -> str:
    """Where a summary goes when no ``-o`` is given: beside the events it summarises, named after
    their sweep (``tracetui_runs/20261130-052808-0bb8/20261130-052808-0bb8.csv``), so no sweep's
    summary ever replaces another's."""
    p = Path(events_path)
    stem = p.name
    for ext in (".gz", ".jsonl", ".json"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    name = p.parent.name if stem == "events" and p.parent.name else stem
    return str(p.parent / f"{name}.{fmt}")


@dataclass(frozen=True)
class Answer:
    """The answer of one set of rows, as every output gives it."""

    verdict: str
    recommendation: str
    note: str
    #: the recommended rows (one per machine and effective batch)
    best: tuple[dict, ...]
    policy: Policy

    @classmethod
    def of(cls, rows: list[dict], policy: Policy, speak=None) -> "Answer":
        """``speak``: how the swept trainer says a trial in its own keys (None: ``SFTConfig``'s)."""
        return cls(verdict(rows, policy), recommendation(rows, policy, speak), scope_note(rows),
                   tuple(recommended_rows(rows, policy)), policy)

    def lines(self) -> list[str]:
        return [line for line in (self.verdict, self.recommendation, self.note) if line]


@dataclass
class Written:
    """What one write did: the rows and their answer, and the closing lines."""

    rows: list[dict]
    answer: Answer
    #: what was written where, in words ("summary in X")
    wrote: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: the recommendation handed on: the emitted config and the winning command, with their notes
    handoff: list[str] = field(default_factory=list)

    def closing_lines(self) -> list[str]:
        """What the command says as it ends, in every mode (without the ``tracetui:`` prefix)."""
        failed = [f"warning: {r['trial']}: {r['message'] or r['status']}" for r in self.rows
                  if r.get("runs_failed") and set(r.get("failed_kinds") or ()) - {"skipped", "interrupted"}]
        applied = list(dict.fromkeys(n for n in (derived_note(r.get("settings") or {}) for r in self.rows) if n))
        applied += closing_notes(self.rows)  # the trainer's work between steps, its early stops
        return ([f"error: {e}" for e in self.errors] + self.wrote + failed + [f"note: {n}" for n in applied]
                + self.answer.lines() + self.handoff)


class Outputs:
    """The outputs one command asked for, and the one place that writes them.

    ``summary``: a path, or ``-`` for stdout. An existing regular file is replaced only if this
    writer wrote it before or ``force`` is set; a file is replaced whole (written beside it, then
    renamed), so a reader never sees half of one. Nothing at a path is ever opened: a symbolic
    link, a FIFO, a socket or a device (``/dev/full``) found there is refused, as it was before
    anything ran (:func:`tracetui.session.output_paths.check_outputs`). A write that fails (a full disk) is
    one line among the closing lines, which still give the answer."""

    def __init__(self, summary: str, fmt: str = "csv", *, steps: str | None = None, emit_config: str | None = None,
                 emit_patch: str | None = None, force: bool = False, project_steps: int | None = None,
                 policy: Policy = Policy(),
                 cfg=None, cmd: list[str] | None = None, peak_tflops: float | None = None):
        self.summary = summary
        self.fmt = fmt
        self.steps = steps
        self.emit_config = emit_config or None
        #: where the change of a swept script to the recommendation goes, as a unified diff
        self.emit_patch = emit_patch or None
        self.force = force
        self.project_steps = project_steps
        #: the peak MFU is measured against (``--peak-tflops``), else the table's
        self.peak_tflops = peak_tflops
        self.policy = policy
        #: the sweep's settings (for the emitted config of a built-in sweep)
        self.cfg = cfg
        #: the swept script's command (for its emitted config and the winning command line)
        self.cmd = list(cmd) if cmd else None
        #: how the recommendation says a trial: a config-file trainer's own keys, else SFTConfig's
        self.speak = launcher_for(self.cmd).words(self.cmd) if self.cmd else None
        #: whether the user named an output (a replay writes at its end only then)
        self.explicit = False
        #: the sweep this process ran, whose account runs to its outputs (:func:`mark_exit`); None
        #: for a log read back (``show``, ``watch``), whose account is the sweep's own
        self.own_sweep: str | None = None
        #: how that command ends (:data:`tracetui.analysis.timing.END_MARKS`): ``quit`` in the monitor
        self.end_mark = "exit"
        #: the command that ran a built-in sweep (``tracetui ARGS``), where this process is it
        self.sweep_command = clock.command_line() if cfg is not None and not self.cmd else None
        self._own: set[str] = set()

    @classmethod
    def from_args(cls, ns, events_path, cfg=None, cmd: list[str] | None = None) -> "Outputs":
        """The outputs the flags in ``ns`` ask for; the summary beside ``events_path`` unless ``-o``."""
        fmt = output_format(ns)
        source = cfg if cfg is not None else ns
        out = cls(getattr(ns, "output", None) or default_output(events_path, fmt), fmt,
                  steps=getattr(ns, "steps_csv", None), emit_config=getattr(source, "emit_config", None),
                  emit_patch=getattr(source, "emit_patch", None),
                  force=bool(getattr(ns, "force", False)), project_steps=getattr(ns, "project_steps", None),
                  policy=Policy.of(source), cfg=cfg, cmd=cmd, peak_tflops=getattr(source, "peak_tflops", None))
        out.explicit = bool(getattr(ns, "output", None) or out.steps or out.emit_config or out.emit_patch)
        if out.emit_config:  # what the file needs of TRL, read while the sweep runs
            prepare(out.cmd)
        return out

    # ---- the answer ----------------------------------------------------------------------------
    def rows(self, results: Results) -> list[dict]:
        """The summary rows, each marked ``recommended`` as the answer recommends it."""
        rows = summarise(results, self.project_steps, peak_tflops=self.peak_tflops)
        best = {id(r) for r in recommended_rows(rows, self.policy)}
        for r in rows:
            r["recommended"] = id(r) in best
        return rows

    def answer(self, rows: list[dict]) -> Answer:
        return Answer.of(rows, self.policy, self.speak)

    # ---- writing -------------------------------------------------------------------------------
    def refusal(self, path: str) -> str | None:
        """Why ``path`` may not be written by this writer now, or None: anything there but a
        regular file (:func:`tracetui.core.paths.output_file_problem`, which opens nothing), or a file
        this writer did not write, unless ``force``."""
        if path == "-":
            return None
        why = output_file_problem(path)
        if why:
            return f"not written: {path} {why}"
        if (os.path.isfile(path) and os.path.getsize(path) > 0 and not self.force
                and os.path.abspath(path) not in self._own):
            return f"not replaced: {path} already exists and was not written by this command (give another path, or --force)"
        return None

    def put(self, path: str, text: str) -> None:
        """Write ``text`` to ``path`` (see the class). Raises ``OSError`` with the reason."""
        if path == "-":
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        why = self.refusal(path)
        if why:
            raise OutputRefused(why)
        write_whole(path, text)
        self._own.add(os.path.abspath(path))

    def write(self, results: Results, *, log_path: str | None = None, final: bool = True) -> Written:
        """Write every output asked for (the config only when ``final``: the sweep has ended)."""
        rows = self.rows(results)
        answer = self.answer(rows)
        done = Written(rows, answer)
        where = (f"; every event is in {log_path}: export again with `tracetui show {log_path} -o OTHER.csv`"
                 if log_path else "")
        if final:  # the config first: the summary's time account then holds its writing
            done.handoff += self._handoff(answer)
            if self.own_sweep:
                mark_exit(results, self.own_sweep, self.end_mark)
        text = FORMATS[self.fmt].write(Summary(rows, answer, lambda: time_spent(results),
                                               lambda: self.handoff_data(answer)))
        for what, path, body in (("summary", self.summary, lambda: text),
                                 ("steps", self.steps, lambda: steps_csv(results))):
            if not path:
                continue
            try:
                self.put(path, body())
            except (OSError, ValueError) as exc:  # (ValueError: text the encoding cannot take)
                done.errors.append(_why(exc, path) + where)
                continue
            if path != "-":
                done.wrote.append(f"{what} in {path}")
        return done

    def handoff_data(self, answer: Answer) -> dict:
        """What the JSON says of the recommendation handed on: the winning command, the config file."""
        out: dict = {"policy": {"allow_result_changes": self.policy.allow_result_changes,
                                "allow_busy": self.policy.allow_busy}}
        if answer.best and self.cmd:  # the command, or a config-file trainer's keys
            out.update(launcher_for(self.cmd).handoff(self.cmd, Trial.from_fields(answer.best[0])))
        else:  # a built-in sweep: the command that runs it again (None: not known here, or no answer)
            out["command"] = None if self.cmd else self.sweep_command
        out["emitted_config"] = self.emit_config if self.emit_config and answer.best else None
        found = script_changes(answer.best[0], self.cmd)[0] if answer.best else None
        if found is not None:  # where the script sets what it does not take from its command line
            out["script_changes"] = [{"field": c.field, "value": c.value, "how": c.kind, "file": c.file,
                                      "line": c.line, "source": c.old or None, "in_patch": c.patched}
                                     for c in found.changes]
        if self.emit_patch:
            out["emitted_patch"] = self.emit_patch if found is not None and found.patchable else None
        return out

    def _handoff(self, answer: Answer) -> list[str]:
        lines = []
        more = f" (the first of {len(answer.best)} effective batches)" if len(answer.best) > 1 else ""
        if answer.best and self.cmd:
            said = winning_line(self.cmd, answer.best[0])
            lines.append(said.replace(":", f"{more}:", 1))
        lines += self._config(answer, more)
        return lines + self._patch(answer, more)

    def _config(self, answer: Answer, more: str) -> list[str]:
        """``--emit-config``: the recommendation as a config file, and its notes."""
        lines: list[str] = []
        if not self.emit_config:
            return lines
        if not answer.best:
            return lines + [f"no recommendation, so {self.emit_config} was not written"]
        best = answer.best[0]
        try:
            why = self.refusal(self.emit_config)
            if why:
                raise OutputRefused(why)
            wrote, notes = write_config(self.emit_config, best, self.cfg, self.cmd)
        except (OSError, ValueError) as exc:
            return lines + [f"error: {_why(exc, self.emit_config)}; the summary is written"]
        self._own.add(os.path.abspath(self.emit_config))
        head, _, rest = wrote.partition(" in ")
        lines.append(f"{head}{more} in {rest}")
        return lines + [f"  {n}" for n in notes]

    def _patch(self, answer: Answer, more: str) -> list[str]:
        """Where a swept script sets the recommendation's values itself, and ``--emit-patch``: the
        change as a unified diff (:mod:`tracetui.outputs.script_patch`)."""
        found, why = script_changes(answer.best[0], self.cmd) if answer.best else (None, "")
        lines: list[str] = []
        if found is not None:
            lines.append(f"where the script sets the recommendation's values itself{more} (the sweep applied them "
                         "inside its trainer; the script as it is trains its own):")
            lines += [f"  {c.words(shown_path)}" for c in found.changes]
        if not self.emit_patch:
            return lines
        path = self.emit_patch
        if not answer.best:
            return lines + [f"no recommendation, so {path} was not written"]
        if found is None:
            return lines + [f"no patch: {why}, so {path} was not written"]
        if not found.patchable:
            return lines + [f"no patch: none of these is a literal in the source, so {path} was not written"]
        base = found.base(self.cmd and script_file(self.cmd))
        try:
            why = self.refusal(path)
            if why:
                raise OutputRefused(why)
            write_whole(path, found.diff(base))
        except (OSError, ValueError) as exc:
            return lines + [f"error: {_why(exc, path)}; the summary is written"]
        self._own.add(os.path.abspath(path))
        rest = "" if all(c.patched for c in found.changes) else "; the rest by hand, as said above"
        return lines + [f"the change as a patch in {path}: patch -p1 -d {shlex.quote(shown_path(base) or '.')} -i "
                        f"{shlex.quote(os.path.abspath(path))}{rest}"]


def _why(exc: Exception, path: str) -> str:
    """A failed write in one line."""
    if isinstance(exc, OutputRefused) or (isinstance(exc, OSError) and exc.strerror is None and exc.args
                                          and isinstance(exc.args[0], str)):
        return str(exc.args[0])  # one of ours: already in words
    if isinstance(exc, OSError):
        return f"cannot write {exc.filename or path} ({exc.strerror or exc})"
    return f"cannot write {path} ({type(exc).__name__}: {exc})"
