"""How a worker's failure is told: out of memory, a setting this machine cannot run, or an error."""

from __future__ import annotations

from ..core.config import KNOB_DEFAULTS
from ..core.knobs import KNOBS, fmt


class Unavailable(RuntimeError):
    """A varied setting cannot run here (raised where it is applied)."""


#: exception types (by name, anywhere in the chain) that mean torch.compile could not compile
_COMPILE_FAILURES = ("BackendCompilerFailed", "InductorError", "TorchRuntimeError", "Unsupported",
                     "InternalTorchDynamoError")


def classify_failure(exc: BaseException, micro_batch: int, varied: dict | None = None) -> tuple[str, str]:
    """``(kind, one line)`` for a run's failure: ``oom``, ``unavailable`` (a setting this
    machine cannot run), or ``error``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    chain, e = [], exc
    while e is not None and len(chain) < 10:  # the OOM may sit under a wrapping error
        chain.append(e)
        e = e.__cause__ or e.__context__
    is_oom = any(
        type(e).__name__ == "OutOfMemoryError" or isinstance(e, MemoryError)
        or "out of memory" in str(e).lower() or "can't allocate memory" in str(e).lower()
        for e in chain)
    if is_oom:
        return "oom", f"out of memory at micro-batch {micro_batch}: {text[:200]}"
    for e in chain:
        if isinstance(e, Unavailable):
            return "unavailable", str(e)[:300]
    settings = varied or {}
    if settings.get("torch_compile") and any(type(e).__name__ in _COMPILE_FAILURES for e in chain):
        return "unavailable", f"torch_compile=on does not compile here: {type(exc).__name__}: {text[:200]}"
    return "error", f"{type(exc).__name__}: {text[:300]}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def setting_at_fault(cfg, exc: BaseException, passed: dict) -> BaseException:
    """``exc`` as :class:`Unavailable` when its message names a speed setting that is not at
    its default (the trainer refused that value here), else ``exc`` itself."""
    text = str(exc)
    for name, knob in KNOBS.items():
        value = getattr(cfg, name)
        if value == KNOB_DEFAULTS.get(name):
            continue
        if any(arg in text for arg in knob.sft(value)) or name in text:
            return Unavailable(f"{name}={fmt(value)} cannot run here: {first_line(exc)}")
    return exc
