"""Where a run's model, tokenizer and data come from.

Presets build a model of a published shape with random weights (``from_config``); a hub id or
local directory loads the real model and tokenizer. ``synthetic`` data is random token rows of
exactly ``seq_len`` tokens, pre-tokenized, so every split sees identical work; real data goes
through ``datasets.load_dataset`` and TRL's own tokenization.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import DATA_SUFFIXES, ConfigError, SweepConfig, dataset_kind, model_kind
from ..presets import build_config


def byte_tokenizer():
    """A byte-level tokenizer built in memory (no download): 256 byte tokens plus pad/eos/bos.

    Used with presets, whose random weights come with no tokenizer of their own. Its ids fit any
    preset's vocabulary.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(byte_alphabet))}
    for special in ("<pad>", "<eos>", "<bos>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   bos_token="<bos>")


def load_tokenizer(cfg: SweepConfig):
    if model_kind(cfg.model) == "preset":
        return byte_tokenizer()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cfg.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(cfg: SweepConfig, device: str, dtype: Any):
    """Build or load the base model directly on ``device`` in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(cfg.seed)
    if model_kind(cfg.model) == "preset":
        config = build_config(cfg.model)
        # Initialise straight on the GPU: a 1.7B model initialised on the CPU takes a minute.
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=dtype)
        model.to(device)
    model.config.use_cache = False
    return model


def rows_needed(cfg: SweepConfig) -> int:
    return max(cfg.effective_batch) * cfg.steps


def synthetic_dataset(cfg: SweepConfig, vocab_size: int):
    """Random token rows of exactly ``seq_len`` tokens; the same rows for every split."""
    import torch
    from datasets import Dataset

    n = rows_needed(cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(3, vocab_size, (n, cfg.seq_len), generator=gen)
    return Dataset.from_dict({"input_ids": ids.tolist()})


def load_text_dataset(cfg: SweepConfig):
    """Load a hub or local data set and check its text field, raising :class:`ConfigError`."""
    from datasets import load_dataset

    kind = dataset_kind(cfg.dataset)
    try:
        if kind == "file":
            path = Path(cfg.dataset)
            builder = DATA_SUFFIXES[path.suffix.lower()]
            ds = load_dataset(builder, data_files=str(path), split="train")
        else:
            ds = load_dataset(cfg.dataset, split=cfg.dataset_split)
    except Exception as exc:  # noqa: BLE001 - every loader failure is the user's input
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError("--dataset", f"cannot load {cfg.dataset!r} ({first[:160]})",
                          "check the file's format, or the hub id and --dataset-split") from None
    if cfg.text_field not in ds.column_names:
        raise ConfigError("--text-field", f"{cfg.text_field!r} is not a column of {cfg.dataset} "
                          f"(columns: {', '.join(ds.column_names)})", "name the column that holds the text")
    return ds


def build_dataset(cfg: SweepConfig, vocab_size: int):
    if dataset_kind(cfg.dataset) == "synthetic":
        return synthetic_dataset(cfg, vocab_size)
    ds = load_text_dataset(cfg)
    keep = [cfg.text_field]
    return ds.remove_columns([c for c in ds.column_names if c not in keep])
