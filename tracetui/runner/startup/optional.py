"""Imported by the fork server before the libraries (:data:`tracetui.runner.lifetime.PRELOAD`):
optional packages that the libraries import when they are installed, for features a LoRA
fine-tune never reaches, kept out of the server's imports.

transformers imports scikit-learn when it is installed (for assisted generation's candidate
scores), SciPy (for the Hungarian matching of object-detection losses), torchvision and
torchaudio (image and audio processing) as soon as the trainer or PEFT is imported. None of them
is on the path of a causal LM's training step, and where they are all installed they are a
sizeable part of the server's imports. During the imports each is marked absent
(``sys.modules[name] = None``, the documented way to halt an import), so the libraries take the
path they take where it is not installed; :func:`restore` (from :mod:`.gcfreeze`, last) removes
the marks, so a trial's own code (a model's remote code, say) can still import them, paying for
them only then. What the libraries decided while the marks stood stays decided for every trial:
they see these packages as not installed.

A library that imports one of them unconditionally would fail its import here
(:mod:`.libraries` passes over whatever its import raises): :func:`restore` imports every
library that is missing once the marks are gone, so such a library is imported after all, with
the package, and the server is whole either way.
``TRACETUI_PRELOAD_OPTIONAL=1`` imports them as the libraries would.
"""

from __future__ import annotations

import os
import sys

from ...core import envvars
from . import note

#: packages transformers imports for features no LoRA fine-tune of a causal LM uses
HIDDEN = ("sklearn", "scipy", "torchvision", "torchaudio")

#: the names marked absent here (not those already imported, nor any the user marked)
marked: list[str] = []


def hide() -> None:
    """Mark :data:`HIDDEN` absent for the imports that follow."""
    if os.environ.get(envvars.PRELOAD_OPTIONAL) == "1":
        return
    for name in HIDDEN:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
            marked.append(name)


def restore(libraries: list[str]) -> list[str]:
    """Remove the marks; import each of ``libraries`` that is missing (one whose import failed
    on a mark), now with everything in place. Returns those imported again."""
    for name in marked:
        if sys.modules.get(name, 0) is None:
            del sys.modules[name]
    marked.clear()
    again = []
    for name in libraries:
        if name in sys.modules:
            continue
        try:
            __import__(name)
            again.append(name)
        except Exception as exc:  # noqa: BLE001 - noted (startup.PROBLEMS, said in each trial); the trial imports it
            note(f"importing {name}", exc)
    return again


hide()
