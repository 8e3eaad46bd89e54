"""A plain reference timer for a training command, no tracetui in it: on ``PYTHONPATH`` it adds
one ``TrainerCallback`` to every transformers ``Trainer`` the command builds, which appends each
step's wall time (``on_step_begin`` to ``on_step_end``), the clock at its end (``end_s``: the
differences are whole steps, what the trainer does between them included) and the trainer's
split, read back from its arguments, to the JSON-lines file ``PLAIN_TIMER_OUT`` names.

    PYTHONPATH=benchmarks/plain_timer PLAIN_TIMER_OUT=/tmp/plain.jsonl trl sft ...
"""

import json
import os
import time

_OUT = os.environ.get("PLAIN_TIMER_OUT")


def _patch(module) -> None:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            with open(_OUT, "a", encoding="utf-8") as fh:
                end = time.perf_counter()
                fh.write(json.dumps({"step": state.global_step, "wall_ms": (end - self.t0) * 1000, "end_s": end,
                                     "micro_batch": args.per_device_train_batch_size,
                                     "grad_accum": args.gradient_accumulation_steps,
                                     "checkpointing": args.gradient_checkpointing, "bf16": args.bf16}) + "\n")

    original = module.Trainer.__init__

    def __init__(self, *a, **k):
        original(self, *a, **k)
        self.add_callback(StepTimer())

    module.Trainer.__init__ = __init__


if _OUT:
    import importlib.abc
    import importlib.util
    import sys

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "transformers.trainer":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _patch(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())
