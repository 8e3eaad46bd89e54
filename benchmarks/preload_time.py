"""How long the fork server's library imports take, each way asked for against the others:

- ``--way beside`` (the fork server's): the installed-package table computed beside the imports
  (``tracetui.runner.startup.metadata`` imported first); ``where_asked``: where TRL and transformers ask
  for it (the standard ``importlib.metadata.packages_distributions``);
- ``--gc off`` (the fork server's): the cyclic collector off during the imports
  (``tracetui.runner.startup.gcoff``); ``on``: as Python has it;
- ``--hide on`` (the fork server's): the optional packages of ``tracetui.runner.startup.optional``
  (scikit-learn, SciPy, torchvision, torchaudio) marked absent during the imports; ``off``:
  imported where the libraries import them;
- ``--collect off`` (the fork server's): the collector turned back on without a full collection
  first (``tracetui.runner.startup.gcfreeze``); ``on``: one full collection after the imports (the fork
  server's before).

Each measurement is a fresh interpreter importing the libraries of
:data:`tracetui.runner.lifetime.LIBRARIES` in their order; prints one JSON line, with how many
modules were imported and which of the optional packages were among them.

    python benchmarks/preload_time.py                          # as the fork server does
    python benchmarks/preload_time.py --hide off --collect on  # as it did before
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = """
import importlib, json, sys, time
t0 = time.perf_counter()
mods, way, gc_mode, hide, collect = json.loads(sys.argv[1]), *sys.argv[2:6]
import gc
if gc_mode == "off":
    gc.disable()
if way == "beside":
    import tracetui.runner.startup.metadata as md
if hide == "on":
    import tracetui.runner.startup.optional as optional
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
if way == "beside":
    md.settle()
t_imports = time.perf_counter() - t0
if hide == "on":
    optional.restore(mods)
if collect == "on":
    gc.collect()
gc.freeze()
gc.enable()
optional_loaded = [n for n in ("sklearn", "scipy", "torchvision", "torchaudio") if sys.modules.get(n) is not None]
print(json.dumps({"seconds": round(time.perf_counter() - t0, 2), "imports_s": round(t_imports, 2),
                  "table_asked_s": asked, "modules": len(sys.modules), "optional_loaded": optional_loaded}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--way", choices=("beside", "where_asked"), default="beside")
    p.add_argument("--gc", choices=("on", "off"), default="off",
                   help="the cyclic collector during the imports (the fork server turns it off: off)")
    p.add_argument("--hide", choices=("on", "off"), default="on",
                   help="the optional packages marked absent during the imports (the fork server's: on)")
    p.add_argument("--collect", choices=("on", "off"), default="off",
                   help="a full collection after the imports (the fork server's: off)")
    ns = p.parse_args()
    from tracetui.runner.lifetime import LIBRARIES

    libraries = list(LIBRARIES)
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(libraries), ns.way, ns.gc, ns.hide, ns.collect],
                         capture_output=True, text=True, check=True).stdout
    print(json.dumps({"way": ns.way, "gc": ns.gc, "hide": ns.hide, "collect": ns.collect, "libraries": libraries,
                      **json.loads(out.strip().splitlines()[-1])}))


if __name__ == "__main__":
    main()
