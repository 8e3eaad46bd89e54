"""What the tests of a real Ray cluster share (the cluster itself: the ``ray_cluster`` fixture of
``tests/conftest.py``, started once per module that asks): the sweep of the stand-in worker, and
the sweep's processes left on the cluster. Two modules use them (``test_ray.py``: the answers;
``test_ray_faults.py``: the faults), each a pytest-xdist group of its own: the two run side by
side, each with its cluster, rather than one after the other at the end of the suite."""

import os
from pathlib import Path

from tracetui.core.checks import validate
from tracetui.core.config import SweepConfig
from tracetui.events.log import read_events

from .test_runner_stub import StubSweep

#: every process of a module's cluster carries it (its daemons, its workers and what they start)
MARK = "TRACETUI_TEST_RAY"


def cmdline(pid) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def leftovers() -> list[str]:
    """The cluster's processes that are a sweep's: a lane's runner (Ray names an actor's
    process after its class), its fork server, a run's process (what runs beside Ray's own
    daemons and idle workers)."""
    mark = os.environ[MARK].encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = cmdline(pid)
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) if mark in env else 0
        except OSError:
            continue
        if parent == os.getpid():
            continue  # (this process's own fork server: the local sweep's)
        if mark in env and any(w in cmd for w in ("LaneRunner", "forkserver", "spawn_main", "trainer.py")):
            found.append(f"{pid}: {cmd[:120]}")
    return found


def left_on_nodes(cluster) -> list[str]:
    """What the sweeps' lanes left in the temporary folder of the cluster's nodes
    (``cluster.node_tmp``): tracetui's folders (a run's, its socket's, its probe's) and
    multiprocessing's (a fork server's address)."""
    return sorted(p.name for p in Path(cluster.node_tmp).iterdir() if p.name.startswith(("tracetui-", "pymp-")))


def stub_sweep(tmp_path: Path, name: str, on_event=None, **cfg):
    """A sweep of the stand-in worker (8 steps, 2 of warm-up, each split once): the sweep, its
    outcomes and its events."""
    cfg = SweepConfig(**{**dict(splits="1x4,2x2,4x1", repeats=1, steps=8, warmup=2, device="cpu",
                                runs_dir=str(tmp_path / name), allow_busy=True), **cfg})
    sweep = StubSweep(cfg, validate(cfg), on_event=on_event)
    try:
        outcomes = sweep.run()
    finally:
        sweep.close()
    return sweep, outcomes, read_events([sweep.log.path]).events
