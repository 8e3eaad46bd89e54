"""Loaded through PYTHONPATH by ``tracetui sweep`` (and its data-parallel runs): adds a
TraceCallback to every transformers ``Trainer`` the unmodified training script builds, makes every
Python process of the run die with tracetui, then runs any sitecustomize it shadows."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
#: when this interpreter reached the script, and when the script began building its Trainer:
#: TraceCallback reports them as the run's start stages (tracetui.attach)
_TRACETUI_MARKS: dict = {"interpreter": time.time()}


def _die_with_owner(owner: int) -> None:
    """Kill this process when tracetui (pid ``owner``) ends, however it ends.

    tracetui's direct child already gets the kernel's parent-death signal; the processes it
    starts (torchrun's ranks, a launcher's workers) are not tracetui's children, and a
    parent-death signal of their own would follow their parent's *thread*, which may end while
    the run goes on. So a daemon thread waits on a pidfd of tracetui itself (readable once it has
    exited) and kills this process then. Costs nothing while it waits."""
    import select
    import signal
    import threading
    import time

    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        os._exit(1)  # tracetui is gone already
    except (OSError, AttributeError):
        fd = None  # no pidfds (old kernel): look once a second

    def wait() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(1.0)
                try:
                    os.kill(owner, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="tracetui-owner-watch", daemon=True).start()


if os.environ.get("TRACETUI_OWNER_PID", "").isdecimal() and int(os.environ["TRACETUI_OWNER_PID"]) != os.getpid():
    _die_with_owner(int(os.environ["TRACETUI_OWNER_PID"]))


#: the one line a run says when the probe cannot attach in its environment (tracetui reads it)
UNMEASURED = "tracetui: could not attach the probe"


def _unmeasured(exc: BaseException) -> None:
    """One printable line, never a traceback: what failed, and that training goes on. Nothing of
    tracetui is imported for it (in a foreign environment tracetui may be what failed)."""
    said = " ".join(f"{UNMEASURED} ({type(exc).__name__}: {exc}); training goes on unmeasured".split())
    sys.stderr.write("".join(c if c.isprintable() else "?" for c in said)[:600] + "\n")


def _patch_trainer(module) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls, "_tracetui_patched", False):
        return
    original = trainer_cls.__init__

    def __init__(self, *args, **kwargs):
        _TRACETUI_MARKS.setdefault("trainer", time.time())
        original(self, *args, **kwargs)
        try:
            from tracetui.attach import TraceCallback

            if not any(isinstance(c, TraceCallback) for c in self.callback_handler.callbacks):
                self.add_callback(TraceCallback())
        except Exception as exc:  # noqa: BLE001 - measuring must never stop training
            _unmeasured(exc)

    trainer_cls.__init__ = __init__
    trainer_cls._tracetui_patched = True


class _TrainerFinder(importlib.abc.MetaPathFinder):
    """Patches ``transformers.trainer`` right after it is first imported."""

    def find_spec(self, name, path, target=None):
        if name != "transformers.trainer":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch_trainer(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("TRACETUI_SOCKET"):
    if "transformers.trainer" in sys.modules:  # a run forked from tracetui's server: imported already
        _patch_trainer(sys.modules["transformers.trainer"])
    else:
        sys.meta_path.insert(0, _TrainerFinder())

# Chain to the sitecustomize this file shadows, if there is one (a forked run's server ran it).
if not os.environ.get("TRACETUI_FORKED"):
    _rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    _spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
    if _spec is not None and _spec.origin and os.path.dirname(os.path.abspath(_spec.origin)) != _HERE:
        _mod = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
