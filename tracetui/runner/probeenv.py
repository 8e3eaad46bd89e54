"""The environment of a user's command that tracetui measures (``sweep``, ``run``, a Ray node's
run): the probe's ``sitecustomize`` and tracetui first on its import path, and what the probe
reads (:func:`probe_env`)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from ..core import envvars

#: this process's folder of :func:`_package_shim`, and the process that made it
_shim: list[tuple[int, str]] = []


def _package_shim() -> str:
    """A folder that holds tracetui alone (a link to this package): what a user's script gets on
    its import path, so that tracetui imports there whether or not it is installed in the
    script's interpreter, and nothing beside the package (this checkout's ``tests``, say) can
    shadow a module of the user's. One per process, removed at its exit (:func:`remove_package_shim`)."""
    if not _shim:
        folder = tempfile.mkdtemp(prefix="tracetui-path-")
        os.symlink(Path(__file__).resolve().parent.parent, os.path.join(folder, "tracetui"))
        _shim.append((os.getpid(), folder))
    return _shim[0][1]


def remove_package_shim() -> None:
    """The folder of :func:`_package_shim` removed, by the process that made it (not by a process
    forked from it, which inherits the note): at its exit, and before a Ray lane's runner is
    killed (a kill skips the exit). A later command measured here gets a new one."""
    while _shim:
        pid, folder = _shim.pop()
        if pid == os.getpid():
            shutil.rmtree(folder, ignore_errors=True)


atexit.register(remove_package_shim)


def probe_env(socket_path: str, warmup: int, **extra: str) -> dict[str, str]:
    """The environment of a user's command measured by tracetui (``sweep``, ``run``): the
    probe's ``sitecustomize`` and tracetui first on ``PYTHONPATH`` (the user's own after them),
    the socket its events go to, the warm-up steps not counted, this process as the owner its
    Python processes die with, and NVLink multicast off for any NCCL job (shared GPU hosts)."""
    inject = str(Path(__file__).resolve().parent.parent / "inject")
    path = [inject, _package_shim()] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, **{envvars.SOCKET: socket_path, envvars.WARMUP: str(warmup)}, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(path), **extra)
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        env.setdefault(k, v)
    env[envvars.OWNER_PID] = str(os.getpid())  # Python processes further down watch it (sitecustomize)
    return env
