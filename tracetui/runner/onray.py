"""``--ray``: the executor of a Ray cluster (:mod:`.raycluster`), where Ray is installed."""

from __future__ import annotations

import socket

from ..core.config import ConfigError, SweepConfig
from .executor import Executor
from .lifetime import forking

#: how long an address given to --ray has to take a connection before it is refused
REACH_WITHIN_S = 5.0
#: what the line refusing --ray's cluster says to do
CLUSTER_FIX = "start one (ray start --head) or give its address; --ray alone starts one here"


def ray_executor(cfg: SweepConfig, want_gpus: bool, folders: list[str], fresh: bool = False) -> Executor:
    """The executor of ``--ray``'s cluster (:mod:`.raycluster`); a :class:`ConfigError` where
    Ray is not installed, cannot be reached, or has no node that can take a trial (an address that
    takes no connection is refused before, as the settings are loaded: :func:`check_reachable`). ``fresh``
    (or forking off here, :func:`~.lifetime.forking`): each run a fresh process, not forked from
    its lane's fork server."""
    try:
        from . import raycluster  # (Ray: an optional extra, imported only for --ray)
    except ImportError as exc:
        raise ConfigError("--ray", f"Ray is not installed here ({exc})",
                          "pip install 'tracetui[ray]' (in a checkout: pip install -e '.[ray]')") from None
    try:
        cluster = raycluster.connect(cfg.ray, cfg.world_size, want_gpus, folders, fresh or not forking())
    except ConnectionError as exc:
        raise ConfigError("--ray", f"cannot reach a Ray cluster at {cfg.ray} ({exc})", CLUSTER_FIX) from None
    return raycluster.RayExecutor(cluster)


def check_reachable(address: str | None) -> None:
    """A :class:`ConfigError` where ``--ray``'s ``HOST:PORT`` takes no connection within
    :data:`REACH_WITHIN_S` (Ray itself retries such an address for minutes): a socket, no Ray
    import, so that it is said before anything starts. ``local``/``auto`` (and no address) pass:
    Ray resolves those and refuses at once."""
    host, _, port = (address or "").rpartition(":")
    if not address or address in ("local", "auto") or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_WITHIN_S):
            return
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
    raise ConfigError("--ray", f"cannot reach a Ray cluster at {address} ({why})", CLUSTER_FIX)
