"""Write the tiny local fixtures that benchmarks/config_trainers.sh trains on, into one folder:

    model/             a random-weight Llama-style causal LM (2 layers, hidden 64), saved with
                       save_pretrained, and its tokenizer (a byte-level BPE of 512 tokens built
                       here from the data set's text, with a chat template), all offline
    data/alpaca.json   96 alpaca-style rows (instruction, input, output)
    data/dataset_info.json   the data set's entry for LLaMA-Factory (``dataset: tiny_alpaca``)
    data/sft/train.jsonl     the same rows as prompt/completion, for ``trl sft --dataset_name``
    axolotl.yml        ``axolotl train`` config: LoRA r=8 on the model and data above, CPU, fp32
    llamafactory.yaml  ``llamafactory-cli train`` config: the same run for LLaMA-Factory

Run it with the interpreter of the trainer's environment (it needs torch, transformers and
tokenizers, and the model is saved by that environment's transformers):

    /work/envs/axolotl/bin/python benchmarks/config_trainers_fixtures.py OUT_DIR [--steps 12]

Both configs set the split (1x4 in the files: micro-batch 1, 4 accumulation steps), the steps
(``max_steps``), a log every step, no checkpoints, no evaluation and no mixed precision.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = ("the model reads a short line and writes another one about cats dogs birds rivers hills "
         "trains numbers colors music bread water light stone paper glass wind fire green blue red "
         "small large quick slow warm cold early late open close first last north south east west").split()

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)

    def sentence(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + "."

    out = []
    for i in range(n):
        out.append({"instruction": f"Write a sentence about {rng.choice(WORDS)}.",
                    "input": sentence(rng.randint(3, 8)) if i % 2 else "",
                    "output": sentence(rng.randint(8, 20))})
    return out


def build_tokenizer(texts: list[str], folder: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=512)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def build_model(tok, folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=False, torch_dtype="float32")
    LlamaForCausalLM(cfg).save_pretrained(folder)


def axolotl_yaml(root: Path, steps: int) -> str:
    return f"""\
# axolotl train {root}/axolotl.yml  (CPU, offline: HF_HUB_OFFLINE=1)
base_model: {root}/model
tokenizer_config: {root}/model
model_type: LlamaForCausalLM
tokenizer_type: PreTrainedTokenizerFast
trust_remote_code: false

datasets:
  - path: {root}/data/alpaca.json
    ds_type: json
    type: alpaca
dataset_prepared_path: {root}/axolotl-prepared
val_set_size: 0
sequence_len: 256
sample_packing: false
pad_to_sequence_len: false

adapter: lora
lora_r: 8
lora_alpha: 16
lora_dropout: 0.0
lora_target_modules: [q_proj, k_proj, v_proj, o_proj]

# the split (tracetui sets these two per trial) and the steps
micro_batch_size: 1
gradient_accumulation_steps: 4
max_steps: {steps}
num_epochs: 1

optimizer: adamw_torch
lr_scheduler: cosine
learning_rate: 0.0002
warmup_steps: 0

output_dir: {root}/axolotl-out
logging_steps: 1
save_strategy: "no"
eval_strategy: "no"
bf16: false
fp16: false
tf32: false
flash_attention: false
sdp_attention: false
gradient_checkpointing: false
dataloader_num_workers: 0
seed: 0
"""


def llamafactory_yaml(root: Path, steps: int) -> str:
    return f"""\
# llamafactory-cli train {root}/llamafactory.yaml  (CPU, offline: HF_HUB_OFFLINE=1)
model_name_or_path: {root}/model
trust_remote_code: false

stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_alpha: 16
lora_dropout: 0.0
lora_target: q_proj,k_proj,v_proj,o_proj

dataset: tiny_alpaca
dataset_dir: {root}/data
template: default
cutoff_len: 256
overwrite_cache: true
preprocessing_num_workers: 1
dataloader_num_workers: 0

# the split (tracetui sets these two per trial) and the steps
per_device_train_batch_size: 1
gradient_accumulation_steps: 4
max_steps: {steps}

learning_rate: 2.0e-4
lr_scheduler_type: cosine
warmup_steps: 0

output_dir: {root}/llamafactory-out
overwrite_output_dir: true
logging_steps: 1
save_strategy: "no"
plot_loss: false
report_to: none
bf16: false
fp16: false
seed: 0
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder to write (made if missing)")
    ap.add_argument("--steps", type=int, default=12, help="max_steps in both configs (default 12)")
    ap.add_argument("--rows", type=int, default=96, help="data set rows (default 96)")
    args = ap.parse_args()
    root = args.out.resolve()
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(parents=True, exist_ok=True)
    data = rows(args.rows)
    (root / "data" / "alpaca.json").write_text(json.dumps(data, indent=1) + "\n")
    (root / "data" / "dataset_info.json").write_text(json.dumps({"tiny_alpaca": {"file_name": "alpaca.json"}},
                                                                indent=1) + "\n")
    (root / "data" / "sft").mkdir(exist_ok=True)
    with open(root / "data" / "sft" / "train.jsonl", "w") as f:
        for r in data:
            prompt = r["instruction"] + ("\n" + r["input"] if r["input"] else "")
            f.write(json.dumps({"prompt": prompt, "completion": " " + r["output"]}) + "\n")
    texts = [" ".join(r.values()) for r in data] + ["Below is an instruction that describes a task. "
                                                    "Write a response that appropriately completes the request. "
                                                    "### Instruction: ### Input: ### Response: Human: Assistant:"]
    tok = build_tokenizer(texts, root / "model")
    build_model(tok, root / "model")
    (root / "axolotl.yml").write_text(axolotl_yaml(root, args.steps))
    (root / "llamafactory.yaml").write_text(llamafactory_yaml(root, args.steps))
    print(root)


if __name__ == "__main__":
    main()
