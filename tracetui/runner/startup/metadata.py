"""Imported first by the fork server (:data:`tracetui.runner.lifetime.PRELOAD`), before torch:
the table of installed packages, computed beside the imports instead of in their way.

``importlib.metadata.packages_distributions()`` reads every installed distribution's file list
(each ``RECORD`` of a CUDA build of torch and its NVIDIA wheels is thousands of lines). TRL
calls it when imported, as transformers does (once, or when it first checks a package), and
nothing shares the result: where many large distributions are installed (a CUDA build's), each
call is a sizeable part of the fork server's imports. Here a second interpreter computes it, over this process's own search path,
while this one imports torch; the first caller takes its result (waiting for it if need be),
every caller a copy. Where the helper cannot answer, the standard function runs, as before."""

from __future__ import annotations

import importlib.metadata as _metadata
import json
import subprocess
import sys
import threading

from . import note

#: the standard function (what runs where the helper cannot answer)
_standard = _metadata.packages_distributions
_SCRIPT = ("import importlib.metadata as m, json, sys; sys.path[:] = json.loads(sys.argv[1]); "
           "json.dump(m.packages_distributions(), sys.stdout)")
#: seconds to wait for the helper before computing the table here instead
_PATIENCE = 30.0

_result: dict[str, list[str]] | None = None
_done = threading.Event()


def _ask() -> None:
    global _result
    try:
        # -I: neither the environment nor the user's site moves the search path, which is this
        # process's own, set first thing
        out = subprocess.run([sys.executable, "-I", "-c", _SCRIPT, json.dumps(sys.path)], capture_output=True,
                             timeout=_PATIENCE, check=True).stdout
        table = json.loads(out)
        if isinstance(table, dict):
            _result = {str(k): [str(d) for d in v] for k, v in table.items()}
    except Exception as exc:  # noqa: BLE001 - noted (startup.PROBLEMS, said in each trial); the standard function runs
        _result = None
        note("reading the installed packages in a helper process", exc)
    finally:
        _done.set()


def packages_distributions() -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions()``, from the helper where it answered."""
    _done.wait(_PATIENCE)
    if _result is None:
        return _standard()
    return {k: list(v) for k, v in _result.items()}


def settle() -> None:
    """Wait for the helper (the fork server must not fork a trial with it still running)."""
    _done.wait(_PATIENCE)


_metadata.packages_distributions = packages_distributions
threading.Thread(target=_ask, name="tracetui-metadata", daemon=True).start()
