"""Values given for a sweep's settings (a TOML table, or the flags parsed) onto a
:class:`~tracetui.core.config.SweepConfig`, each as the type its declaration gives; a value that is
not one is a :class:`~tracetui.core.config.ConfigError` naming the setting.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from .config import ConfigError, SweepConfig, shown
from .knobs import fmt, on_off
from .warmup import parse as parse_warmup


def _int_list(name: str, value: Any) -> list[int]:
    if isinstance(value, bool):
        raise ConfigError(name, f"{value!r} is not a whole number", "give e.g. 4 or 4,8")
    if isinstance(value, int):
        items: list[Any] = [value]
    elif isinstance(value, list):
        items = value
    else:
        items = [s for s in str(value).split(",") if s.strip()]
    out = []
    for item in items:
        try:
            if isinstance(item, bool) or (isinstance(item, float) and not item.is_integer()):
                raise ValueError
            out.append(int(str(item).strip()) if not isinstance(item, int) else item)
        except (ValueError, TypeError):
            raise ConfigError(name, f"{item!r} is not a whole number", "give e.g. 4 or 4,8") from None
    if not out:
        raise ConfigError(name, "is empty", "give at least one effective batch, e.g. 4")
    return out


def _coerce(name: str, value: Any, kind: type) -> Any:
    flag = "--" + name.replace("_", "-")
    try:
        if name == "warmup":
            return parse_warmup(value)
        if kind is bool:
            return on_off(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value) if isinstance(value, (int, float)) else int(str(value).strip())
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if not math.isfinite(out):
                raise ValueError
            return out
        if kind is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (ValueError, TypeError, OverflowError):
        raise ConfigError(flag, f"{value!r} is not a valid {kind.__name__}",
                          "give " + ("auto or a whole number" if name == "warmup" else
                                     {int: "a whole number", float: "a number"}.get(kind, f"a {kind.__name__} value"))) from None
    return value


#: each setting's type, from its declaration
_TYPES: dict[str, Any] = {f.name: f.metadata["kind"] for f in fields(SweepConfig)}


def from_mapping(values: dict[str, Any], base: SweepConfig | None = None) -> SweepConfig:
    """Apply ``values`` (TOML table or parsed flags; ``-`` or ``_`` in keys) onto ``base``."""
    cfg = base or SweepConfig()
    fields_by_name = {f.name: f for f in fields(SweepConfig)}
    known = set(fields_by_name)
    for raw_key, value in values.items():
        key = raw_key.replace("-", "_")
        if key not in known:
            raise ConfigError(raw_key, "is not a tracetui setting",
                              "see `tracetui --help` for the settings a config file may hold")
        if value is None and fields_by_name[key].metadata["nullable"]:
            setattr(cfg, key, None)
            continue
        if key == "effective_batch":
            setattr(cfg, key, _int_list("--effective-batch", value))
        elif key == "splits" and isinstance(value, list):
            setattr(cfg, key, ",".join(str(v) for v in value))
        elif key == "vary":
            setattr(cfg, key, _vary_items(value))
        else:
            setattr(cfg, key, _coerce(key, value, _TYPES[key]))
    return cfg


def _vary_items(value: Any) -> list[str]:
    """``vary`` from flags (a list of NAME=V1,V2), or TOML (that list, or a table of
    name = [values])."""
    if isinstance(value, dict):
        for k, vs in value.items():
            for v in vs if isinstance(vs, list) else [vs]:
                if any(c in fmt(v) for c in ",\"'"):  # (it would be split at its comma)
                    raise ConfigError("vary", f"{k}: {shown(v)} holds a comma or a quote, which no value of a "
                                      "setting has", "give each value as it is named, e.g. \"adamw_torch\"")
        return [f"{k}=" + ",".join(fmt(v) for v in (vs if isinstance(vs, list) else [vs])) for k, vs in value.items()]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError("vary", f"{value!r} is not a list of NAME=V1,V2",
                      'write vary = ["attn_implementation=sdpa,eager"] or [sweep.vary] attn_implementation = ["sdpa", "eager"]')
