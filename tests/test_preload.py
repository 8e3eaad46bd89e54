"""The fork server's start and end: the optional packages kept out of its imports (and still
importable by a trial), a library that cannot do without one imported after all, tracetui's own
process without any of its libraries, and a server that ends with tracetui instead of after it."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracetui.runner.lifetime import forking, trial_context

from .conftest import outcome, scenarios

pytestmark = pytest.mark.skipif(not forking(), reason="the fork server runs on Linux only")


def _what_a_trial_sees(conn) -> None:
    import importlib.util
    import sys

    from transformers.utils import import_utils

    seen = {"imported": [n for n in ("sklearn", "scipy", "torchvision", "torchaudio") if sys.modules.get(n)],
            "marks": [n for n in ("sklearn", "scipy", "torchvision", "torchaudio") if n in sys.modules
                      and sys.modules[n] is None],
            "scipy_for_transformers": import_utils.is_scipy_available()}
    if importlib.util.find_spec("scipy") is not None:  # installed: a trial's own code still has it
        import scipy

        seen["scipy_imports"] = bool(scipy.__version__)
    conn.send(seen)
    conn.close()


_OPTIONAL_HERE = [n for n in ("sklearn", "scipy", "torchvision", "torchaudio")
                  if __import__("importlib.util").util.find_spec(n) is not None]


@pytest.mark.slow
@pytest.mark.skipif(not _OPTIONAL_HERE, reason="none of the optional packages is installed here")
def test_a_forked_trial_has_none_of_the_optional_packages_imported_yet_can_import_them():
    ctx = trial_context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_what_a_trial_sees, args=(writer,))
    proc.start()
    writer.close()
    seen = reader.recv()
    proc.join()
    assert seen["imported"] == [] and seen["marks"] == []
    assert seen["scipy_for_transformers"] is False  # transformers took the path it takes without it
    assert seen.get("scipy_imports", True) is True


def test_a_library_that_cannot_do_without_a_hidden_package_is_imported_after_all(tmp_path):
    """A library that imports a hidden package unconditionally fails while the marks stand,
    with an ``ImportError`` or (a lazy module's) a ``RuntimeError``: the server's preload goes
    on, and :func:`restore` imports it again once the marks are gone, with the package."""
    (tmp_path / "optpkg").mkdir()
    (tmp_path / "optpkg" / "__init__.py").write_text("VALUE = 42\n")
    (tmp_path / "polite.py").write_text(textwrap.dedent("""
        try:
            import optpkg
            HAS = True
        except ImportError:
            HAS = False
    """))
    (tmp_path / "needy.py").write_text("import optpkg\nVALUE = optpkg.VALUE\n")
    (tmp_path / "lazy.py").write_text(textwrap.dedent("""
        try:
            import optpkg
        except ImportError as exc:
            raise RuntimeError(f"Failed to import lazy because of: {exc}") from exc
        VALUE = optpkg.VALUE
    """))
    script = textwrap.dedent("""
        import json, sys
        from tracetui.runner import lifetime
        from tracetui.runner.startup import optional
        optional.HIDDEN = ("optpkg",)
        optional.hide()
        lifetime.LIBRARIES[:] = ["polite", "needy", "lazy"]
        import tracetui.runner.startup.libraries  # as the fork server's preload: whatever they raise
        failed = [n for n in lifetime.LIBRARIES if n not in sys.modules]
        again = optional.restore(lifetime.LIBRARIES)
        import polite, needy, lazy
        print(json.dumps({"failed": failed, "again": again, "polite_has": polite.HAS, "needy": needy.VALUE,
                          "lazy": lazy.VALUE, "mark_left": sys.modules.get("optpkg", 0) is None}))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    env.pop("TRACETUI_PRELOAD_OPTIONAL", None)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got == {"failed": ["needy", "lazy"], "again": ["needy", "lazy"], "polite_has": False, "needy": 42,
                   "lazy": 42, "mark_left": False}


def test_asked_to_the_server_imports_the_optional_packages_as_the_libraries_would(tmp_path):
    script = textwrap.dedent("""
        import sys
        from tracetui.runner.startup import optional
        print(optional.marked, "scipy" in sys.modules and sys.modules["scipy"] is None)
    """)
    env = dict(os.environ, TRACETUI_PRELOAD_OPTIONAL="1")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split() == ["[]", "False"], out.stderr


def _sweep_in_a_process_of_its_own(folder: Path) -> dict:
    """A short sweep (``tracetui.cli.main.main``) in a fresh interpreter, which then says its exit
    status, which of the heavy libraries it holds and its fork server's pid, run under a
    subreaper: the server, orphaned once that interpreter has gone, is handed to it, and how the
    server ended is read there."""
    script = folder / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from tracetui.cli.main import main
        from tracetui.runner.lifetime import server_pid

        if __name__ == "__main__":
            rc = main(["--export", "json", "-o", {str(folder / 's.json')!r}, "--splits", "2x2",
                       "--steps", "2", "--warmup", "1", "--repeats", "1", "--seq-len", "16",
                       "--runs-dir", {str(folder / 'runs')!r}])
            heavy = [m for m in ("torch", "transformers", "peft", "trl", "datasets") if m in sys.modules]
            print(rc, heavy, server_pid())
    """))
    reaper = folder / "reaper.py"
    reaper.write_text(textwrap.dedent(f"""
        import ctypes, json, os, subprocess, sys
        PR_SET_CHILD_SUBREAPER = 36
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        child = subprocess.run([sys.executable, {str(script)!r}], capture_output=True, text=True)
        *said, server = child.stdout.split()
        _, status = os.waitpid(int(server), 0)  # handed to us once tracetui's process has gone
        print(json.dumps({{"tracetui": child.returncode, "said": " ".join(said), "stderr": child.stderr[-3000:],
                          "signalled": os.WIFSIGNALED(status),
                          "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}}))
    """))
    proc = subprocess.run([sys.executable, str(reaper)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), summary=folder / "s.json")


if forking():
    scenarios(__name__, {"own process": _sweep_in_a_process_of_its_own})


@pytest.mark.slow
def test_a_sweep_runs_without_torch_in_tracetui_itself(scenario_results):
    """The deep checks and the trials run in processes forked from the fork server: tracetui's
    own process never imports torch, transformers, PEFT, TRL or datasets."""
    got = outcome(scenario_results[__name__], "own process")
    assert (got["tracetui"], got["said"]) == (0, "0 []"), got["stderr"]
    assert '"status": "ok"' in got["summary"].read_text()


@pytest.mark.slow
def test_the_fork_server_ends_with_tracetui_not_after_it(scenario_results):
    """Left to end by itself the server outlives tracetui by its own interpreter's shutdown,
    holding tracetui's output open meanwhile; tracetui kills it as it exits. Read through a
    subreaper, which the orphaned server is handed to: how it ended (killed, not exited)."""
    got = outcome(scenario_results[__name__], "own process")
    assert (got["tracetui"], got["signalled"], got["signal"]) == (0, True, signal.SIGKILL), got["stderr"]
