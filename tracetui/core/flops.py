"""Work done per optimizer step, and how far it is from the device's limit.

**Model FLOPs** count the multiply-adds (2 FLOPs each) that training must do for the tokens it
really processed, padding included:

- **forward**: every linear layer of the decoder, adapters included, ``2 x in x out`` per token
  (``2 x non-embedding parameters`` for a model without adapters); the output head,
  ``2 x hidden x vocab`` per position it projects (the positions the loss scores, where the step
  recorded them: TRL's fused head projects only those on a GPU; else every position); attention,
  ``4 x layers x query width x pairs``, where pairs are the query-key pairs of each row
  (``length^2``), halved under a causal mask (each query sees only the keys before it).
- **backward**: for each linear layer the gradient of its input (``2 x in x out`` per token: one
  forward through the frozen base), but where its input needs none: the first layer's
  query/key/value projections and their adapters' A read the frozen embeddings' output; plus the
  gradient of the weights that train (the adapters' own: small); the head's input gradient;
  attention's four products (twice its forward).
- **recomputation** under activation checkpointing: every decoder layer's forward again, and the
  first layer's input gradient (checkpointing makes the embeddings' output require one, as
  transformers does for a PEFT model), counted apart: *hardware* FLOPs are model FLOPs plus the
  recomputation, and model FLOPs are the same with checkpointing or without.

Not counted: element-wise work (norms, activations, softmax, the loss), which is small beside the
products; kernels that compute the masked half of causal attention anyway (eager, the math SDPA
kernel) or recompute its scores in backward (flash) do more than model FLOPs say.

**MFU**: model FLOPs per second over the device's dense peak for the precision that ran
(:data:`PEAKS`), per GPU. An unknown GPU gets no MFU, said plainly; ``--peak-tflops`` sets the peak.

The model's linear layers are read from the model itself when a run starts
(:func:`profile_of_model`, in the run's read-back settings), or, for a log that predates that, from
a preset's configuration (:func:`profile_of_config`). Nothing heavy is imported at module level.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

#: leaf names of the projections that read a decoder layer's input: in the first layer that input
#: is the (frozen) embeddings' output, so their input gradient is not needed
_INPUT_PROJECTIONS = frozenset({"q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "Wqkv",
                                "query", "key", "value", "in_proj"})
#: the linear layers of a Llama/Qwen-style decoder layer: name -> (in, out) as functions of the config
_LLAMA_LINEARS: dict[str, Callable[[dict], tuple[int, int]]] = {
    "q_proj": lambda c: (c["hidden_size"], c["num_attention_heads"] * _head_dim(c)),
    "k_proj": lambda c: (c["hidden_size"], (c.get("num_key_value_heads") or c["num_attention_heads"]) * _head_dim(c)),
    "v_proj": lambda c: (c["hidden_size"], (c.get("num_key_value_heads") or c["num_attention_heads"]) * _head_dim(c)),
    "o_proj": lambda c: (c["num_attention_heads"] * _head_dim(c), c["hidden_size"]),
    "gate_proj": lambda c: (c["hidden_size"], c["intermediate_size"]),
    "up_proj": lambda c: (c["hidden_size"], c["intermediate_size"]),
    "down_proj": lambda c: (c["intermediate_size"], c["hidden_size"]),
}


def _head_dim(c: dict) -> int:
    return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])


@dataclass(frozen=True)
class Profile:
    """A model's work per token, in multiply-adds: what :func:`step_work` needs of the model."""

    #: decoder layers
    layers: int
    #: every linear layer of the decoder layers (adapters included): in x out, summed
    gemm: int
    #: of ``gemm``: those whose weight trains (LoRA's A and B)
    trainable: int
    #: of ``gemm``: those reading the embeddings' output (the first layer's q/k/v and their adapters' A)
    first: int
    #: the output head: hidden x vocab
    head: int
    #: attention's query width: heads x head dim
    attention: int
    #: attention under a causal mask (a decoder)
    causal: bool = True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> "Profile | None":
        if not isinstance(d, dict):
            return None
        try:
            return cls(**{k: (bool(d[k]) if k == "causal" else int(d[k])) for k in cls.__dataclass_fields__ if k in d})
        except (TypeError, ValueError):
            return None


def profile_of_config(config: dict, lora_r: int | None = None, lora_targets: Any = None) -> Profile | None:
    """The profile of a Llama/Qwen-style decoder (q/k/v/o projections, a gated MLP, an output head)
    from its configuration (a dict, as :data:`tracetui.core.presets.PRESETS` holds them), with LoRA of
    rank ``lora_r`` on ``lora_targets`` (``all-linear``, a comma-separated string or a list of
    names). None for a configuration that is not of that kind."""
    try:
        c = dict(config)
        layers, hidden, vocab = int(c["num_hidden_layers"]), int(c["hidden_size"]), int(c["vocab_size"])
        shapes = {name: f(c) for name, f in _LLAMA_LINEARS.items()}
        attention = int(c["num_attention_heads"]) * _head_dim(c)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if lora_targets in (None, "") or not lora_r:
        targets: set[str] = set()
    elif lora_targets == "all-linear":
        targets = set(shapes)
    else:
        names = lora_targets.split(",") if isinstance(lora_targets, str) else list(lora_targets)
        targets = {str(n).strip() for n in names if str(n).strip()}
    gemm = trainable = first = 0
    for name, (i, o) in shapes.items():
        gemm += i * o
        if name in _INPUT_PROJECTIONS:
            first += i * o
        if name in targets:
            a, b = i * lora_r, lora_r * o
            gemm += a + b
            trainable += a + b
            if name in _INPUT_PROJECTIONS:
                first += a
    return Profile(layers=layers, gemm=layers * gemm, trainable=layers * trainable, first=first,
                   head=hidden * vocab, attention=attention)


def _linear_shape(module: Any) -> tuple[int, int] | None:
    """``(in, out)`` of a linear layer (``nn.Linear``, its quantised subclasses, GPT-2's Conv1D)."""
    import torch

    if isinstance(module, torch.nn.Linear):
        return int(module.in_features), int(module.out_features)
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
        w = module.weight
        return int(w.shape[0]), int(w.shape[1])
    return None


def _decoder_layers(model: Any, count: int | None) -> Any:
    """The model's list of decoder layers: the longest ``ModuleList`` (of ``count`` entries when
    the configuration says how many)."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
    if count:
        lists = [m for m in lists if len(m) == count] or lists
    return max(lists, key=len) if lists else None


def profile_of_model(model: Any) -> Profile | None:
    """The profile of a built model (:func:`model_profile`), or None."""
    return model_profile(model)[0]


def model_profile(model: Any) -> tuple[Profile | None, str]:
    """The profile of a built model, from its modules (adapters as PEFT placed them, weights as
    they train or not); or None and why there is none (no list of decoder layers, no output head,
    or reading them failed), which the summary's ``mfu_note`` says where MFU stays blank."""
    try:
        return _model_profile(model)
    except Exception as exc:  # noqa: BLE001 - training goes on; the reason reaches the summary's mfu_note
        return None, f"reading the model's layers failed ({type(exc).__name__}: {exc})"


def _model_profile(model: Any) -> tuple[Profile | None, str]:
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_layers = getattr(text, "num_hidden_layers", None)
    layers = _decoder_layers(model, n_layers)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if layers is None or head is None:
        return None, "the model has no list of decoder layers" if layers is None else "the model has no output head"
    head_shape = _linear_shape(head)
    heads = int(getattr(text, "num_attention_heads"))
    head_dim = int(getattr(text, "head_dim", None) or int(getattr(text, "hidden_size")) // heads)
    gemm = trainable = first = 0
    for index, layer in enumerate(layers):
        for name, module in layer.named_modules():
            shape = _linear_shape(module)
            if shape is None:
                continue
            size = shape[0] * shape[1]
            gemm += size
            weight = getattr(module, "weight", None)
            if weight is not None and weight.requires_grad:
                trainable += size
            parts = name.split(".")
            if index == 0 and _INPUT_PROJECTIONS & set(parts) and "lora_B" not in parts:
                first += size
    if head_shape is None or not gemm:
        return None, "the model's output head is no linear layer" if head_shape is None else \
            "the model's decoder layers hold no linear layer"
    return Profile(layers=len(layers), gemm=gemm, trainable=trainable, first=first,
                   head=head_shape[0] * head_shape[1], attention=heads * head_dim), ""


@dataclass(frozen=True)
class StepWork:
    """One optimizer step's work, in FLOPs."""

    #: every position the decoder layers processed (rows x padded length, summed)
    tokens: int
    #: positions the output head projected (the scored ones where known)
    head_tokens: int
    forward: float
    backward: float
    #: activation checkpointing's second forward (not model FLOPs)
    recompute: float
    #: of forward + backward: attention's products
    attention: float

    @property
    def model(self) -> float:
        return self.forward + self.backward

    @property
    def hardware(self) -> float:
        return self.model + self.recompute


def step_work(profile: Profile, shapes: list[tuple[int, int]], *, checkpointing: bool = False,
              head_tokens: int | None = None, pairs: int | None = None, causal: bool | None = None) -> StepWork:
    """The FLOPs of one optimizer step whose micro-batches had ``shapes`` (rows, padded length).

    ``head_tokens``: positions the output head projected (default: every position); ``pairs``:
    query-key pairs attention spanned (default: rows x length^2 of each micro-batch, as a padded
    batch runs); ``causal``: halve attention (default: the profile's). ``checkpointing``: the
    decoder layers' forward runs again in backward, and the embeddings' output then requires a
    gradient (so the first layer's input projections pass one back): both are hardware FLOPs
    only, so model FLOPs do not depend on checkpointing."""
    tokens = sum(b * t for b, t in shapes)
    head_tokens = tokens if head_tokens is None else head_tokens
    pairs = sum(b * t * t for b, t in shapes) if pairs is None else pairs
    causal = profile.causal if causal is None else causal
    attn = 4.0 * profile.layers * profile.attention * pairs * (0.5 if causal else 1.0)
    layers_fwd = 2.0 * profile.gemm * tokens
    head = 2.0 * profile.head * head_tokens
    forward = layers_fwd + head + attn
    input_grads = 2.0 * (profile.gemm - profile.first) * tokens
    backward = input_grads + 2.0 * profile.trainable * tokens + head + 2.0 * attn
    # checkpointing: the layers' forward again, and the input gradient of the first layer's
    # projections, which the embeddings' output now asks for (work for the checkpoint's sake)
    recompute = layers_fwd + attn + 2.0 * profile.first * tokens if checkpointing else 0.0
    return StepWork(tokens=tokens, head_tokens=head_tokens, forward=forward, backward=backward,
                    recompute=recompute, attention=3.0 * attn)


#: dense peaks (no sparsity), TFLOP/s per GPU, by the precision the products ran in: (the name's
#: test, the name said, {precision: peak}). fp32: the CUDA cores' (PyTorch does not use TF32 for
#: products unless asked: ``tf32`` where it was); bf16/fp16: the tensor cores'. From NVIDIA's data
#: sheets: H100/H200 SXM, H100 PCIe, A100 (SXM and PCIe alike), L40S, L4, A10, T4.
PEAKS: tuple[tuple[Callable[[str], bool], str, dict[str, float]], ...] = (
    (lambda n: "H200" in n and "NVL" not in n, "H200 SXM",
     {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}),
    (lambda n: "H100" in n and "PCIE" in n, "H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    (lambda n: "H100" in n and "NVL" not in n, "H100 SXM",
     {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}),
    (lambda n: "A100" in n, "A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (lambda n: "L40S" in n, "L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 181.0, "fp32": 91.6}),
    (lambda n: n.split()[-1:] == ["L4"], "L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (lambda n: n.split()[-1:] == ["A10"], "A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (lambda n: "T4" in n.split(), "T4", {"fp16": 65.0, "fp32": 8.1}),
)


def peak_tflops(gpu_name: str | None, precision: str) -> tuple[float | None, str]:
    """The dense peak of ``gpu_name`` for ``precision`` (bf16, fp16, tf32, fp32) and which peak it
    is (``H200 SXM bf16 dense``); or None and why there is none."""
    if not gpu_name:
        return None, "no GPU: no peak to measure against"
    name = gpu_name.upper().replace("NVIDIA", "").replace("TESLA", "").strip()
    for test, label, peaks in PEAKS:
        if test(name):
            if precision in peaks:
                return peaks[precision], f"{label} {precision} dense"
            return None, f"{label} has no {precision} peak in tracetui's table: no MFU (--peak-tflops sets one)"
    return None, f"unknown GPU ({gpu_name}): no peak, no MFU (--peak-tflops sets one)"
