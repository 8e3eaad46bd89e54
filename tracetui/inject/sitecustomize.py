"""Loaded through PYTHONPATH by ``tracetui sweep`` (and its data-parallel runs): adds a
TraceCallback to every transformers ``Trainer`` the unmodified training script builds, applies the
sweep's plan for the run inside that trainer (:mod:`tracetui.probe.apply`: the split and settings
reach it wherever the script set its own), makes every Python process of the run die with
tracetui, then runs any sitecustomize it shadows."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
#: when this interpreter reached the script, and when the script began building its Trainer:
#: TraceCallback reports them as the run's start stages (tracetui.callbacks.attach)
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


def _planned() -> bool:
    """Whether this run has a sweep's plan to apply inside its trainer (``tracetui sweep``)."""
    return bool(os.environ.get("TRACETUI_PLAN"))


def _apply(name: str, *args) -> None:
    """``tracetui.probe.apply.<name>(*args)``, never raising into training."""
    try:
        from tracetui.probe import apply

        getattr(apply, name)(*args)
    except Exception as exc:  # noqa: BLE001 - measuring must never stop training: said on stderr (_unmeasured)
        _unmeasured(exc)


def _wrap_init(cls) -> None:
    """``cls.__init__`` (a Trainer or a subclass that defines its own) applies the sweep's plan to
    the arguments it is given, before the library's own code reads them; the outermost one also
    adds the probe once the trainer is built."""
    original = cls.__dict__.get("__init__")
    if original is None or getattr(original, "_tracetui", False):
        return
    import inspect

    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def __init__(self, *args, **kwargs):
        outer = not self.__dict__.get("_tracetui_building")
        if outer:
            self.__dict__["_tracetui_building"] = True
            _TRACETUI_MARKS.setdefault("trainer", time.time())
        try:
            if _planned():
                try:
                    given = signature.bind_partial(self, *args, **kwargs).arguments if signature else kwargs
                except TypeError:
                    given = kwargs
                if given.get("args") is not None:
                    _apply("apply_to_trainer", given.get("args"), given.get("model"))
            original(self, *args, **kwargs)
        finally:
            if outer:
                self.__dict__.pop("_tracetui_building", None)
        if outer:
            try:
                from tracetui.callbacks.attach import TraceCallback

                if not any(isinstance(c, TraceCallback) for c in self.callback_handler.callbacks):
                    self.add_callback(TraceCallback())
            except Exception as exc:  # noqa: BLE001 - measuring must never stop training: said on stderr (_unmeasured)
                _unmeasured(exc)

    __init__._tracetui = True  # noqa: SLF001 - tracetui's own mark on its own wrapper
    __init__.__wrapped__ = original
    cls.__init__ = __init__


def _patch_trainer(module) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls, "_tracetui_patched", False):
        return
    # every Trainer class: this one, those defined already (a forked run's server imported TRL),
    # and those defined later (TRL's, Unsloth's generated ones)
    todo = [trainer_cls]
    while todo:
        cls = todo.pop()
        _wrap_init(cls)
        todo.extend(cls.__subclasses__())
    own_hook = trainer_cls.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if own_hook is not None:
            own_hook.__func__(cls, **kwargs)
        else:
            super(trainer_cls, cls).__init_subclass__(**kwargs)
        _wrap_init(cls)

    trainer_cls.__init_subclass__ = classmethod(__init_subclass__)
    trainer_cls._tracetui_patched = True  # noqa: SLF001 - tracetui's own mark on the class it wrapped
    train = getattr(trainer_cls, "train", None)
    if train is None:
        return

    def train_with_plan(self, *args, **kwargs):
        if _planned():
            _apply("apply_before_train", self)
        return train(self, *args, **kwargs)

    train_with_plan.__wrapped__ = train
    trainer_cls.train = train_with_plan


def _patch_arguments(module) -> None:
    """``TrainingArguments`` notes where the script built each one (the handoff names that line)."""
    cls = getattr(module, "TrainingArguments", None)
    if cls is None or getattr(cls, "_tracetui_patched", False) or not hasattr(cls, "__post_init__"):
        return
    post_init = cls.__post_init__

    def __post_init__(self, *args, **kwargs):
        if _planned():
            _apply("note_origin", self)
        return post_init(self, *args, **kwargs)

    cls.__post_init__ = __post_init__
    cls._tracetui_patched = True


#: the modules patched right after their first import, and how
_PATCHES = {"transformers.trainer": _patch_trainer, "transformers.training_args": _patch_arguments}


class _TrainerFinder(importlib.abc.MetaPathFinder):
    """Patches ``transformers.trainer`` and ``transformers.training_args`` right after each is
    first imported."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
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
            _PATCHES[name](module)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("TRACETUI_SOCKET"):
    # a run forked from tracetui's server has them imported already; else they are patched as they come
    for _name, _patch in _PATCHES.items():
        if _name in sys.modules:
            _patch(sys.modules[_name])
    if not all(_name in sys.modules for _name in _PATCHES):
        sys.meta_path.insert(0, _TrainerFinder())

# Chain to the sitecustomize this file shadows, if there is one (a forked run's server ran it).
if not os.environ.get("TRACETUI_FORKED"):
    _rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    _spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
    if _spec is not None and _spec.origin and os.path.dirname(os.path.abspath(_spec.origin)) != _HERE:
        _mod = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
