"""The fork server's share of the work: the deep checks (model, LoRA targets, data, device) run
in a process forked from it, so that tracetui's own process never imports torch, transformers
or PEFT; and what every trial would repeat is done in it once."""

import subprocess
import sys
import textwrap

import pytest

from tracetui.config import ConfigError, SweepConfig
from tracetui.runner import preflight
from tracetui.runner.lifetime import forking, trial_context

pytestmark = pytest.mark.skipif(not forking(), reason="the fork server runs on Linux only")


def test_a_sweep_runs_without_torch_in_tracetui_itself(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from tracetui.cli import main

        if __name__ == "__main__":
            rc = main(["--export", "json", "-o", {str(tmp_path / 's.json')!r}, "--splits", "2x2",
                       "--steps", "2", "--warmup", "1", "--repeats", "1", "--seq-len", "16",
                       "--runs-dir", {str(tmp_path / 'runs')!r}])
            heavy = [m for m in ("torch", "transformers", "peft", "trl", "datasets") if m in sys.modules]
            print(rc, heavy)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "0 []", proc.stderr
    assert '"status": "ok"' in (tmp_path / "s.json").read_text()


def test_a_check_that_fails_in_the_forked_process_is_the_users_one_line(monkeypatch):
    here = []
    monkeypatch.setattr(preflight, "validate_deep", lambda cfg: here.append(cfg))
    with pytest.raises(ConfigError) as exc:
        preflight.validate_deep_forked(SweepConfig(lora_targets="q_proj,qkv"), trial_context())
    assert exc.value.field == "--lora-targets"
    assert str(exc.value).startswith("--lora-targets: 'qkv' names no linear layer of tiny; use all-linear or")
    assert here == []  # decided over there, not here
    preflight.validate_deep_forked(SweepConfig(lora_targets="q_proj"), trial_context())
    assert here == []


class _DiesWhenUnpickled:
    def __reduce__(self):
        import os

        return os._exit, (3,)


def test_a_check_process_that_ends_without_an_answer_leaves_the_checks_to_tracetui(monkeypatch):
    cfg = SweepConfig()
    cfg.extra = _DiesWhenUnpickled()  # the forked process exits (status 3) before it can answer
    here = []
    monkeypatch.setattr(preflight, "validate_deep", lambda c: here.append(c))
    preflight.validate_deep_forked(cfg, trial_context())
    assert here == [cfg]


def _conversion_table_built(conn) -> None:
    import transformers.conversion_mapping as cm

    conn.send(getattr(cm, "_checkpoint_conversion_mapping_cache", None) is not None)
    conn.close()


def test_a_forked_trial_finds_the_work_every_trial_repeats_done_in_the_server():
    """transformers' table of checkpoint conversions is built once in the fork server
    (tracetui.runner.warm), not in each trial."""
    cm = pytest.importorskip("transformers.conversion_mapping")
    if not hasattr(cm, "_checkpoint_conversion_mapping_cache"):
        pytest.skip("this transformers keeps no such table")
    ctx = trial_context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_conversion_table_built, args=(writer,))
    proc.start()
    writer.close()
    assert reader.recv() is True
    proc.join()
