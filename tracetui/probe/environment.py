"""What a run's result depends on besides its settings: the machine and the library versions.

Shared by the sweep's worker and the attach callback (a probe of the training process)."""

from __future__ import annotations

import os
from typing import Any

from ..core.nvml import NvmlUnavailable, driver_version


LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate")


def library_versions() -> dict[str, str]:
    """The versions of the libraries a run trains with (those installed)."""
    import importlib

    out = {}
    for name in LIBRARIES:
        try:
            # a plain str: torch's is a TorchVersion, and unpickling one imports torch
            out[name] = str(importlib.import_module(name).__version__)
        except ImportError:
            continue
    return out


def environment(device: str) -> dict[str, Any]:
    """What a result depends on besides the split: GPU, driver, library versions."""
    import platform

    import torch

    env: dict[str, Any] = {
        "device": device, "python": platform.python_version(), "host": platform.node(),
        "cpu_count": os.cpu_count(), **library_versions(),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(gpu_name=props.name, gpu_total_gib=props.total_memory / 2**30,
                   cuda=torch.version.cuda,
                   gpu_uuid=f"GPU-{props.uuid}" if getattr(props, "uuid", None) else "")
        try:
            env["driver"] = driver_version()
        except NvmlUnavailable:  # the driver stays unknown (the record has no field for why)
            pass
    else:
        env["gpu_name"] = None
        env["cpu"] = platform.processor() or platform.machine()
    return env
