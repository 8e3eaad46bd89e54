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

_shim: list[str] = []


def _package_shim() -> str:
    """A folder that holds tracetui alone (a link to this package): what a user's script gets on
    its import path, so that tracetui imports there whether or not it is installed in the
    script's interpreter, and nothing beside the package (this checkout's ``tests``, say) can
    shadow a module of the user's. One per process, removed at its exit."""
    if not _shim:
        folder = tempfile.mkdtemp(prefix="tracetui-path-")
        atexit.register(shutil.rmtree, folder, True)
        os.symlink(Path(__file__).resolve().parent.parent, os.path.join(folder, "tracetui"))
        _shim.append(folder)
    return _shim[0]


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
