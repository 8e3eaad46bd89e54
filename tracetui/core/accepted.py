"""What the installed libraries accept for a setting tracetui hands them, known before anything
runs.

A value the trainer refuses (``--optim bogus``: transformers' ``not a valid OptimizerNames``; a
``loss_type`` TRL does not know) was found only once a run built its trainer, after the imports
and the model's load, in every run. Each such setting names where its library declares what it
takes (:class:`Declared`: an enum's values, or a dataclass field's ``choices``), and the values
are read from that library's source as installed, without importing it (importing
``transformers.training_args`` takes seconds; reading its enum takes milliseconds): the same
names, from the same release, that the trainer will check. The library of another Python
environment (a script run by that environment's interpreter) is read from there.

Where the source cannot be read so (a release that moved the declaration), tracetui's own
environment imports the library and asks it; another environment's is then not checked (the
trainer still is).
"""

from __future__ import annotations

import ast
import functools
import glob
import importlib.util
import os
from dataclasses import dataclass

from .text import say


@dataclass(frozen=True)
class Declared:
    """Where a library declares the values one of its settings takes."""

    #: the distribution and top package: ``transformers``
    package: str
    #: the module, dotted: ``transformers.training_args``
    module: str
    #: the class: an enum (its members' values), or a dataclass (``field``'s ``choices``)
    owner: str
    field: str = ""
    #: what a value is, for the line that refuses one: ``optimizer``
    what: str = "value"

    @property
    def where(self) -> str:
        """The declaration, as a refusal names it: ``OptimizerNames``, ``SFTConfig.loss_type``."""
        return self.owner + (f".{self.field}" if self.field else "")


#: transformers' optimizers (``TrainingArguments.optim``)
OPTIMIZERS = Declared("transformers", "transformers.training_args", "OptimizerNames", what="an optimizer")
#: transformers' learning-rate schedules (``TrainingArguments.lr_scheduler_type``)
SCHEDULERS = Declared("transformers", "transformers.trainer_utils", "SchedulerType", what="a scheduler")
#: TRL's losses (``SFTConfig.loss_type``)
SFT_LOSSES = Declared("trl", "trl.trainer.sft_config", "SFTConfig", "loss_type", what="a loss type")


def _source_file(declared: Declared, home: str | None) -> str | None:
    """The ``.py`` file of ``declared.module`` as installed here (``home`` None) or in the Python
    environment at ``home``; None if it is not there. Nothing is imported."""
    rel = declared.module.split(".")[1:]
    if home is None:
        try:
            spec = importlib.util.find_spec(declared.package)  # (the top package: not imported)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin:
            return None
        roots = [os.path.dirname(spec.origin)]
    else:
        roots = sorted(glob.glob(os.path.join(home, "lib", "python3*", "site-packages", declared.package)))
        roots += sorted(glob.glob(os.path.join(home, "Lib", "site-packages", declared.package)))
    for root in roots:
        path = os.path.join(root, *rel) + ".py"
        if os.path.isfile(path):
            return path
    return None


def _strings(node: ast.AST) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                       for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _from_source(declared: Declared, text: str) -> tuple[str, ...] | None:
    """The values ``declared`` declares, read from its module's source: an enum's string
    members (``ADAMW_TORCH = "adamw_torch"``), or a dataclass field's ``metadata={"choices": [...]}``."""
    tree = ast.parse(text)
    owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == declared.owner), None)
    if owner is None:
        return None
    if not declared.field:
        values = [s.value.value for s in owner.body if isinstance(s, ast.Assign) and len(s.targets) == 1
                  and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Constant)
                  and isinstance(s.value.value, str)]
        return tuple(values) or None
    for s in owner.body:
        if (isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == declared.field
                and isinstance(s.value, ast.Call)):
            for kw in s.value.keywords:
                if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for key, value in zip(kw.value.keys, kw.value.values):
                        if isinstance(key, ast.Constant) and key.value == "choices":
                            found = _strings(value)
                            return tuple(found) if found else None
    return None


def _imported(declared: Declared) -> tuple[str, ...] | None:
    """The same, asked of the imported library (tracetui's own environment only: seconds)."""
    import dataclasses
    import importlib

    try:
        owner = getattr(importlib.import_module(declared.module), declared.owner)
    except (ImportError, AttributeError):  # a release without it: not checked
        return None
    except Exception as exc:  # noqa: BLE001 - said on stderr; the trainer still checks the value
        say(f"tracetui: warning: {declared.module} could not be imported to read {declared.where} "
            f"({type(exc).__name__}: {exc}); its values are not checked before the runs")
        return None
    if not declared.field:
        return tuple(str(m.value) for m in owner) or None
    if not dataclasses.is_dataclass(owner):  # a release that made it something else: not checked
        return None
    for f in dataclasses.fields(owner):
        if f.name == declared.field:
            choices = f.metadata.get("choices")
            return tuple(map(str, choices)) if choices else None
    return None


@functools.lru_cache(maxsize=None)
def accepted(declared: Declared, home: str | None = None) -> tuple[str, ...] | None:
    """The values the installed library (``home``: that of the Python environment there)
    accepts for ``declared``, or None where that cannot be known (not installed, not found)."""
    path = _source_file(declared, home)
    found = None
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                found = _from_source(declared, fh.read())
        except (OSError, ValueError, SyntaxError, RecursionError):
            found = None
    if found is None and home is None and path is not None:
        found = _imported(declared)
    return found


def installed(declared: Declared, home: str | None = None) -> str:
    """The library as a refusal names it: ``the installed transformers 5.25.0``, or that of the
    environment at ``home``."""
    if home is not None:
        return f"{declared.package} in {home}"
    try:
        from importlib.metadata import version

        return f"the installed {declared.package} {version(declared.package)}"
    except (ImportError, OSError, ValueError):  # no metadata to read: the name alone will do
        return f"the installed {declared.package}"


def refusal(declared: Declared, value: str, home: str | None = None) -> str | None:
    """Why ``value`` is not accepted (one line, without the fix), or None (accepted, or the
    library cannot say)."""
    values = accepted(declared, home)
    if values is None or value in values:
        return None
    import difflib

    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    near = difflib.get_close_matches(value, values, n=1, cutoff=0.8)
    return (f"{shown} is not {declared.what} {installed(declared, home)} accepts (its {declared.where})"
            + (f" (did you mean {near[0]}?)" if near else ""))


def valid_list(declared: Declared, home: str | None = None) -> str:
    """The accepted values, as the fix of a refusal lists them."""
    return "give one of " + ", ".join(accepted(declared, home) or ())
