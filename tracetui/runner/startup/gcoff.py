"""Imported first by the fork server (:data:`tracetui.runner.lifetime.PRELOAD`): no cyclic
garbage collection while it imports the libraries. The imports make about 800 000 objects that
live as long as the server, and the collector would walk the growing heap again and again
meanwhile, for next to no garbage; :mod:`.gcfreeze`, imported last, freezes what the imports
made and turns the collector back on (every trial forked from the server has it on).

:data:`STARTED` is when the server began its imports (``.gcfreeze.READY`` when it ended them):
a process forked from it reads both, for the account of where a command's time went."""

import gc
import time

gc.disable()
STARTED = time.time()
