"""How long the fork server's library imports take, with the installed-package table computed
beside them (``tracetui.runner.metadata`` imported first, as the fork server does) or where TRL
and transformers ask for it (the standard ``importlib.metadata.packages_distributions``), and
with the cyclic collector on or off during them (``--gc off``: as the fork server does,
``tracetui.runner.gcoff``).

Each measurement is a fresh interpreter importing the libraries of
:data:`tracetui.runner.lifetime.PRELOAD` in its order; prints one JSON line.

    python benchmarks/preload_time.py --way beside
    python benchmarks/preload_time.py --way where_asked
    python benchmarks/preload_time.py --way beside --gc off
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = """
import importlib, json, sys, time
t0 = time.perf_counter()
mods = json.loads(sys.argv[1])
beside = sys.argv[2] == "beside"
gc_off = sys.argv[3] == "off"
if gc_off:
    import gc
    gc.disable()
if beside:
    import tracetui.runner.metadata as md
asked = []
import importlib.metadata as m
inner = m.packages_distributions
def counted():
    t = time.perf_counter()
    try:
        return inner()
    finally:
        asked.append(round(time.perf_counter() - t, 3))
m.packages_distributions = counted
for name in mods:
    importlib.import_module(name)
if beside:
    md.settle()
if gc_off:
    gc.collect()
    gc.enable()
print(json.dumps({"seconds": round(time.perf_counter() - t0, 2), "table_asked_s": asked}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--way", choices=("beside", "where_asked"), required=True)
    p.add_argument("--gc", choices=("on", "off"), default="on",
                   help="the cyclic collector during the imports (the fork server turns it off: off)")
    ns = p.parse_args()
    from tracetui.runner.lifetime import PRELOAD

    libraries = [m for m in PRELOAD if not m.startswith("tracetui.")]
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(libraries), ns.way, ns.gc], capture_output=True,
                         text=True, check=True).stdout
    print(json.dumps({"way": ns.way, "gc": ns.gc, "libraries": libraries, **json.loads(out.strip().splitlines()[-1])}))


if __name__ == "__main__":
    main()
