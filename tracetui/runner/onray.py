"""``--ray``: the executor of a Ray cluster (:mod:`.raycluster`), where Ray is installed."""

from __future__ import annotations

from ..core.config import ConfigError, SweepConfig
from .executor import Executor
from .lifetime import forking


def ray_executor(cfg: SweepConfig, want_gpus: bool, folders: list[str], fresh: bool = False) -> Executor:
    """The executor of ``--ray``'s cluster (:mod:`.raycluster`); a :class:`ConfigError` where
    Ray is not installed, cannot be reached, or has no node that can take a trial. ``fresh``
    (or forking off here, :func:`~.lifetime.forking`): each run a fresh process, not forked from
    its lane's fork server."""
    try:
        from . import raycluster  # (Ray: an optional extra, imported only for --ray)
    except ImportError as exc:
        raise ConfigError("--ray", f"Ray is not installed here ({exc})",
                          "pip install 'tracetui[ray]' (in a checkout: pip install -e '.[ray]')") from None
    return raycluster.RayExecutor(raycluster.connect(cfg.ray, cfg.world_size, want_gpus, folders, fresh or not forking()))
