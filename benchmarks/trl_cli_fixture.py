"""A local model folder and data folder for TRL's own command line (``trl sft``), offline: a
tracetui preset's published shape with random weights (step time depends on the shape, not the
values), a word-level tokenizer trained on the data's own words, and rows of synthetic text of
about ``--words`` words each.

    python benchmarks/trl_cli_fixture.py --model qwen3-0.6b --out /tmp/trlcli
    # -> /tmp/trlcli/model, /tmp/trlcli/data/train.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny", help="a tracetui preset")
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=512)
    p.add_argument("--words", type=int, default=600)
    ns = p.parse_args()

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from tracetui.core.presets import build_config

    out = Path(ns.out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(2000)]
    rows = [" ".join(rng.choice(vocab) for _ in range(ns.words)) for _ in range(ns.rows)]
    with open(out / "data" / "train.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"text": r}) + "\n" for r in rows)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(rows, trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<eos>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    config = build_config(ns.model)
    config.pad_token_id, config.eos_token_id = fast.pad_token_id, fast.eos_token_id
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out / "model")
    fast.save_pretrained(out / "model")
    print(f"{ns.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters -> {out / 'model'}; "
          f"{ns.rows} rows -> {out / 'data'}")


if __name__ == "__main__":
    main()
