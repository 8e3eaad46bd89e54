"""Whether a command's runs can start forked from tracetui's fork server: a Python script,
``-m module`` or console script run by this very interpreter (its environment), with no launcher
of processes in front (:func:`fork_target`); and the Python environment a command's program
belongs to (:func:`environment_of`)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

@dataclass(frozen=True)
class ForkTarget:
    """What a forked run executes as its ``__main__``: a file (a script, a console script) or a
    module; ``argv0``: its ``sys.argv[0]``; ``path0``: its ``sys.path[0]``; ``args``: the rest of
    its ``sys.argv``."""
    kind: str  # "path" or "module"
    target: str
    argv0: str
    path0: str
    args: tuple[str, ...] = ()


#: interpreter options a forked run honours (the rest start a fresh interpreter)
FORKABLE_OPTIONS = ("-u",)
#: commands that start processes of their own: never forked
NOT_FORKED = ("accelerate", "torchrun", "deepspeed", "torch.distributed.run", "torch.distributed.launch",
              "accelerate.commands.launch", "accelerate.commands.accelerate_cli")
#: libraries that patch transformers, TRL and PEFT as they are imported, and so must be imported
#: before them: a script that imports one is never forked (the fork server has imported those)
IMPORTED_FIRST = ("unsloth",)
_IMPORTS_FIRST = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(IMPORTED_FIRST) + r")\b", re.MULTILINE)


def imports_first(path: str) -> str | None:
    """The library of :data:`IMPORTED_FIRST` that the script at ``path`` imports, or None."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _IMPORTS_FIRST.search(text)
    return found.group(1) if found else None


def _prefix(python: str) -> str:
    """The environment an interpreter runs in: its virtual environment's folder (pyvenv.cfg),
    else its installation's."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    if os.path.isfile(os.path.join(here, "pyvenv.cfg")):
        return here
    return os.path.dirname(os.path.dirname(os.path.realpath(python)))


def environment_of(cmd: list[str]) -> str | None:
    """The folder of the Python environment (a virtual environment, a conda environment) whose
    ``bin`` holds ``cmd``'s program, when it is not tracetui's own; else None."""
    if not cmd:
        return None
    program = cmd[0] if os.sep in cmd[0] else shutil.which(cmd[0])
    if not program:
        return None
    home = os.path.dirname(os.path.dirname(os.path.abspath(program)))
    if not any(os.path.exists(os.path.join(home, m)) for m in ("pyvenv.cfg", "conda-meta")):
        return None
    return None if os.path.abspath(home) == os.path.abspath(sys.prefix) else home


def _this_interpreter(python: str | None) -> bool:
    return bool(python) and _prefix(python) == _prefix(sys.executable) \
        and os.path.basename(os.path.realpath(python)) == os.path.basename(os.path.realpath(sys.executable))


def _shebang(path: str) -> str | None:
    """The interpreter a console script names on its first line (``#!/venv/bin/python``), or None."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[1])
    return words[0] if "python" in os.path.basename(words[0]) else None


def fork_target(cmd: list[str], cwd: str | None = None) -> tuple[ForkTarget | None, str]:
    """Whether ``cmd``'s runs can be forked from this process's fork server, and why not: a
    Python script, ``-m module`` or console script run by this very interpreter (its
    environment), with no launcher of processes in front."""
    cwd = cwd or os.getcwd()
    if not cmd:
        return None, "no command"
    program = cmd[0] if os.sep in cmd[0] else (shutil.which(cmd[0]) or cmd[0])
    name = os.path.basename(program)
    if name in NOT_FORKED:
        return None, f"{name} starts processes of its own"
    if name.startswith("python"):
        if not _this_interpreter(program):
            return None, f"{program} is not the interpreter tracetui runs in ({sys.executable})"
        rest = cmd[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            if rest[0] not in FORKABLE_OPTIONS:
                return None, f"the interpreter option {rest[0]}"
            rest = rest[1:]
        if len(rest) >= 2 and rest[0] == "-m":
            if rest[1] in NOT_FORKED:
                return None, f"{rest[1]} starts processes of its own"
            return ForkTarget("module", rest[1], rest[1], cwd, tuple(rest[2:])), ""
        if rest and rest[0].endswith(".py"):
            # as typed (the run starts in ``cwd``): its argv[0] and __file__ are what the interpreter would give
            script = os.path.join(cwd, rest[0])
            first = imports_first(script)
            if first:
                return None, (f"the script imports {first}, which must come before transformers, TRL and PEFT, "
                              "and the fork server has imported them")
            return ForkTarget("path", rest[0], rest[0], os.path.dirname(os.path.abspath(script)), tuple(rest[1:])), ""
        return None, "not a script or module"
    interpreter = _shebang(program) if os.path.isfile(program) else None
    if interpreter is None:
        return None, f"{name} is not a Python program"
    if not _this_interpreter(interpreter):
        return None, f"{name} runs in another Python environment ({interpreter})"
    return ForkTarget("path", program, program, os.path.dirname(os.path.abspath(program)), tuple(cmd[1:])), ""
