"""A run forked from the fork server sets up its CPU threads as the same command run fresh does
(tracetui/runner/threads.py): the count its environment asks for, accelerate's included, though
torch was imported by the server with tracetui's environment; and its own session, as a fresh
run's. A property of the process, not a timing: what made forked runs several times slower than
fresh ones beside a CPU load (benchmarks/forked_vs_fresh_cpu.py)."""

import json
import os
import subprocess
import sys

import pytest

from tracetui.runner.lifetime import forking, server_pid, trial_context
from tracetui.runner.threads import Inherited, fresh_count, requested

pytestmark = pytest.mark.skipif(not forking(), reason="the fork server runs on Linux only")

SEEN = """\
import json, os, sys
import torch
info = torch.__config__.parallel_info().splitlines()
json.dump({"threads": torch.get_num_threads(), "max_threads": sorted(l.strip() for l in info if "max_threads" in l),
           "asked": os.environ.get("OMP_NUM_THREADS"), "own_session": os.getsid(0) == os.getpid()},
          open(sys.argv[1], "w"))
"""

#: as ``trl sft`` hands its script to accelerate's launcher
LAUNCH = """\
import sys
from accelerate.commands.launch import launch_command, launch_command_parser
launch_command(launch_command_parser().parse_args(sys.argv[1:]))
"""


def test_the_count_asked_for_is_read_as_torch_reads_it():
    assert requested({}) is None and requested({"OMP_NUM_THREADS": "0"}) is None
    assert requested({"OMP_NUM_THREADS": "abc"}) is None and requested({"OMP_NUM_THREADS": ""}) is None
    assert requested({"OMP_NUM_THREADS": "3,1"}) == 3
    assert requested({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "2"}) == 2  # MKL's first
    assert requested({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "x"}) == 1  # one it cannot read: OpenMP's
    assert fresh_count({}, 4) == 4 and fresh_count({"OMP_NUM_THREADS": "1"}, 4) == 1
    # MKL's dynamic threads cap a count over the default, unless turned off
    assert fresh_count({"OMP_NUM_THREADS": "8"}, 4) == 4
    assert fresh_count({"OMP_NUM_THREADS": "8", "MKL_DYNAMIC": "FALSE"}, 4) == 8
    assert fresh_count({"OMP_NUM_THREADS": "8"}, 4, mkl=False) == 8
    # an environment that asks what the server's asked: the server's count, changed or not
    assert Inherited({"OMP_NUM_THREADS": "1"}, None).follow({"OMP_NUM_THREADS": "2"}) is None  # no torch of its own


@pytest.mark.slow
def test_a_forked_run_takes_the_cpu_threads_a_fresh_run_takes_from_its_environment(tmp_path):
    import torch

    from tracetui.runner import forkrun

    if torch.get_num_threads() < 2:
        pytest.skip("torch takes one thread here: a forked run's count cannot differ from a fresh one's")
    (tmp_path / "seen.py").write_text(SEEN)
    (tmp_path / "launch.py").write_text(LAUNCH)
    # through accelerate (OMP_NUM_THREADS=1 for the script), and a count asked for by the command's own
    # environment (which tracetui's, and so the fork server's, does not have)
    cases = {"accelerate": (["launch.py", "seen.py"], {}), "asked": (["seen.py"], {"MKL_NUM_THREADS": "1"})}
    fresh = {name: subprocess.Popen([sys.executable, *argv, str(tmp_path / f"{name}.fresh.json")], cwd=tmp_path,
                                    env=dict(os.environ, **extra), start_new_session=True,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for name, (argv, extra) in cases.items()}
    ctx = trial_context()
    for name, (argv, extra) in cases.items():
        target = {"kind": "path", "target": str(tmp_path / argv[0]), "argv0": argv[0], "path0": str(tmp_path),
                  "args": [*argv[1:], str(tmp_path / f"{name}.forked.json")]}
        payload = {"target": target,
                   "env": dict(os.environ, **extra), "cwd": str(tmp_path), "log_path": str(tmp_path / f"{name}.log"),
                   "parent_pid": server_pid()}
        proc = ctx.Process(target=forkrun.run, args=(payload,))
        proc.start()
        proc.join(120)
        assert proc.exitcode == 0, (tmp_path / f"{name}.log").read_text()
    for proc in fresh.values():
        assert proc.wait(120) == 0
    seen = {(name, how): json.loads((tmp_path / f"{name}.{how}.json").read_text())
            for name in cases for how in ("forked", "fresh")}
    assert seen["accelerate", "fresh"]["asked"] == "1"  # the case in point: accelerate asks for one thread
    for name in cases:
        forked, plain = seen[name, "forked"], seen[name, "fresh"]
        assert (forked["threads"], forked["max_threads"]) == (plain["threads"], plain["max_threads"]), name
        assert forked["asked"] == plain["asked"], name
    # a session of its own, as a fresh run's (accelerate's script is its launcher's child there)
    assert seen["asked", "forked"]["own_session"] and seen["asked", "fresh"]["own_session"]
