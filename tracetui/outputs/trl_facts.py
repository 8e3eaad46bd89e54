"""What ``--emit-config`` reads of the installed TRL and transformers (:class:`TrlFacts`): the
fields a TRL config file may hold, the releases, and what the swept script's arguments set as
TRL's own parser reads them.

Importing TRL takes seconds, and an interpreter that imported torch takes a second more to exit,
so a command that will emit a config reads them in a process of its own as the sweep starts
(:func:`prepare`), at low priority, while the runs train; at the end :func:`facts` takes what it
read and the command returns as soon as its last line is said. Where the sweep's fork server runs,
that process is forked from it, which has TRL and transformers imported already: the read takes a
fraction of a second instead of a second interpreter's imports (about 5 CPU-seconds, beside the
runs being measured). Without a prepared read (``show`` of a log, a read that failed)
:func:`facts` reads them here, as before.

Imports TRL and transformers only inside the functions that read them.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from ..core.foreign import parser_actions
from ..runner.forkrun import quiet_helper
from ..runner.lifetime import forking, process_gone, server_pid, trial_context

#: keys of a TRL config file that are no dataclass field: ``TrlParser`` reads them itself
#: (``env``: environment variables set before training)
FILE_KEYS = frozenset({"env"})

#: how long the end of a command waits for a prepared read still running before reading here
WAIT_S = 300.0


def trl_parser(program: str = "trl sft"):
    """TRL's own parser of ``program``: ``trl NAME`` -> ``trl/scripts/NAME.py``'s ``make_parser``
    (what ``trl NAME`` parses with); anything else (a user's ``HfArgumentParser`` script) -> the
    SFT script's, whose dataclasses a TRL LoRA script parses."""
    import importlib

    name = program[len("trl "):] if program.startswith("trl ") else "sft"
    try:
        make = importlib.import_module(f"trl.scripts.{name}").make_parser
    except (ImportError, AttributeError):  # no TRL script of that name: the SFT one
        make = importlib.import_module("trl.scripts.sft").make_parser
    return make(prog=program or "trl sft")


def installed_fields(parser=None) -> set[str]:
    """The keys a TRL config file may hold here: the fields of the installed dataclasses that
    ``parser`` (default: ``trl sft``'s) reads, and :data:`FILE_KEYS`."""
    parser = parser or trl_parser()
    return {f.name for cls in parser.dataclass_types for f in dataclasses.fields(cls)} | FILE_KEYS


def versions() -> str:
    import transformers
    import trl

    return f"TRL {trl.__version__}, transformers {transformers.__version__}"


def plain(value: Any) -> Any:
    """``value`` as a YAML type that ``yaml.safe_dump`` writes and TRL's parser takes back."""
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _groups(args: list[str]) -> list[list[str]]:
    """``args`` cut before each flag: ``--lora_target_modules q_proj v_proj`` is one group."""
    out: list[list[str]] = []
    for arg in args:
        if not out or (arg.startswith("-") and not _number(arg)):
            out.append([arg])
        else:
            out[-1].append(arg)
    return out


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def given_arguments(parser, args: list[str]) -> tuple[dict[str, Any], list[tuple[list[str], str]]]:
    """What ``args`` (a script's arguments) set, as ``parser`` (an ``HfArgumentParser``) reads
    them: field -> value for every field given (a ``--config FILE`` first, as ``TrlParser`` reads
    it, the flags over it), and what the parser could not read: ``(arguments, why)`` each.
    ``parser`` is changed (its defaults removed): give a fresh one (:func:`trl_parser`)."""
    for action in parser_actions(parser):  # only what is given comes back: no defaults, nothing required
        if action.dest != "help":
            action.default, action.required = argparse.SUPPRESS, False

    def refuse(message: str):
        raise ValueError(message)

    parser.error = refuse  # an argparse error is kept with the flag it names, not an exit
    args = list(args)
    given: dict[str, Any] = {}
    unmapped: list[tuple[list[str], str]] = []
    if "--config" in args:  # as TrlParser.parse_args_and_config reads it
        at = args.index("--config")
        path = args[at + 1] if at + 1 < len(args) else ""
        del args[at:at + 2]
        try:
            with open(path, encoding="utf-8") as fh:
                loaded = yaml.safe_load(fh)
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"the command's --config {path!r} cannot be read ({exc}); "
                             "give a readable YAML file") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"the command's --config {path!r} is not a YAML mapping; give TRL's config format")
        dests = {a.dest for a in parser_actions(parser)}
        for key, value in loaded.items():
            if key in dests or key in FILE_KEYS:
                given[key] = value
            else:  # what TrlParser hands on as flags
                unmapped.append(([f"--{key}", str(value)], f"from {path}"))
    for group in _groups(args):
        if not group[0].startswith("-"):
            unmapped.append((group, "not a flag"))
            continue
        try:
            ns, rest = parser.parse_known_args(group)
        except ValueError as exc:
            unmapped.append((group, str(exc)))
            continue
        given.update(vars(ns))
        if rest:
            unmapped.append((rest, "unknown"))
    return given, unmapped


@dataclasses.dataclass(frozen=True)
class TrlFacts:
    """What the installed TRL and transformers say for one program and its arguments."""

    program: str
    #: the script's arguments (None: a built-in sweep, whose file is tracetui's settings alone)
    args: tuple[str, ...] | None
    fields: frozenset[str]
    versions: str
    #: the dataclasses the parser reads, by name ("ScriptArguments, SFTConfig, ...")
    classes: str
    #: what the arguments set (:func:`given_arguments`, each value :func:`plain`)
    given: dict[str, Any] = dataclasses.field(default_factory=dict)
    unmapped: tuple[tuple[tuple[str, ...], str], ...] = ()
    #: why the arguments cannot be read (an unreadable ``--config``), said where the file is asked for
    refused: str | None = None

    def arguments(self) -> tuple[dict[str, Any], list[tuple[list[str], str]]]:
        """:func:`given_arguments`' answer; raises its ``ValueError`` where it refused."""
        if self.refused is not None:
            raise ValueError(self.refused)
        return dict(self.given), [(list(tokens), why) for tokens, why in self.unmapped]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self) | {"fields": sorted(self.fields)})

    @classmethod
    def from_json(cls, text: str) -> "TrlFacts":
        d = json.loads(text)
        return cls(d["program"], None if d["args"] is None else tuple(d["args"]), frozenset(d["fields"]),
                   d["versions"], d["classes"], d["given"], tuple((tuple(t), w) for t, w in d["unmapped"]),
                   d["refused"])


def read_facts(program: str, args: tuple[str, ...] | None) -> TrlFacts:
    """Read :class:`TrlFacts` here (imports TRL and transformers)."""
    parser = trl_parser(program)
    fields = frozenset(installed_fields(parser))
    classes = ", ".join(c.__name__ for c in parser.dataclass_types)
    given: dict[str, Any] = {}
    unmapped: list[tuple[list[str], str]] = []
    refused = None
    if args is not None:
        try:
            given, unmapped = given_arguments(parser, list(args))
        except ValueError as exc:
            refused = str(exc)
    return TrlFacts(program, args, fields, versions(), classes, plain(given),
                    tuple((tuple(t), w) for t, w in unmapped), refused)


class _Prepared:
    """A read of :class:`TrlFacts` in a process of its own (see the module's note): forked from the
    fork server where it runs, else a fresh interpreter."""

    def __init__(self, program: str, args: tuple[str, ...] | None):
        self.got: TrlFacts | None = None
        self.done = threading.Event()
        server = server_pid() if forking() else None
        if server and not process_gone(server):
            self._fork(trial_context(), server, program, args)
        else:
            self._spawn(program, args)

    def _fork(self, ctx, server: int, program: str, args: tuple[str, ...] | None) -> None:
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_serve_forked, args=(program, args, writer, server), daemon=True,
                           name="tracetui-trl-facts")
        try:
            proc.start()
        except OSError:  # (the server gone since: read at the end, here)
            reader.close()
            self.done.set()
            return
        finally:
            writer.close()
        threading.Thread(target=self._receive, args=(reader, proc), name="tracetui-trl-facts", daemon=True).start()

    def _receive(self, reader, proc) -> None:
        try:
            self.got = TrlFacts.from_json(reader.recv())
        except (EOFError, OSError, ValueError, KeyError, TypeError):  # a read that failed is read again here, at the end
            self.got = None
        finally:
            reader.close()
            proc.join()
            self.done.set()

    def _spawn(self, program: str, args: tuple[str, ...] | None) -> None:
        root = str(Path(__file__).resolve().parents[2])  # where this tracetui is imported from
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        try:  # its own session: a Ctrl-C for the sweep is not for it
            self.proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-c", "from tracetui.outputs.trl_facts import serve; serve()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                start_new_session=True)
        except OSError:  # (no process to be had: read at the end, here)
            self.proc = None
            self.done.set()
            return
        threading.Thread(target=self._read, args=(json.dumps({"program": program, "args": args}),),
                         name="tracetui-trl-facts", daemon=True).start()

    def _read(self, request: str) -> None:
        try:
            out, _ = self.proc.communicate(request)
            if self.proc.returncode == 0:
                self.got = TrlFacts.from_json(out)
        except (OSError, ValueError, KeyError, TypeError):  # a read that failed is read again here, at the end
            self.got = None
        finally:
            self.done.set()

    def result(self) -> TrlFacts | None:
        return self.got if self.done.wait(WAIT_S) else None


_prepared: dict[tuple, _Prepared] = {}
_lock = threading.Lock()


def _key(program: str, args) -> tuple:
    return program, None if args is None else tuple(args)


def prepare(program: str, args: list[str] | None) -> None:
    """Start reading :class:`TrlFacts` for ``program`` and ``args`` in a process of its own (once)."""
    key = _key(program, args)
    with _lock:
        if key not in _prepared:
            _prepared[key] = _Prepared(*key)


def facts(program: str, args: list[str] | None) -> TrlFacts:
    """:class:`TrlFacts` for ``program`` and ``args``: the prepared read's (:func:`prepare`), else
    read here."""
    key = _key(program, args)
    with _lock:
        job = _prepared.get(key)
    got = job.result() if job is not None else None
    return got if got is not None else read_facts(*key)


def _serve_forked(program: str, args: tuple[str, ...] | None, writer, server: int) -> None:
    """The prepared read forked from the fork server: :class:`TrlFacts` (JSON) through ``writer``.
    It dies with the server, as a trial does, and what the libraries print goes nowhere."""
    quiet_helper(server)
    try:
        os.nice(10)  # below the runs it shares the machine with
    except OSError:
        pass  # (not allowed: at the priority it has)
    try:
        writer.send(read_facts(program, args).to_json())
    except Exception:  # noqa: BLE001 - nothing sent: the command reads the facts again at the end, where a failure shows
        pass
    finally:
        writer.close()


def serve() -> None:
    """The prepared read's process: the request (JSON) on stdin, :class:`TrlFacts` on stdout."""
    try:
        os.nice(10)  # below the runs it shares the machine with
    except OSError:
        pass  # (not allowed: at the priority it has)
    request = json.loads(sys.stdin.read())
    args = request["args"]
    out, sys.stdout = sys.stdout, sys.stderr  # what the libraries print on import stays out of the answer
    got = read_facts(request["program"], None if args is None else tuple(args))
    out.write(got.to_json())
