"""A fork-server start-up step that fails is noted, never silent: every trial forked from the
server inherits the note and says it (tracetui/runner/startup/__init__.py)."""

import subprocess
import sys


def test_a_failed_start_up_step_is_noted_in_words():
    code = ("from tracetui.runner import startup\n"
            "startup.note('building a table', ValueError('no such model'))\n"
            "print(startup.PROBLEMS)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "the fork server's start-up: building a table failed (ValueError: no such model)" in out.stdout


def test_an_import_that_fails_again_after_the_restore_is_noted():
    code = ("import sys\nfrom tracetui.runner import startup\nfrom tracetui.runner.startup import optional\n"
            "print(optional.restore(['tracetui_no_such_module_here']), startup.PROBLEMS)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("[] ") and "importing tracetui_no_such_module_here failed (ModuleNotFoundError" in out.stdout
