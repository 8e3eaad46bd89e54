"""What NVML says about the machine's GPUs, in one place: the only module that imports pynvml.

NVML answers from the driver without initialising CUDA in the asking process (tracetui's own
process and the fork server must never initialise it) and without touching a CUDA stream (the
probe's sampler reads it beside training). Every function raises :class:`NvmlUnavailable` with
the reason in words when NVML cannot answer (not installed, no driver, no such GPU); the caller
decides what that means for it and says so where the user sees it.
"""

from __future__ import annotations

from typing import Any


class NvmlUnavailable(Exception):
    """NVML cannot answer; ``str()`` says why, for a notice or a note."""


def library() -> Any:
    """The pynvml module, initialised (NVML counts its initialisations: each is cheap)."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("NVML is not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:  # OSError: the loader, before NVML's own errors
        raise NvmlUnavailable(f"NVML is not available ({exc})") from None
    return pynvml


def errors() -> tuple[type[BaseException], ...]:
    """What an NVML call raises once NVML is up (for a reader that goes on reading)."""
    try:
        import pynvml
    except ImportError:
        return ()
    return (pynvml.NVMLError,)


def device(index: int | None = None, uuid: str | None = None) -> tuple[Any, Any]:
    """``(pynvml, handle)`` of the GPU with ``uuid`` if NVML knows it, else of NVML's ``index``."""
    nvml = library()
    if uuid:
        try:
            return nvml, nvml.nvmlDeviceGetHandleByUUID(uuid)
        except nvml.NVMLError:  # an id NVML does not know: the index
            pass
    try:
        return nvml, nvml.nvmlDeviceGetHandleByIndex(index or 0)
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot open GPU {index} ({exc})") from None


def device_count() -> int:
    nvml = library()
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot count the GPUs ({exc})") from None


def memory_bytes(index: int) -> tuple[int, int]:
    """``(total, free)`` bytes of NVML's GPU ``index``."""
    try:
        nvml = library()
    except NvmlUnavailable as exc:
        raise NvmlUnavailable(f"NVML cannot read the card's memory ({exc})") from None
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index))
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot read the card's memory ({exc})") from None
    return int(info.total), int(info.free)


def names(indices: list[int]) -> dict[int, str]:
    """The model name of each of NVML's GPUs ``indices``."""
    nvml = library()
    try:
        got = {i: nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices}
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot name the GPUs ({exc})") from None
    return {i: (n.decode() if isinstance(n, bytes) else n) for i, n in got.items()}


def driver_version() -> str:
    nvml = library()
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot say the driver's version ({exc})") from None
    return version.decode() if isinstance(version, bytes) else version
