"""Imported first by the fork server (:data:`tracetui.runner.lifetime.PRELOAD`): no cyclic
garbage collection while it imports the libraries. The imports make about 800 000 objects that
live as long as the server, and the collector would walk the growing heap again and again
meanwhile, for next to no garbage; :mod:`.gcfreeze`, imported last, freezes what the imports
made and turns the collector back on (every trial forked from the server has it on)."""

import gc

gc.disable()
