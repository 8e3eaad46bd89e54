"""The monitor's own CPU use: it shares the machine with the training it measures, so it
redraws less often when it uses more than its budget."""

from __future__ import annotations

import time


class CpuMeter:
    """This process's CPU use, in cores, over the last ``window`` seconds."""

    def __init__(self, window: float = 2.0):
        self.window = window
        self.samples: list[tuple[float, float]] = [(time.monotonic(), time.process_time())]

    def share(self) -> float:
        now, cpu = time.monotonic(), time.process_time()
        self.samples.append((now, cpu))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.pop(0)
        t0, c0 = self.samples[0]
        return (cpu - c0) / (now - t0) if now > t0 else 0.0
