"""What a swept command's run is given, as pure functions of its trial (nothing started, nothing
written): the plan its trainer takes inside (:func:`run_plan`, applied by
:mod:`tracetui.probe.apply`) and the command a dry run shows (:func:`script_command`)."""

from __future__ import annotations

from pathlib import Path

from ..core.knobs import model_args, sft_args
from ..core.trial import Trial
from .dialects import SPLIT_FLAGS, launcher_for


#: knobs whose trainer arguments are read as the arguments are made (``fsdp`` is parsed in
#: ``TrainingArguments.__post_init__``): never set on a built trainer's arguments
_SET_AT_MAKING = ("sharding",)


def run_plan(trial: Trial, folder: Path, given: bool, by: str = "command line") -> dict:
    """What a script's run trains with, as its trainer takes it (``TRACETUI_PLAN``, applied by
    :mod:`tracetui.probe.apply` wherever the script set its own): the split, the varied settings'
    trainer arguments, the attention kernel for its model, and its own output folder (a measured
    run never writes into the user's). ``given``: the command carries them too (``by``: its
    command line, or a config file's copy)."""
    settings = {n: v for n, v in trial.settings if n not in _SET_AT_MAKING}
    args = {SPLIT_FLAGS[0].lstrip("-"): trial.micro_batch, SPLIT_FLAGS[1].lstrip("-"): trial.grad_accum,
            **sft_args(settings)}
    if settings.get("torch_compile"):
        args["torch_compile_backend"] = "inductor"  # what __post_init__ would have set with it
    args["output_dir"] = str((folder / "output").resolve())
    return {"args": args, "model": model_args({k: v for k, v in settings.items() if k == "attn_implementation"}),
            "given": sorted(k for k in args if k != "output_dir") if given else [], "given_by": by}


def script_command(cmd: list[str], t: Trial) -> list[str]:
    """The user's command for one trial, as a dry run shows it (:mod:`.dialects`)."""
    return launcher_for(cmd).trial_command(cmd, t).argv
