"""The executor seam: how a trial's process is started, in one place.

A sweep decides what a trial runs (tracetui's own worker with its payload, or a user's command
with its environment); an :class:`Executor` turns that into a :class:`~.supervise.Child`, the
process as the one supervisor (:func:`~.supervise.supervise`) sees it: started, signalled,
its events read, reaped, and what it left ended. Two executors, chosen by :func:`executor`:

- :class:`ForkServerExecutor`: forked from tracetui's fork server, the libraries imported once
  (:mod:`.lifetime`); a command runs in the forked process (:mod:`.forkrun`);
- :class:`FreshExecutor`: a fresh interpreter (multiprocessing's ``spawn``) for the worker, a
  fresh process (:class:`subprocess.Popen`) for a command.

- :class:`~.raycluster.RayExecutor` (``--ray``, :func:`~.sweep.ray_executor`): each trial a Ray task on
  a node of the cluster, which starts the trial's fresh process there; its ``Child`` submits the
  task, asks Ray how it ended, and reads the events that come back through Ray.

A lane (where one trial runs at a time) is a GPU index here, a place on a node with Ray: the
executor says whether a lane still takes runs (:meth:`Executor.lane_open`) and how a run's place
is said (:meth:`Executor.where`).
"""

from __future__ import annotations

import os
import queue as queue_mod
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Protocol

from ..launch.fork import ForkTarget
from . import forkrun
from .lifetime import restart_server_if_gone, server_pid
from .supervise import Child, CommandChild, ForkedCommandChild, WorkerChild

#: queue size of a worker's events: large enough for bursts, small enough to bound memory
QUEUE_MAX = 10_000


class Executor(Protocol):
    """Starts a trial's process: tracetui's worker, or a user's command."""

    #: whether its processes fork from the fork server (their orphans re-parent to it)
    forked: bool

    def parent_pid(self) -> int:
        """The process a trial's process will hang from (its parent-death signal's)."""

    def worker(self, target: Callable, payload: dict, name: str, log_path: Path, lane: int | None = None) -> Child:
        """tracetui's own worker: ``target(payload, queue)``, its events over its own queue."""

    def command(self, argv: list[str], target: ForkTarget | None, env: dict,
                inbox: "queue_mod.Queue[dict]", log_path: Path, lane: int | None = None, run_id: str = "") -> Child:
        """A user's command (``argv``; ``target``: what a fork of it runs, where it forks),
        its events over the sweep's socket into ``inbox``."""

    def lane_open(self, lane: int | None) -> bool:
        """Whether ``lane`` still takes runs (a lost node's does not)."""

    def where(self, lane: int | None) -> str | None:
        """Where a run on ``lane`` runs, in words (None: nothing to say)."""

    def close(self) -> None:
        """Once the sweep is over: nothing of it left running wherever it ran."""


class _Here:
    """What the executors of this machine share: lanes are GPU indices, and never close."""

    def lane_open(self, lane: int | None) -> bool:
        return True

    def where(self, lane: int | None) -> str | None:
        return f"runs on GPU {lane}" if lane is not None else None

    def close(self) -> None:
        pass


class ForkServerExecutor(_Here):
    """Trials forked from the fork server (``ctx``: its multiprocessing context)."""

    forked = True

    def __init__(self, ctx):
        self.ctx = ctx

    def parent_pid(self) -> int:
        restart_server_if_gone()  # one killed from outside is started again first
        return server_pid() or os.getpid()

    def worker(self, target: Callable, payload: dict, name: str, log_path: Path, lane: int | None = None) -> Child:
        return WorkerChild(self.ctx, target, payload, name, QUEUE_MAX, log_path)

    def command(self, argv: list[str], target: ForkTarget | None, env: dict,
                inbox: "queue_mod.Queue[dict]", log_path: Path, lane: int | None = None, run_id: str = "") -> Child:
        if target is None:  # (a command that cannot fork: as a fresh process)
            return FreshExecutor(self.ctx).command(argv, None, env, inbox, log_path)
        payload = dict(target=asdict(target), env=env, cwd=os.getcwd(), log_path=str(log_path),
                       parent_pid=self.parent_pid())
        return ForkedCommandChild(self.ctx, forkrun.run, payload, inbox, log_path)


class FreshExecutor(_Here):
    """Trials as fresh processes (``ctx``: a ``spawn`` context for the worker, or None)."""

    forked = False

    def __init__(self, ctx=None):
        self.ctx = ctx

    def parent_pid(self) -> int:
        return os.getpid()

    def worker(self, target: Callable, payload: dict, name: str, log_path: Path, lane: int | None = None) -> Child:
        return WorkerChild(self.ctx, target, payload, name, QUEUE_MAX, log_path)

    def command(self, argv: list[str], target: ForkTarget | None, env: dict,
                inbox: "queue_mod.Queue[dict]", log_path: Path, lane: int | None = None, run_id: str = "") -> Child:
        return CommandChild(argv, env, inbox, log_path)


def executor(ctx) -> Executor:
    """The executor for trials started in ``ctx`` (:func:`~.lifetime.trial_context`'s): the
    fork server's, or fresh processes (``spawn``, or None: no fork server asked for)."""
    if ctx is not None and ctx.get_start_method() == "forkserver":
        return ForkServerExecutor(ctx)
    return FreshExecutor(ctx)

