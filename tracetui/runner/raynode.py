"""What a trial runs as on a Ray node (``--ray``, :mod:`.raycluster` on the driver's side).

One :class:`LaneRunner` per lane, a Ray actor pinned to the lane's node and holding its GPUs,
runs the lane's trials one at a time. It holds a fork server of tracetui's, started once with
the libraries imported (:mod:`.lifetime`), and forks each run's process from it as a local
sweep does; with ``--fresh``, or where forking is off, each run starts as a fresh process
(:class:`~.executor.FreshExecutor`). A run's process is tracetui's worker, or the user's command
with the probe on its path and a socket of this node's. The runner relays what the run says to
the driver through the sweep's event hub (a Ray actor): events in batches, and the signals the
driver's supervisor sends back (SIGTERM to stop, SIGKILL after it). When the run's process has
gone, it ends what the run left on the node and returns its exit status and its log.

Nothing here holds a driver's path: the run's log is written on the node and sent back whole
(up to :data:`LOG_BACK`), its socket is made here, and its ``PYTHONPATH`` names this node's
tracetui.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import tempfile
import time
from pathlib import Path

import ray

from ..core import envvars
from ..core.foreign import run_multiprocessing_finalizers
from ..events.sockpath import private_socket
from ..events.wire import SocketListener
from ..launch.fork import fork_target
from .executor import FreshExecutor, executor
from .leftovers import end_every_run
from .lifetime import stop_server, trial_context
from .probeenv import probe_env, remove_package_shim
from .supervise import DRAIN_S, log_tail

#: how often the relay sends a batch of events, and asks the hub for signals (seconds)
SEND_EVERY_S = 0.1
#: the most of a run's log that travels back to the driver (its end)
LOG_BACK = 4 * 2**20


def node_facts(folders: list[str]) -> dict:
    """This node as a trial placed here would find it: which of the driver's ``folders`` (the
    working folder, the runs folder) do not exist here."""
    return dict(missing=[f for f in folders if not os.path.isdir(f)])


class LaneRunner:
    """One lane's runs on its node (see the module's note); ``fresh``: each run a fresh process."""

    def __init__(self, fresh: bool):
        self.executor = FreshExecutor(multiprocessing.get_context("spawn")) if fresh else executor(trial_context())

    def run(self, kind: str, args: dict, run_id: str, hub) -> dict:
        """Run one trial here (``kind``: ``worker`` or ``command``), relaying its events to
        ``hub``; its exit status and its log once its process has gone."""
        folder = Path(tempfile.mkdtemp(prefix="tracetui-ray-"))
        log_path = folder / "run.log"
        listener = None
        made = [folder]  # (the run's folders on this node, removed as it ends)
        try:
            if kind == "worker":
                child = self._worker(args, log_path)
            else:
                listener, child = self._command(args, log_path, made)
            child.start()
            _relay(child, run_id, hub)
            child.reap()
            child.end()
            return dict(exitcode=child.exitcode(), log=log_tail(log_path, LOG_BACK))
        finally:
            if listener is not None:
                listener.close()
            for each in made:
                shutil.rmtree(each, ignore_errors=True)

    def close(self) -> None:
        """Before the runner goes: whatever a run left here, and the fork server, ended now
        (killed with the runner, the server would outlive it by its own shutdown); and what the
        runner made in the node's temporary folder removed (the folder of its runs' probe,
        multiprocessing's folder of the fork server's address), which the exit handlers that
        would remove them never get to do: the driver kills the runner (``ray.kill``)."""
        end_every_run()
        stop_server()
        remove_package_shim()
        run_multiprocessing_finalizers()

    def _worker(self, args: dict, log_path: Path):
        payload = dict(args["payload"], log_path=str(log_path), parent_pid=self.executor.parent_pid(),
                       owner_pid=os.getpid())
        gpus = ray.get_gpu_ids()
        payload["gpu"] = int(gpus[0]) if gpus else None  # the GPU Ray gave this lane
        return self.executor.worker(args["target"], payload, args["name"], log_path)

    def _command(self, args: dict, log_path: Path, made: list):
        """The user's command with this node's probe: the driver's additions to its environment
        over this node's own, the socket and the owner made here (the socket's folder added to
        ``made``)."""
        inbox: queue.Queue = queue.Queue()
        sockdir, sock = private_socket("tracetui-ray-", "run.sock")
        made.append(sockdir)
        listener = SocketListener(sock, inbox.put, origin=None).start()
        added = {k: v for k, v in args["env_added"].items() if k not in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES")}
        env = probe_env(sock, 0)  # (the warm-up the driver set comes with its additions)
        env.update({k: v for k, v in added.items() if k not in (envvars.SOCKET, envvars.OWNER_PID)})
        os.chdir(args["cwd"])
        target = fork_target(args["argv"])[0] if self.executor.forked else None
        return listener, self.executor.command(args["argv"], target, env, inbox, log_path)


def _relay(child, run_id: str, hub) -> None:
    """Pass the run's events to the hub in batches, and the hub's signals to the run, until its
    process has gone and its last events (:data:`~.supervise.DRAIN_S`) are sent."""
    batch: list = []
    sent = time.monotonic()
    gone_at = None
    while True:
        event = child.next_event(0.05)
        if event is not None:
            batch.append(event)
        now = time.monotonic()
        if now - sent >= SEND_EVERY_S or (event is None and gone_at is not None):
            for sig in ray.get(hub.put.remote(run_id, batch)):  # (one call: the events in, the signals out)
                child.signal(sig)
            batch, sent = [], now
        if event is None and not child.alive():
            gone_at = gone_at or now
            if now - gone_at > DRAIN_S:
                break
    if batch:
        ray.get(hub.put.remote(run_id, batch))

