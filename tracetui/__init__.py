"""tracetui: how should I split my batch? Measures micro-batch x gradient-accumulation splits of a
LoRA fine-tuning setup and shows the answer live in the terminal."""

__version__ = "0.1.0"

__all__ = ["TraceCallback", "__version__"]


def __getattr__(name: str):
    # Lazy: importing tracetui must not import torch/transformers (fast --help and TUI start).
    if name == "TraceCallback":
        from .callbacks.attach import TraceCallback

        return TraceCallback
    raise AttributeError(name)
