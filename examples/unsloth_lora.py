"""LoRA fine-tuning the way Unsloth's notebooks write it: ``FastLanguageModel.from_pretrained``,
``FastLanguageModel.get_peft_model``, then TRL's ``SFTTrainer`` with its ``SFTConfig`` written
out as literals. It parses no trainer flags: the split (``per_device_train_batch_size=2``,
``gradient_accumulation_steps=4``) is set in the code, as in Unsloth's examples.

Needs Unsloth and a GPU (``pip install unsloth``). Any Unsloth model name or a local model folder:

    python examples/unsloth_lora.py                                   # unsloth/Qwen3-0.6B, 60 steps
    python examples/unsloth_lora.py --model /path/to/model --dataset train.jsonl

Swept by tracetui as it stands, each run's split applied inside its trainer:

    tracetui sweep --splits 1x8,2x4,8x1 -- python examples/unsloth_lora.py

Data: a ``.json``/``.jsonl`` file, or a folder of them, with a ``text`` field (``--dataset``),
else a small synthetic text set (no download). ``--load-in-4bit``: QLoRA (needs bitsandbytes).
"""

from unsloth import FastLanguageModel  # first: Unsloth patches transformers, TRL and PEFT as it is imported

import argparse

from datasets import Dataset, load_dataset
from trl import SFTConfig, SFTTrainer

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--model", default="unsloth/Qwen3-0.6B", help="hub id or local model folder")
parser.add_argument("--dataset", default="", help="a .json/.jsonl file or folder with a 'text' field")
parser.add_argument("--max-steps", type=int, default=60)
parser.add_argument("--max-seq-length", type=int, default=2048)
parser.add_argument("--load-in-4bit", action="store_true", help="4-bit base weights (QLoRA, bitsandbytes)")
parser.add_argument("--output-dir", default="outputs")
cli = parser.parse_args()

max_seq_length = cli.max_seq_length
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name = cli.model,
    max_seq_length = max_seq_length,
    dtype = None,  # None: bfloat16 where the GPU has it, else float16
    load_in_4bit = cli.load_in_4bit,
)

model = FastLanguageModel.get_peft_model(
    model,
    r = 16,
    target_modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha = 16,
    lora_dropout = 0,
    bias = "none",
    use_gradient_checkpointing = "unsloth",
    random_state = 3407,
    use_rslora = False,
    loftq_config = None,
)


def synthetic_text(rows: int = 2000) -> Dataset:
    words = "the quick brown fox jumps over the lazy dog while a model learns to split its batch".split()
    text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(20 + (i * 37) % 200)) for i in range(rows)]
    return Dataset.from_dict({"text": text})


if cli.dataset:
    files = cli.dataset if cli.dataset.endswith((".json", ".jsonl")) else f"{cli.dataset}/*.json*"
    dataset = load_dataset("json", data_files = files, split = "train")
else:
    dataset = synthetic_text()

trainer = SFTTrainer(
    model = model,
    processing_class = tokenizer,
    train_dataset = dataset,
    args = SFTConfig(
        dataset_text_field = "text",
        max_length = max_seq_length,
        packing = False,
        per_device_train_batch_size = 2,
        gradient_accumulation_steps = 4,
        warmup_steps = 5,
        max_steps = cli.max_steps,
        learning_rate = 2e-4,
        logging_steps = 1,
        optim = "adamw_8bit" if cli.load_in_4bit else "adamw_torch",
        weight_decay = 0.01,
        lr_scheduler_type = "linear",
        seed = 3407,
        output_dir = cli.output_dir,
        save_strategy = "no",
        report_to = "none",
    ),
)
trainer_stats = trainer.train()
print(trainer_stats)
