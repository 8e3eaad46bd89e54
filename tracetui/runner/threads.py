"""A forked run's CPU threads, as a fresh interpreter would take them from the run's environment.

torch reads how many threads its CPU kernels use (OpenMP's and MKL's) from ``MKL_NUM_THREADS`` or
``OMP_NUM_THREADS`` once, as it is imported; a later change to the environment changes nothing.
A run forked from the fork server finds torch imported by the server, so it would keep the count
that tracetui's environment gave, whatever its own environment asks. It asks for another in one
common case: accelerate's launcher, which ``trl sft`` hands its script to, starts the script with
``OMP_NUM_THREADS=1`` (unless accelerate is configured to train on the CPU), so the plain command
and a ``--fresh`` run train on one thread, and a forked run would train on the server's count.
Beside other load on few cores, threads that wait for each other at every kernel while one of
them queues behind that load make a forked run's steps much slower than a fresh run's, and the
two would not be compared fairly (benchmarks/forked_vs_fresh_cpu.py measures both ways).

:meth:`Inherited.follow` (in the forked run, once its environment is set, and again when accelerate hands
it the script's) sets the count a fresh interpreter would take from the environment now. What
torch and its libraries read only as they load and cannot change later (``OMP_WAIT_POLICY``,
``GOMP_SPINCOUNT``, affinity, ``MKL_DYNAMIC``) is the server's, which is tracetui's environment:
a run's environment is tracetui's, and accelerate changes none of them.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

#: where torch takes its thread count from, as it is imported: MKL's variable first
COUNT_VARIABLES = ("MKL_NUM_THREADS", "OMP_NUM_THREADS")


def requested(env: Mapping[str, str]) -> int | None:
    """The thread count ``env`` asks for (the first of a nested list such as ``4,2``), or None
    where it asks for none (unset, or not a whole number over 0: torch then takes its default)."""
    for name in COUNT_VARIABLES:
        first = env.get(name, "").split(",")[0].strip()
        if first.isdecimal() and int(first) > 0:
            return int(first)
    return None


def _capped(env: Mapping[str, str], mkl: bool) -> bool:
    """Whether a count asked for is capped at the default: MKL's dynamic threads (on unless
    ``MKL_DYNAMIC=false``), which torch's count follows where torch has MKL."""
    return mkl and env.get("MKL_DYNAMIC", "").strip().lower() != "false"


def fresh_count(env: Mapping[str, str], default: int, mkl: bool = True) -> int:
    """The thread count a fresh interpreter started with ``env`` would give torch, ``default``
    being the count it takes where none is asked for (one a physical core)."""
    n = requested(env)
    if n is None:
        return default
    return min(n, default) if _capped(env, mkl) else n


class Inherited:
    """What a forked process inherited: the environment the fork server imported torch with, and
    the thread count that gave it (None where torch is not imported: a fresh import reads the
    environment itself)."""

    def __init__(self, env: Mapping[str, str], count: int | None):
        self.env, self.count = dict(env), count

    @classmethod
    def now(cls) -> "Inherited":
        """In a forked process, before it changes its environment."""
        torch = sys.modules.get("torch")
        return cls(os.environ, torch.get_num_threads() if torch is not None else None)

    def default(self) -> int:
        """torch's count where none is asked for: the server's own, unless its environment asked."""
        if requested(self.env) is None and self.count is not None:
            return self.count
        try:
            import psutil

            return psutil.cpu_count(logical=False) or os.cpu_count() or 1
        except ImportError:
            return os.cpu_count() or 1

    def follow(self, env: Mapping[str, str]) -> int | None:
        """Give torch the thread count a fresh interpreter would take from ``env``; the count
        where it changed, else None."""
        torch = sys.modules.get("torch")
        if torch is None or self.count is None:
            return None
        if requested(env) == requested(self.env) and _capped(env, True) == _capped(self.env, True):
            want = self.count  # what the server's environment gave: a fresh interpreter's too
        else:
            want = fresh_count(env, self.default(), torch.backends.mkl.is_available())
        if torch.get_num_threads() == want:
            return None
        torch.set_num_threads(want)
        return want
