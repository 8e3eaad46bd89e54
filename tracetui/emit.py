"""``--emit-config FILE``: the recommendation as a TRL config file.

``trl sft --config FILE`` reads a YAML file whose keys are the fields of TRL's
``ScriptArguments``, ``SFTConfig`` and ``ModelConfig``. The file holds the recommended split,
every speed setting at the value tracetui measured (defaults included: TRL's differ from
transformers', so a setting left out is not "off"), and the LoRA, precision, length and data
settings of the sweep, so the fine-tune runs as it was measured.
"""

from __future__ import annotations

from typing import Any

from .analysis import sft_arguments
from .config import SweepConfig, dataset_kind, model_kind
from .knobs import model_args


def trl_config(row: dict, cfg: SweepConfig) -> tuple[dict[str, Any], list[str]]:
    """The config for ``row``'s trial, and what the user must fill in themselves (comments)."""
    values = dict(row.get("knob_values") or {})
    values.update(row.get("varied") or {})
    out: dict[str, Any] = {}
    notes: list[str] = [f"tracetui's recommendation: {row.get('trial') or row['split']} at effective batch "
                        f"{row['effective_batch']} on {row['machine']} "
                        f"({row['step_ms_median']:.1f} ms/step)" if row.get("step_ms_median") else
                        f"tracetui: {row.get('trial')}"]
    if model_kind(cfg.model) == "preset":
        notes.append(f"measured on the built-in {cfg.model!r} preset (random weights): set "
                     "model_name_or_path to the published model of that shape")
        out["model_name_or_path"] = "SET-ME"
    else:
        out["model_name_or_path"] = cfg.model
    if dataset_kind(cfg.dataset) == "hub":
        out["dataset_name"] = cfg.dataset
        out["dataset_train_split"] = cfg.dataset_split
    else:
        notes.append(f"measured on {cfg.dataset!r}: set dataset_name to your data set")
        out["dataset_name"] = "SET-ME"
    out.update(sft_arguments(row))
    model = model_args(values)
    out["attn_implementation"] = model.get("attn_implementation", values.get("attn_implementation"))
    if model.get("load_in_4bit"):
        out["load_in_4bit"] = True
        out["bnb_4bit_quant_type"] = "nf4"
    out.update(use_peft=True, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
               lora_target_modules=(cfg.lora_targets if cfg.lora_targets == "all-linear"
                                    else [t.strip() for t in cfg.lora_targets.split(",") if t.strip()]),
               learning_rate=cfg.lr, max_length=cfg.seq_len, seed=cfg.seed, lr_scheduler_type="constant")
    # Precision both ways: TRL's SFTConfig turns bf16 on when it is left unset.
    precision = str(row.get("precision_used") or "").split(" ")[0]
    out["bf16"] = precision == "bf16"
    out["fp16"] = precision == "fp16"
    if (row.get("world_size") or 1) > 1:
        notes.append(f"measured over {row['world_size']} processes: launch with torchrun --nproc-per-node "
                     f"{cfg.nproc_per_node} (or accelerate launch); the split is per process")
    if row.get("machine") == "CPU":
        out["use_cpu"] = True
        notes.append("measured on the CPU: drop use_cpu for a GPU")
    out["output_dir"] = "SET-ME"
    notes.append("set output_dir (and max_steps or num_train_epochs) for the real run")
    return out, notes


def write_trl_config(path: str, row: dict, cfg: SweepConfig, cmd: list[str] | None = None) -> list[str]:
    import yaml

    data, notes = trl_config(row, cfg)
    text = "".join(f"# {n}\n" for n in notes) + yaml.safe_dump(data, sort_keys=False)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    import os

    os.replace(tmp, path)
    return []
