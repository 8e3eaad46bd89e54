"""A preset's published shape with random weights as a local model folder, with a byte-level
tokenizer, and a text data set of ragged rows beside it: what ``trl sft --model_name_or_path DIR/model
--dataset_name DIR/data`` trains on without a download (each character one token).

    python benchmarks/local_preset.py --model qwen3-0.6b --seq-len 512 --out /tmp/local

Rows: ``tracetui``'s ``synthetic-ragged`` lengths (log-normal, median a quarter of ``--seq-len``,
about one in twenty cut at it), random lowercase words; the same rows for the same ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", required=True)
    ns = p.parse_args()
    out = Path(ns.out)

    import torch
    from transformers import AutoModelForCausalLM

    from tracetui.core.presets import build_config
    from tracetui.runner.sources import byte_tokenizer, ragged_lengths

    tok = byte_tokenizer()
    torch.manual_seed(ns.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(build_config(ns.model), dtype=torch.bfloat16)
    model.config.pad_token_id, model.config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    rng = random.Random(ns.seed)
    (out / "data").mkdir(parents=True, exist_ok=True)
    with open(out / "data" / "train.jsonl", "w", encoding="utf-8") as fh:
        for n in ragged_lengths(ns.rows, ns.seq_len - 1, ns.seed):  # one token left for the end of text
            words = []
            while sum(len(w) + 1 for w in words) < n:
                words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))))
            fh.write(json.dumps({"text": " ".join(words)[:n]}) + "\n")
    print(json.dumps({"model": str(out / "model"), "data": str(out / "data"), "preset": ns.model,
                      "rows": ns.rows, "seq_len": ns.seq_len}))


if __name__ == "__main__":
    main()
