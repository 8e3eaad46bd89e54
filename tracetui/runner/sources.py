"""Where a run's model, tokenizer and data come from.

Presets build a model of a published shape with random weights (``from_config``); a hub id or
local directory loads the real model and tokenizer. ``synthetic`` data is random token rows of
exactly ``seq_len`` tokens, pre-tokenized, so every split sees identical work; real data goes
through ``datasets.load_dataset`` and TRL's own tokenization.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.config import DATA_SUFFIXES, ConfigError, SweepConfig, dataset_kind, model_kind
from ..core.presets import build_config


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


def load_model(cfg: SweepConfig, device: str, dtype: Any, attn_implementation: str | None = None,
               load_in_4bit: bool = False):
    """Build or load the base model directly on ``device`` in ``dtype``, with the attention
    kernel asked for; ``load_in_4bit``: NF4 weights through bitsandbytes (QLoRA)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(cfg.seed)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if load_in_4bit:
        return _load_4bit(cfg, device, dtype, kwargs)
    if model_kind(cfg.model) == "preset":
        config = build_config(cfg.model)
        # Initialise straight on the GPU: a 1.7B model initialised on the CPU takes a minute.
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, **kwargs)
    else:
        model = AutoModelForCausalLM.from_pretrained(cfg.model, **kwargs)
        model.to(device)
    model.config.use_cache = False
    return model


def _load_4bit(cfg: SweepConfig, device: str, dtype: Any, kwargs: dict):
    """The base model with NF4 weights (bitsandbytes), as QLoRA loads it. A preset's random
    weights are written once to a temporary folder, as bitsandbytes quantises at load time."""
    import shutil
    import tempfile

    import torch
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
                               bnb_4bit_use_double_quant=True)
    source, tmp = cfg.model, None
    try:
        if model_kind(cfg.model) == "preset":
            tmp = tempfile.mkdtemp(prefix="tracetui-4bit-")
            with torch.device(device):
                AutoModelForCausalLM.from_config(build_config(cfg.model), dtype=dtype).save_pretrained(tmp)
            source = tmp
        model = AutoModelForCausalLM.from_pretrained(source, quantization_config=quant, device_map={"": device},
                                                     **kwargs)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=bool(cfg.activation_checkpointing))
    model.config.use_cache = False
    return model


def rows_needed(cfg: SweepConfig) -> int:
    return max(cfg.effective_batch) * cfg.steps


def synthetic_dataset(cfg: SweepConfig, vocab_size: int):
    """Random token rows, the same rows for every trial: ``synthetic``, each exactly
    ``seq_len`` tokens; ``synthetic-ragged``, lengths drawn like a chat data set's (see
    :func:`ragged_lengths`), so padding and padding-free batches can be measured offline."""
    import torch
    from datasets import Dataset

    n = rows_needed(cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(3, vocab_size, (n, cfg.seq_len), generator=gen)
    if cfg.dataset == "synthetic-ragged":
        lengths = ragged_lengths(n, cfg.seq_len, cfg.seed)
        return Dataset.from_dict({"input_ids": [row[:k] for row, k in zip(ids.tolist(), lengths)]})
    return Dataset.from_dict({"input_ids": ids.tolist()})


def ragged_lengths(n: int, seq_len: int, seed: int) -> list[int]:
    """``n`` row lengths shaped like an instruction/chat data set's: log-normal (most rows
    short, a long tail), median a quarter of ``seq_len``, about one row in twenty cut at
    ``seq_len``, none under 8 tokens."""
    import math
    import random

    rng = random.Random(seed)
    mu, sigma = math.log(max(8, seq_len / 4)), 1.0
    return [max(min(8, seq_len), min(seq_len, int(rng.lognormvariate(mu, sigma)))) for _ in range(n)]


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
    check_text_rows(ds, cfg)
    return ds


#: characters kept per token of ``--seq-len`` when a row is cut before tokenising (see
#: :func:`char_limit`)
CHARS_PER_TOKEN = 64


def char_limit(seq_len: int, tokenizer: Any = None) -> int:
    """How many characters of a row can matter for ``seq_len`` tokens.

    TRL truncates to ``seq_len`` tokens only after tokenising the whole row, so one 50 MB row
    costs gigabytes. Cutting the text first is safe as long as the cut lies beyond the last
    character the first ``seq_len`` tokens cover. No token covers more characters than its
    vocabulary entry is long (byte-level entries spell one character per byte, others spell
    their text, byte-fallback pieces like ``<0xE2>`` are longer than the byte they stand for),
    so ``seq_len`` tokens cover at most ``seq_len`` times the longest entry. Without the
    tokenizer at hand, :data:`CHARS_PER_TOKEN` (64) per token is used: real vocabularies'
    typical tokens are 3-5 characters, and a run of 256 tokens averaging over 64 characters
    each would take a text made of little but the vocabulary's very longest entries. (Characters
    a tokenizer's normaliser deletes outright cover no token; a row holding megabytes of them
    is the one case this bound could cut short, and it is cut to the same ``seq_len`` anyway.)
    """
    per_token = CHARS_PER_TOKEN
    if tokenizer is not None:
        try:
            longest = max((len(t) for t in tokenizer.get_vocab()), default=0)
            per_token = max(per_token, longest)
        except (AttributeError, NotImplementedError, TypeError):  # a tokenizer without a vocabulary: the default
            pass
    return max(1, seq_len) * per_token


#: how many bad rows the line that refuses a data set names
NAMED_ROWS = 5


def _what(value: Any) -> str:
    return "null" if value is None else {"int": "number", "float": "number", "bool": "true/false", "list": "list",
                                         "dict": "object"}.get(type(value).__name__, type(value).__name__)


def check_text_rows(ds: Any, cfg: SweepConfig) -> None:
    """Every row's text, checked as a whole before anything trains: a column with nothing to
    train on (every row empty or missing) would train "ok" with a loss of 0.0; a row whose text
    is not text (null, a number, a list) fails inside the trainer, in every run, minutes in. The
    bad rows are counted, the first few named (counting from 1, as the lines of a JSONL file),
    and the data set refused: the user's own training on it would fail the same way, so they are
    to be fixed, not skipped behind the user's back (a sweep measured on other rows than the
    training would see). (No rows at all is the caller's to say.)"""
    if len(ds) == 0:
        return
    field, n, bad, named, kinds, has_text = cfg.text_field, 0, 0, [], {}, False
    for batch in _batches(ds, cfg):
        for value in batch[field]:
            n += 1
            if isinstance(value, str):
                has_text = has_text or value != ""
                continue
            bad += 1
            kinds[_what(value)] = kinds.get(_what(value), 0) + 1
            if len(named) < NAMED_ROWS:
                named.append(n)
    if not has_text:
        others = {k: c for k, c in kinds.items() if k != "null"}
        if others:
            raise ConfigError("--text-field", f"{field!r} of {cfg.dataset} holds {', '.join(others)} values, not text",
                              "name the column that holds the text")
        raise ConfigError("--dataset", f"every row of {cfg.dataset} has an empty {field!r}",
                          "give a data set with text in it, or name the right column with --text-field")
    if bad:
        rows = ", ".join(map(str, named)) + (", ..." if bad > len(named) else "")
        what = ", ".join(f"{c} {k}" for k, c in sorted(kinds.items(), key=lambda kv: -kv[1]))
        raise ConfigError("--dataset", f"{bad} of {n} rows of {cfg.dataset} have a {field!r} that is not text "
                          f"({what}; row{'s' if bad > 1 else ''} {rows}), which the trainer cannot take",
                          "fix or drop those rows: training on this data set would fail on them too")


def _batches(ds: Any, cfg: SweepConfig, size: int = 1000):
    """``ds``'s rows, ``size`` at a time; a row whose text is not valid UTF-8 (a parquet file or a
    hub data set can hold such bytes: they are found only as the rows are read) is one
    :class:`ConfigError` naming it, not the reader's traceback."""
    it, start = ds.iter(batch_size=size), 0
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except UnicodeDecodeError:
            row = next((i + 1 for i in range(start, min(start + size, len(ds))) if _undecodable(ds, i)), start + 1)
            raise ConfigError("--dataset", f"{cfg.dataset}: row {row} is not valid UTF-8", "save it as UTF-8") from None
        start += size
        yield batch


def _undecodable(ds: Any, i: int) -> bool:
    try:
        ds[i]
    except UnicodeDecodeError:
        return True
    return False


def truncate_rows(ds: Any, cfg: SweepConfig, tokenizer: Any = None) -> Any:
    """Cut every row's text to :func:`char_limit` characters before anything tokenises it."""
    limit = char_limit(cfg.seq_len, tokenizer)
    field = cfg.text_field
    if not any(isinstance(v, str) and len(v) > limit
               for batch in ds.iter(batch_size=1000) for v in batch[field]):
        return ds

    def cut(batch: dict) -> dict:
        return {field: [v[:limit] if isinstance(v, str) else v for v in batch[field]]}

    return ds.map(cut, batched=True, batch_size=100, keep_in_memory=True, desc="cutting over-long rows")


def build_dataset(cfg: SweepConfig, vocab_size: int, tokenizer: Any = None):
    """The rows a run trains on. Text rows are checked (:func:`check_text_rows`, in
    :func:`load_text_dataset`) and cut to what
    ``seq_len`` tokens can use (:func:`truncate_rows`); pass ``tokenizer`` for the exact bound."""
    if dataset_kind(cfg.dataset) == "synthetic":
        return synthetic_dataset(cfg, vocab_size)
    ds = load_text_dataset(cfg)
    keep = [cfg.text_field]
    ds = ds.remove_columns([c for c in ds.column_names if c not in keep])
    return truncate_rows(ds, cfg, tokenizer)
