"""Imported by the fork server (:data:`tracetui.runner.lifetime.PRELOAD`): the libraries every
trial needs (:data:`~tracetui.runner.lifetime.LIBRARIES`), in order, each whatever its import
raises. multiprocessing's own preload passes over an ``ImportError`` only; a library whose lazy
import wraps one (TRL's and transformers' raise ``RuntimeError``), on an optional package kept
out (:mod:`.optional`) or anything else, would otherwise end the server before it served a
trial. What fails here is imported again once the optional packages are back
(:func:`.optional.restore`), else by each trial, where a failure shows in its log."""

from ..lifetime import LIBRARIES

for _name in LIBRARIES:
    try:
        __import__(_name)
    except Exception:  # noqa: BLE001 - imported again by optional.restore, which notes a failure (startup.PROBLEMS)
        pass
