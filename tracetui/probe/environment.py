"""What a run's result depends on besides its settings: the machine and the library versions.

Shared by the sweep's worker and the attach callback (a probe of the training process)."""

from __future__ import annotations

import os
from typing import Any


def environment(device: str) -> dict[str, Any]:
    """What a result depends on besides the split: GPU, driver, library versions."""
    import platform

    import peft
    import torch
    import transformers
    import trl

    env: dict[str, Any] = {
        "device": device, "python": platform.python_version(), "host": platform.node(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
        "trl": trl.__version__, "peft": peft.__version__,
    }
    try:
        import accelerate

        env["accelerate"] = accelerate.__version__
    except ImportError:
        pass
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(gpu_name=props.name, gpu_total_gib=props.total_memory / 2**30,
                   cuda=torch.version.cuda,
                   gpu_uuid=f"GPU-{props.uuid}" if getattr(props, "uuid", None) else "")
        try:
            import pynvml

            pynvml.nvmlInit()
            env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001 - no NVML: the driver stays unknown
            pass
    else:
        env["gpu_name"] = None
        env["cpu"] = platform.processor() or platform.machine()
    return env
