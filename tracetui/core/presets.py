"""Built-in model shapes with random weights.

Step time depends on a model's shape, not on its weight values, so a preset with the published
architecture of a real model gives the same timings as the real checkpoint without downloading
it. ``tiny`` is small enough to run a whole sweep on two CPU cores in seconds.
"""

from __future__ import annotations

from typing import Any

_QWEN3_COMMON = dict(
    model_type="qwen3",
    head_dim=128,
    num_key_value_heads=8,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    tie_word_embeddings=True,
)

_LLAMA3_ROPE = dict(
    rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
    original_max_position_embeddings=8192,
)
_LLAMA3_COMMON = dict(
    model_type="llama", num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
    max_position_embeddings=131072, rope_theta=500000.0, rope_scaling=_LLAMA3_ROPE,
    rms_norm_eps=1e-5, hidden_act="silu",
)

#: name -> (config kwargs, where the shape comes from)
PRESETS: dict[str, tuple[dict[str, Any], str]] = {
    "tiny": (
        dict(
            model_type="qwen3", hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=4096,
            max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-6,
            hidden_act="silu", tie_word_embeddings=True,
        ),
        "tracetui's own Qwen3-architecture toy (about 1.4M parameters) for CPU runs and tests",
    ),
    "smollm2-135m": (
        dict(
            model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
            num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
            max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
            hidden_act="silu", tie_word_embeddings=True,
        ),
        "HuggingFaceTB/SmolLM2-135M config.json",
    ),
    "qwen3-0.6b": (
        dict(_QWEN3_COMMON, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
             num_attention_heads=16),
        "Qwen/Qwen3-0.6B config.json",
    ),
    "qwen3-1.7b": (
        dict(_QWEN3_COMMON, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
             num_attention_heads=16),
        "Qwen/Qwen3-1.7B config.json",
    ),
    "qwen3-4b": (
        dict(_QWEN3_COMMON, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
             num_attention_heads=32),
        "Qwen/Qwen3-4B config.json",
    ),
    "qwen3-8b": (
        dict(_QWEN3_COMMON, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
             num_attention_heads=32, tie_word_embeddings=False),
        "Qwen/Qwen3-8B config.json",
    ),
    "llama-3.2-1b": (
        dict(_LLAMA3_COMMON, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, head_dim=64,
             tie_word_embeddings=True),
        "meta-llama/Llama-3.2-1B config.json",
    ),
    "llama-3.1-8b": (
        dict(_LLAMA3_COMMON, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, head_dim=128,
             tie_word_embeddings=False),
        "meta-llama/Llama-3.1-8B config.json",
    ),
}


def build_config(name: str):
    """Return a transformers ``PretrainedConfig`` for preset ``name``."""
    from transformers import AutoConfig

    kwargs = dict(PRESETS[name][0])
    model_type = kwargs.pop("model_type")
    rope_scaling = kwargs.pop("rope_scaling", None)
    config = AutoConfig.for_model(model_type, **kwargs)
    if rope_scaling is not None:
        # transformers 5 keeps rope settings in ``rope_parameters``; 4.x in ``rope_scaling``.
        params = dict(rope_scaling, rope_theta=kwargs["rope_theta"])
        if hasattr(config, "rope_parameters"):
            config.rope_parameters = params
        else:
            config.rope_scaling = rope_scaling
    return config
