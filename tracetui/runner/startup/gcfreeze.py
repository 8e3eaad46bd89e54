"""Imported last by the fork server (:data:`tracetui.runner.lifetime.PRELOAD`): the optional
packages kept out of its imports (:mod:`.optional`) may be imported again; then every object its
imports made goes to the collector's permanent generation (``gc.freeze``), so that a forked
trial's collections never walk them, and never write to (and so copy) the pages they fill; then
the collector, off during the imports (:mod:`.gcoff`), is on again.

No collection before the freeze: the imports leave next to no garbage, and a full collection
of a heap that size is a noticeable wait on the way to every sweep's first run; the little
garbage frozen costs the server a few pages, shared by every trial and never written."""

import gc
import time

from . import optional
from ..lifetime import LIBRARIES

optional.restore(LIBRARIES)
gc.freeze()
gc.enable()
#: when the server's imports ended (see :data:`.gcoff.STARTED`)
READY = time.time()
