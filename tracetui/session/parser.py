"""The command-line pieces the entry points share: a parser whose mistakes are one line
(:class:`Parser`), and the output flags every mode takes (:func:`add_output_args`).
"""

from __future__ import annotations

import argparse

from ..core.config import SweepConfig
from ..core.flags import MAX_PROJECT_STEPS, whole_number
from ..core.foreign import parser_actions
from ..outputs.export import FORMATS
from .exits import UsageError


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # no flag taken for another it begins (--effective-batc for --effective-batch): a typo
        # is named, and a flag added later cannot change what an old command line means
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, no usage dump
        raise UsageError(f"{message}{self._did_you_mean(message)}; see `{self.prog} --help`")

    def _did_you_mean(self, message: str) -> str:
        """For a misspelt flag (``--stepz``): the flags it is closest to, if any is close."""
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        names = [o[2:] for a in parser_actions(self) for o in a.option_strings if o.startswith("--")]
        near = []  # (as given, the flag it is closest to)
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                given = word.split("=", 1)[0]
                near += [(given, f"--{m}") for m in difflib.get_close_matches(given[2:], names, n=1, cutoff=0.75)]
        if len(near) == 1:
            return f" (did you mean {near[0][1]}?)"
        return f" (did you mean: {', '.join(f'{g} -> {m}' for g, m in near)}?)" if near else ""


def add_output_args(p: argparse.ArgumentParser, default_out: str = "beside the events", answer: bool = False) -> None:
    """The output flags every mode takes (:mod:`tracetui.outputs.writer` writes them). ``answer``: also
    the flags that decide the answer, for the commands without a sweep's settings (show, watch)."""
    g = p.add_argument_group("output")
    g.add_argument("--export", choices=FORMATS, help="run headless and write the summary in this format")
    g.add_argument("-o", "--output", default=None,
                   help=f"summary path (default: {default_out}, named after the sweep; - for stdout); "
                        "a file already there is refused unless --force")
    g.add_argument("--force", action="store_true", help="replace an existing -o / --steps-csv / --emit-config file")
    g.add_argument("--steps-csv", metavar="PATH", help="also write every measured step as CSV")
    g.add_argument("--dry-run", action="store_true", help="check the settings, print the planned runs, and stop")
    g.add_argument("--project-steps", type=whole_number(1, MAX_PROJECT_STEPS), default=None, metavar="N",
                   help="project the wall time of a full training run of N optimizer steps per split")
    if answer:
        for name in ("allow_result_changes", "allow_busy"):
            g.add_argument("--" + name.replace("_", "-"), action="store_true",
                           help=SweepConfig.__dataclass_fields__[name].metadata["help"])
        g.add_argument("--peak-tflops", type=float, default=None, metavar="TFLOP/s",
                       help=SweepConfig.__dataclass_fields__["peak_tflops"].metadata["help"])
