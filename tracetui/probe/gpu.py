"""NVML sampler: a daemon thread that reads the run's GPU about ten times a second.

NVML answers from the driver without touching the CUDA stream, so sampling never waits on
training. Without NVML, or without a GPU, :func:`open_nvml` explains why and no samples come;
if NVML fails mid-run the sampler sends one notice and stops.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..core import envvars
from ..core.nvml import NvmlUnavailable
from ..core.nvml import errors as nvml_errors
from ..core.nvml import device as nvml_device
from ..events.schema import NOTICE, GpuSample, make
from .quiet import measuring_root


def open_nvml(index: int | None = None, uuid: str | None = None) -> tuple[Any, Any, str | None]:
    """Return ``(pynvml module, device handle, None)`` or ``(None, None, why)``."""
    try:
        nvml, handle = nvml_device(index, uuid)
    except NvmlUnavailable as exc:
        return None, None, f"{exc}; no GPU samples"
    return nvml, handle, None


#: clock-event reasons that are not the workload's own doing (thermal limits, hardware brakes);
#: power capping (0x4) and idling are the workload's, and are not flagged
_SLOWDOWN_BITS = {0x8: "hw-slowdown", 0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "power-brake"}


def slowdown_reasons(nvml: Any, handle: Any) -> str | None:
    """The GPU's current clock slowdowns that a quiet machine would not have, or None."""
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    if fn is None:
        return None
    mask = int(fn(handle))
    names = [name for bit, name in _SLOWDOWN_BITS.items() if mask & bit]
    return ",".join(names) or None


def physical_index(index: int) -> int:
    """NVML's index of CUDA device ``index`` of this process (``CUDA_VISIBLE_DEVICES`` maps them)."""
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        parts = [p.strip() for p in visible.split(",")]
        if index < len(parts) and parts[index].isdecimal():
            return int(parts[index])
    return index


def _sweeps_own(pid: int, owner: int) -> bool:
    """Whether ``pid`` descends from ``owner`` (:func:`.quiet.measuring_root`: tracetui's
    process, for a trial): another run of the same sweep (the next run, built early beside this
    one, shares the GPU on purpose, and waits while this one steps)."""
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == owner:
            return True
        if pid <= 1:
            return False
    return False


def other_processes(nvml: Any, handle: Any) -> tuple[int, float | None]:
    """Compute processes on the GPU other than this one and its sweep's other runs, and the memory
    they hold (GiB; None where NVML reports the host's process ids, which a container's own pid
    cannot be matched to: then this process is assumed to be one of the listed)."""
    import os

    procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    me = os.getpid()
    if any(p.pid == me for p in procs):
        root = measuring_root()
        others = [p for p in procs if p.pid != me and not _sweeps_own(p.pid, root)]
        mem = sum((p.usedGpuMemory or 0) for p in others) / 2**30
        return len(others), mem
    # this process is one of them, and so may be the next run, built early beside it (a head start)
    siblings = 1 if os.environ.get(envvars.HEAD_STARTS) else 0
    return max(0, len(procs) - 1 - siblings), None


def read_sample(nvml: Any, handle: Any, gpu_index: int, census: bool = False) -> GpuSample:
    """One reading; ``census`` also lists the other processes on the GPU (costlier: about once a
    second)."""
    util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)

    # a counter this GPU does not support (NVML's NotSupported, NoPermission), or a binding this
    # nvidia-ml-py lacks (AttributeError)
    unsupported = nvml_errors() + (AttributeError,)

    def optional(fn: Callable[[], float]) -> float | None:
        try:
            return fn()
        except unsupported:
            return None

    others = optional(lambda: other_processes(nvml, handle)) if census else None
    return GpuSample(
        slowdown=optional(lambda: slowdown_reasons(nvml, handle)),
        other_procs=others[0] if others else None,
        other_mem_gib=others[1] if others else None,
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
        self._held = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0
        self._census_every = max(1, round(hz))  # other processes listed about once a second

    def start(self) -> str | None:
        """Start sampling; return why not, if NVML cannot be used."""
        if self._nvml is None:
            self._nvml, self._handle, why = open_nvml(self.gpu_index, self.uuid)
            if why:
                return why
        self._thread = threading.Thread(target=self._loop, name="tracetui-gpu", daemon=True)
        self._thread.start()
        return None

    def hold(self, waiting: bool) -> None:
        """Head starts: no samples while this run waits for its turn (the device is then
        another run's)."""
        (self._held.set if waiting else self._held.clear)()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self._held.is_set():
                self._stop.wait(self.period)
                continue
            try:
                census = self.samples % self._census_every == 0
                sample = read_sample(self._nvml, self._handle, self.gpu_index, census=census)
            except Exception as exc:  # noqa: BLE001 - NVML failing mid-run: said in a notice
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
