"""Imported last by the fork server (:data:`tracetui.runner.lifetime.PRELOAD`): every object its
imports made goes to the collector's permanent generation (``gc.freeze``), so that a forked
trial's collections never walk them, and never write to (and so copy) the pages they fill; then
the collector, off during the imports (:mod:`.gcoff`), is on again."""

import gc

gc.collect()
gc.freeze()
gc.enable()
