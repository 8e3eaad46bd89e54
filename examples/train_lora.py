"""A plain TRL LoRA fine-tuning script that reports to tracetui through TraceCallback.

Runs offline by default: tracetui's built-in ``tiny`` model shape with random weights and a small
synthetic text data set. Point it at a real model and data with ``--model_name_or_path`` and
``--dataset_path``. All of SFTConfig's flags work (``--per_device_train_batch_size``,
``--gradient_accumulation_steps``, ``--max_steps`` ...).

    tracetui watch &                                   # or: tracetui watch --export csv -o out.csv
    python examples/train_lora.py --per_device_train_batch_size 4 --gradient_accumulation_steps 1

    tracetui sweep --splits 1x4,2x2,4x1 -- python examples/train_lora.py --no_trace
"""

from dataclasses import dataclass, field

from datasets import Dataset, load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser, set_seed
from trl import SFTConfig, SFTTrainer


@dataclass
class ScriptArguments:
    model_name_or_path: str = field(default="tiny", metadata={"help": "a tracetui preset, hub id or local directory"})
    dataset_path: str = field(default="", metadata={"help": "a .jsonl/.json/.txt file with a 'text' field (default: synthetic)"})
    rows: int = field(default=256, metadata={"help": "rows of synthetic text"})
    lora_r: int = 16
    trace: bool = field(default=True, metadata={"help": "attach TraceCallback (--no_trace to leave it out)"})


def load_model_and_tokenizer(name: str):
    from tracetui.core.presets import PRESETS, build_config
    from tracetui.runner.sources import byte_tokenizer

    if name in PRESETS:  # random weights of a published shape: no download
        return AutoModelForCausalLM.from_config(build_config(name)), byte_tokenizer()
    tok = AutoTokenizer.from_pretrained(name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return AutoModelForCausalLM.from_pretrained(name), tok


def load_data(args: ScriptArguments) -> Dataset:
    if args.dataset_path:
        kind = "text" if args.dataset_path.endswith(".txt") else "json"
        return load_dataset(kind, data_files=args.dataset_path, split="train")
    words = "the quick brown fox jumps over the lazy dog while a model learns to split its batch".split()
    rows = [" ".join(words[(i + j) % len(words)] for j in range(40)) for i in range(args.rows)]
    return Dataset.from_dict({"text": rows})


def main() -> None:
    import torch

    parser = HfArgumentParser((ScriptArguments, SFTConfig))
    parser.set_defaults(bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
                        output_dir="/tmp/tracetui-example", max_steps=20, learning_rate=2e-4, logging_steps=5,
                        save_strategy="no", report_to="none", max_length=128, disable_tqdm=True,
                        per_device_train_batch_size=2, gradient_accumulation_steps=2)
    script_args, sft_args = parser.parse_args_into_dataclasses()
    # Seed before building the model: a preset's random weights come from the global generator,
    # and the Trainer seeds only after the model exists. Unseeded, every run (every split of a
    # sweep) started from different weights and its loss curve was not comparable.
    set_seed(sft_args.seed)
    model, tokenizer = load_model_and_tokenizer(script_args.model_name_or_path)
    callbacks = []
    if script_args.trace:
        from tracetui import TraceCallback

        callbacks.append(TraceCallback())
    trainer = SFTTrainer(
        model=model, args=sft_args, train_dataset=load_data(script_args), processing_class=tokenizer,
        peft_config=LoraConfig(r=script_args.lora_r, lora_alpha=2 * script_args.lora_r, target_modules="all-linear",
                               task_type="CAUSAL_LM"),
        callbacks=callbacks,
    )
    trainer.train()


if __name__ == "__main__":
    main()
