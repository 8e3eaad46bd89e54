"""Every private name of another library that tracetui relies on (tracetui/core/foreign.py) is
there in the installed versions: a library that renames one fails here, loudly, not in a run."""

import argparse
import multiprocessing
import os
import subprocess
import sys

import pytest

from tracetui.core import foreign


def test_each_standard_library_name_is_there():
    assert foreign.caller_frame(0).f_code.co_name == "test_each_standard_library_name_is_there"
    assert [a.dest for a in foreign.parser_actions(_parser())] == ["help", "steps"]
    # runs, as in a worker's end: in a process of its own, as it removes multiprocessing's
    # temporary folder (with it the address of this process's fork server, which later tests use)
    proc = subprocess.run([sys.executable, "-c", "from tracetui.core import foreign; "
                           "foreign.run_multiprocessing_finalizers()"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def _parser():
    p = argparse.ArgumentParser()
    p.add_argument("--steps")
    return p


def test_the_fork_server_names_are_there():
    ctx = multiprocessing.get_context("forkserver")
    proc = ctx.Process(target=os.getpid)
    proc.start()
    proc.join(30)
    pid = foreign.fork_server_pid()
    assert pid and pid != os.getpid() and os.path.exists(f"/proc/{pid}")


def test_accelerate_state_resets():
    from accelerate.state import PartialState

    PartialState()
    foreign.reset_accelerate_state()
    assert not PartialState._shared_state  # noqa: SLF001 - what the reset empties


def test_a_model_config_says_its_attention_kernel():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    model = LlamaForCausalLM(config)
    model.set_attn_implementation("eager")
    assert foreign.attention_kernel(model.config) == "eager"
    model.set_attn_implementation("sdpa")
    assert foreign.attention_kernel(model.config) == "sdpa"


def test_textual_says_whether_an_app_crashed():
    import asyncio

    from textual.app import App

    class Crashes(App):
        def on_mount(self) -> None:
            raise RuntimeError("boom")

    class Fine(App):
        def on_mount(self) -> None:
            self.exit(1)

    async def drive(app: App) -> None:
        try:
            async with app.run_test():
                pass
        except RuntimeError:
            pass

    crashed, fine = Crashes(), Fine()
    for app in (crashed, fine):
        asyncio.run(drive(app))
    assert foreign.app_crashed(crashed) and not foreign.app_crashed(fine)


def test_a_missing_name_is_one_clear_error():
    with pytest.raises(foreign.ForeignApiMissing, match="no longer has '_actions'"):
        foreign.parser_actions(object())
