"""The sweep's command-line flags, built from the declarations in
:class:`~tracetui.core.config.SweepConfig` (:func:`add_arguments`), and the config they give with
the TOML file beneath them (:func:`from_args`).
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields, replace

from .checks import range_help
from .coerce import from_mapping
from .config import ConfigError, SweepConfig, parse_vary, shown
from .knobs import fmt
from .tomlfile import load_toml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep flags, shared by the TUI, the headless export and ``tracetui sweep``, built from
    the declarations in :class:`SweepConfig`.

    Defaults are ``argparse.SUPPRESS`` so only flags actually given override the TOML.
    """
    suppress = argparse.SUPPRESS
    g = parser.add_argument_group("sweep")
    g.add_argument("--config", metavar="FILE.toml", help="read settings from a TOML file (flags override it)")
    for f in fields(SweepConfig):
        m = f.metadata
        flag = m["flag"] or "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else f.default_factory()
        given = ",".join(map(str, default)) if isinstance(default, list) else default
        help_text = m["help"] + (f" (default {given})" if m["show_default"] and default is not None
                                 and m["kind"] is not bool else "") + range_help(m)
        if m["kind"] is bool:
            if m["flag"]:  # a switch that turns a default-on setting off
                g.add_argument(flag, dest=f.name, action="store_false" if default else "store_true",
                               default=suppress, help=m["help"])
                continue
            g.add_argument(flag, dest=f.name, action="store_true", default=suppress,
                           help=help_text + (" (default off)" if not default else " (default on)"))
            if m["negatable"]:
                g.add_argument("--no-" + flag[2:], dest=f.name, action="store_false", default=suppress)
            continue
        extra = {"nargs": "?", "const": m["const"]} if m["const"] is not None else {}
        if m["append"]:
            extra = {"action": "append"}
        g.add_argument(flag, dest=f.name, default=suppress, metavar=m["metavar"], help=help_text, **extra)


SWEEP_KEYS = [f.name for f in fields(SweepConfig)]


def from_args(ns: argparse.Namespace) -> SweepConfig:
    """Build the config: defaults, then the TOML file, then the flags given."""
    cfg = SweepConfig()
    fixed: dict[str, str] = {}  # setting -> where it was fixed to one value
    if getattr(ns, "config", None):
        table = load_toml(ns.config)
        cfg = from_mapping(table, cfg)
        fixed.update({k.replace("-", "_"): f"in {ns.config}" for k in table})
    given = {k: v for k, v in vars(ns).items() if k in SWEEP_KEYS}
    cfg = from_mapping(given, cfg)
    fixed.update({k: "on the command line" for k in given})
    if "effective_batch" not in fixed and "splits" in fixed and cfg.splits != "auto":
        # splits given without an effective batch name theirs: 1x8,8x1 compares at 8, not at
        # the default 4 (a split that does not parse is refused by validate)
        try:
            products = [t.effective_batch for t in cfg.split_list()]
        except ConfigError:
            products = []
        if products:
            cfg = replace(cfg, effective_batch=list(dict.fromkeys(products)))
    for name in parse_vary(cfg.vary):
        if name in fixed:
            raise ConfigError("--vary", f"{name} is varied, and also fixed to {fmt(getattr(cfg, name))} {fixed[name]}",
                              "drop one of the two: a varied setting takes each of its values in turn")
    return cfg


def whole_number(low: int, high: int):
    """An argparse ``type`` for a flag outside the sweep's settings (``--project-steps``, ``run
    --warmup``): a whole number from ``low`` to ``high``, else one line naming the flag."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number; give e.g. {max(low, 3)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {shown(value)}")
        return value

    parse.__name__ = "whole number"
    return parse


#: the most optimizer steps ``--project-steps`` may project (a billion: beyond any training run,
#: and far from what overflows the projection's float)
MAX_PROJECT_STEPS = 10**9
