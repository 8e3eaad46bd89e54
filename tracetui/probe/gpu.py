"""NVML sampler: a daemon thread that reads the run's GPU about ten times a second.

NVML answers from the driver without touching the CUDA stream, so sampling never waits on
training. Without NVML, or without a GPU, :func:`open_nvml` explains why and no samples come;
if NVML fails mid-run the sampler sends one notice and stops.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..events import NOTICE, GpuSample, make


def open_nvml(index: int | None = None, uuid: str | None = None) -> tuple[Any, Any, str | None]:
    """Return ``(pynvml module, device handle, None)`` or ``(None, None, why)``."""
    try:
        import pynvml
    except ImportError:
        return None, None, "NVML is not installed (pip install nvidia-ml-py); no GPU samples"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError and loader errors alike
        return None, None, f"NVML is not available ({exc}); no GPU samples"
    try:
        handle = None
        if uuid:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception:  # noqa: BLE001 - fall back to the index
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index or 0)
    except Exception as exc:  # noqa: BLE001
        return None, None, f"NVML cannot open GPU {index} ({exc}); no GPU samples"
    return pynvml, handle, None


def read_sample(nvml: Any, handle: Any, gpu_index: int) -> GpuSample:
    util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)

    def optional(fn: Callable[[], float]) -> float | None:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - a counter this GPU does not support
            return None

    return GpuSample(
        util=float(util),
        mem_used_gib=mem.used / 2**30,
        mem_total_gib=mem.total / 2**30,
        power_w=optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
        energy_j=optional(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0),
        sm_clock_mhz=optional(lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
        temp_c=optional(lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
        gpu_index=gpu_index,
    )


class GpuSampler:
    """Sends a GPU sample event every ``1/hz`` seconds until :meth:`stop`."""

    def __init__(self, emit: Callable[[dict], None], run_id: str, hz: float = 10.0,
                 gpu_index: int = 0, uuid: str | None = None, nvml: Any = None, handle: Any = None):
        self.emit = emit
        self.run_id = run_id
        self.period = 1.0 / hz
        self.gpu_index = gpu_index
        self.uuid = uuid
        self._nvml, self._handle = nvml, handle
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0

    def start(self) -> str | None:
        """Start sampling; return why not, if NVML cannot be used."""
        if self._nvml is None:
            self._nvml, self._handle, why = open_nvml(self.gpu_index, self.uuid)
            if why:
                return why
        self._thread = threading.Thread(target=self._loop, name="tracetui-gpu", daemon=True)
        self._thread.start()
        return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                sample = read_sample(self._nvml, self._handle, self.gpu_index)
            except Exception as exc:  # noqa: BLE001 - NVML failing mid-run
                self.emit(make(NOTICE, self.run_id, level="warning",
                               message=f"GPU sampling stopped: NVML failed mid-run ({exc}); timings go on"))
                return
            self.samples += 1
            self.emit(sample.to_event(self.run_id))
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
