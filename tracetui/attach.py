"""Attach mode: measure an existing TRL/transformers training script.

``TraceCallback`` is the sweep's probe as a callback for the user's own trainer. It sends the same
events over a local UNIX socket to ``tracetui watch``; when nothing listens, or the listener goes
away, it keeps every event of the run in a JSONL file instead (path printed once). It never raises
into training and never blocks it: events go to an in-process buffer that a sender thread empties.

The socket carries newline-delimited JSON only. :class:`SocketListener` (used by ``watch`` and
``sweep``) drops, and counts, lines over :data:`MAX_LINE`, invalid JSON and schema violations.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import selectors
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from .events import RUN_FINISHED, RUN_STARTED, make, parse_line

#: the longest line (one event) a listener accepts, in bytes
MAX_LINE = 64 * 1024
#: bytes a listener buffers per connection before a line must end
_MAX_PENDING = MAX_LINE + 1


def default_socket_path() -> str:
    """``TRACETUI_SOCKET``, else ``$XDG_RUNTIME_DIR/tracetui/watch.sock``, else a per-user folder
    in the temp directory. The folder is made 0700: only this user can reach the socket."""
    env = os.environ.get("TRACETUI_SOCKET")
    if env:
        return env
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "tracetui" if runtime and os.path.isdir(runtime) else Path(
        tempfile.gettempdir()) / f"tracetui-{os.getuid()}"
    return str(base / "watch.sock")


# ---------------------------------------------------------------------------------------------
# Sending side


class SocketSink:
    """Events to a listener socket, falling back to a JSONL file; never blocks the caller."""

    def __init__(self, socket_path: str, jsonl_path: str, quiet: bool = False):
        self.socket_path = socket_path
        self.jsonl_path = jsonl_path
        self.quiet = quiet
        self._buf: collections.deque = collections.deque()
        # This run's events, replayed into the file if the listener goes away: every step and run
        # event, and the latest GPU samples (a day of 10 Hz samples would not fit in memory).
        self._history: list[dict] = []
        self._gpu_history: collections.deque = collections.deque(maxlen=20_000)
        self._cv = threading.Condition()
        self._closing = False
        self._sock: socket.socket | None = None
        self._file = None
        self.sent = 0
        self.to_file = 0
        self._thread = threading.Thread(target=self._loop, name="tracetui-attach", daemon=True)
        self._thread.start()

    def emit(self, event: dict) -> None:
        with self._cv:
            self._buf.append(event)
            self._cv.notify()

    def _connect(self) -> None:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2.0)
            s.connect(self.socket_path)
            self._sock = s
        except OSError:
            self._sock = None
            self._open_file()

    def _open_file(self) -> None:
        if self._file is not None:
            return
        try:
            Path(self.jsonl_path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.jsonl_path, "a", encoding="utf-8")
        except OSError as exc:
            if not self.quiet:
                sys.stderr.write(f"tracetui: cannot keep events in {self.jsonl_path} ({exc.strerror})\n")
            self._file = False  # type: ignore[assignment]
            return
        if not self.quiet:
            sys.stderr.write(f"tracetui: no watcher at {self.socket_path}; events kept in {self.jsonl_path}\n")
        for e in sorted(self._history + list(self._gpu_history), key=lambda e: e["t"]):
            self._write_file(e)

    def _write_file(self, event: dict) -> None:
        if self._file:
            self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
            self._file.flush()
            self.to_file += 1

    def _remember(self, event: dict) -> None:
        (self._gpu_history if event.get("type") == "gpu" else self._history).append(event)

    def _loop(self) -> None:
        self._connect()
        while True:
            with self._cv:
                while not self._buf and not self._closing:
                    self._cv.wait()
                if not self._buf and self._closing:
                    break
                batch = list(self._buf)
                self._buf.clear()
            for event in batch:
                if self._sock is not None:
                    try:
                        self._sock.sendall((json.dumps(event, separators=(",", ":")) + "\n").encode())
                        self.sent += 1
                        self._remember(event)
                        continue
                    except OSError:  # the listener went away mid-run
                        self._sock.close()
                        self._sock = None
                        self._open_file()
                self._write_file(event)
        if self._sock is not None:
            self._sock.close()
        if self._file:
            self._file.close()

    def close(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(timeout)


def _run_id() -> str:
    """One id for all ranks of a run: torchrun's ranks share their agent (the parent)."""
    host = socket.gethostname()
    if os.environ.get("TRACETUI_RUN_ID"):
        return os.environ["TRACETUI_RUN_ID"]
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return f"{host}-{os.environ.get('MASTER_PORT', '')}-{os.getppid()}"
    return f"{host}-{os.getpid()}-{time.strftime('%H%M%S')}"


def _callback_base():
    from .probe.callback import Probe

    return Probe


def _make_trace_callback():
    Probe = _callback_base()

    class TraceCallback(Probe):
        """Add to a ``Trainer``/``SFTTrainer``: ``callbacks=[TraceCallback()]``.

        Sends the sweep's events (run started, a step record per optimizer step, GPU samples, run
        finished) to ``tracetui watch`` at ``socket_path`` (default: :func:`default_socket_path`).
        ``warmup``: first steps flagged warm-up. Nothing here raises into training: a failure
        inside the callback is reported once and the callback goes quiet.
        """

        def __init__(self, socket_path: str | None = None, jsonl_path: str | None = None,
                     warmup: int | None = None, run_id: str | None = None, gpu_samples: bool = True,
                     quiet: bool = False):
            self.run_id_base = run_id or _run_id()
            warm = int(os.environ.get("TRACETUI_WARMUP", 3)) if warmup is None else warmup
            super().__init__(self._emit, self.run_id_base, warmup=warm, stop_after=_stop_rule_from_env())
            self.announce_settings = False  # sent after run_started, below
            self.socket_path = socket_path or default_socket_path()
            self.jsonl_path = jsonl_path
            self.gpu_samples = gpu_samples
            self.quiet = quiet
            self.sink: SocketSink | None = None
            self.sampler = None
            self.failed = False
            self._t0 = None

        def _emit(self, event: dict) -> None:
            if self.sink is not None:
                self.sink.emit(event)

        def _guard(self, fn, *args, **kwargs):
            if self.failed:
                return None
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - never break the user's training
                self.failed = True
                self.pause()
                what = str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
                sys.stderr.write(f"tracetui: TraceCallback stopped measuring ({what}); training goes on\n")
                return None

        # -- callback events, each guarded ------------------------------------------------------
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self._guard(self._begin, args, state, control, model, kwargs.get("optimizer"))

        def _begin(self, args, state, control, model, optimizer=None):
            from .probe.callback import missing_callback_events

            why = missing_callback_events()
            if why:
                raise RuntimeError(why)
            rank = int(getattr(args, "process_index", 0))
            world = int(getattr(args, "world_size", 1))
            path = self.jsonl_path or os.path.join(
                "tracetui_runs", "attach", f"{self.run_id_base.replace('/', '_')}-rank{rank}.jsonl")
            self.sink = SocketSink(self.socket_path, path, quiet=self.quiet or rank != 0)
            Probe.on_train_begin(self, args, state, control, model=model, optimizer=optimizer)
            self.rank = rank
            mb = int(args.per_device_train_batch_size)
            ga = int(args.gradient_accumulation_steps)
            from .runner.worker import environment

            device = "cuda" if self.cuda else "cpu"
            env = environment(device) if device == "cpu" or _cuda_ready() else {"device": device}
            self._t0 = time.time()
            self._emit(make(RUN_STARTED, self.run_id, label=f"{mb}x{ga}" + (f"x{world}" if world > 1 else ""),
                            micro_batch=mb, grad_accum=ga, effective_batch=mb * ga * world,
                            world_size=world, rank=rank, pid=os.getpid(), env=env, mode="attach",
                            config={"steps": int(state.max_steps or 0), "warmup": self.warmup},
                            max_steps=int(state.max_steps or 0)))
            self._emit(self.settings_event())  # the script's own settings, as its trainer has them
            if not self.cuda:
                self._emit(make("notice", self.run_id, level="info",
                                message="running on the CPU; phases timed with the host clock"))
            if self.stop_after is not None and world > 1:
                # Ranks deciding apart would leave some waiting in an all-reduce for ever.
                self.stop_after = None
                self._emit(make("notice", self.run_id, level="warning",
                                message="--until-confident is not applied under data parallel; every step runs"))
            if self.cuda and self.gpu_samples:
                from .probe.gpu import GpuSampler

                index = _physical_gpu(self.device)
                self.sampler = GpuSampler(self._emit, self.run_id, gpu_index=index,
                                          uuid=env.get("gpu_uuid") or None)
                why = self.sampler.start()
                if why:
                    self._emit(make("notice", self.run_id, level="warning", message=why))
                    self.sampler = None

        def on_step_begin(self, args, state, control, **kwargs):
            self._guard(Probe.on_step_begin, self, args, state, control, **kwargs)

        def on_substep_end(self, args, state, control, **kwargs):
            self._guard(Probe.on_substep_end, self, args, state, control, **kwargs)

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self._guard(Probe.on_pre_optimizer_step, self, args, state, control, **kwargs)

        def on_optimizer_step(self, args, state, control, **kwargs):
            self._guard(Probe.on_optimizer_step, self, args, state, control, **kwargs)

        def on_step_end(self, args, state, control, **kwargs):
            self._guard(Probe.on_step_end, self, args, state, control, **kwargs)

        def on_log(self, args, state, control, logs=None, **kwargs):
            self._guard(Probe.on_log, self, args, state, control, logs=logs, **kwargs)

        def on_train_end(self, args, state, control, **kwargs):
            self._guard(Probe.on_train_end, self, args, state, control, **kwargs)
            try:
                if self.sampler is not None:
                    self.sampler.stop()
                if self.sink is not None:
                    self.sink.emit(make(RUN_FINISHED, self.run_id, rank=self.rank, steps=int(state.global_step),
                                        train_runtime_s=time.time() - (self._t0 or time.time()),
                                        stopped_early=self.stop_reason is not None, stop_reason=self.stop_reason,
                                        quiet=self.load))
                    self.sink.close()
            except Exception:  # noqa: BLE001 - never break the user's training
                pass

    return TraceCallback


def _stop_rule_from_env():
    """``tracetui sweep --until-confident``: the stopping rule the sweep hands the script's
    process (``TRACETUI_UNTIL_CONFIDENT=PCT:MIN_STEPS``, ``TRACETUI_REFERENCES``: the earlier
    splits' intervals as JSON)."""
    rule = os.environ.get("TRACETUI_UNTIL_CONFIDENT")
    if not rule:
        return None
    from .analysis import StopRule

    pct, least = rule.split(":")
    refs = [tuple(r) for r in json.loads(os.environ.get("TRACETUI_REFERENCES") or "[]")]
    return StopRule(float(pct), int(least), refs)


def _cuda_ready() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def _physical_gpu(device) -> int:
    """NVML index of ``device``: CUDA_VISIBLE_DEVICES maps the process's indices."""
    idx = device.index or 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        parts = [p.strip() for p in visible.split(",")]
        if idx < len(parts) and parts[idx].isdigit():
            return int(parts[idx])
    return idx


def __getattr__(name: str):
    if name == "TraceCallback":
        cls = _make_trace_callback()
        globals()["TraceCallback"] = cls
        return cls
    raise AttributeError(name)


# ---------------------------------------------------------------------------------------------
# Listening side


class ListenerError(Exception):
    """The socket cannot be served (one line for the user)."""


def prepare_socket_path(path: str) -> None:
    """Make the folder (0700); replace a stale socket of a dead watcher, refuse a live one."""
    p = Path(path)
    parent = p.parent
    if not parent.exists():
        try:
            parent.mkdir(parents=True, mode=0o700)
        except OSError as exc:
            raise ListenerError(f"--socket: cannot create {parent} ({exc.strerror}); choose another path") from None
    st = parent.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o077 and parent != Path(tempfile.gettempdir()):
        os.chmod(parent, 0o700)
    if p.exists() or p.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(p))
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
                p.unlink(missing_ok=True)  # stale: its watcher is gone
            else:
                raise ListenerError(f"--socket: {p} exists and cannot be checked ({exc.strerror})") from None
        else:
            probe.close()
            raise ListenerError(f"--socket: another tracetui watch is listening on {p}; stop it or give another --socket")
        finally:
            probe.close()


class SocketListener:
    """Accepts attached scripts on a UNIX socket; valid events go to ``on_event``.

    One selector thread serves every connection with non-blocking reads: a client that floods,
    stalls mid-line or never sends cannot hold up the others. Dropped messages are counted by
    reason in :attr:`dropped`.
    """

    def __init__(self, path: str, on_event: Callable[[dict], None]):
        self.path = path
        self.on_event = on_event
        self.dropped: dict[str, int] = {}
        self.accepted = 0
        self.connections = 0
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        prepare_socket_path(path)
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is born 0600
        try:
            self._srv.bind(path)
        except OSError as exc:
            raise ListenerError(f"--socket: cannot listen on {path} ({exc.strerror})") from None
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self._srv.listen(64)
        self._srv.setblocking(False)
        self._sel.register(self._srv, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="tracetui-listener", daemon=True)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def start(self) -> "SocketListener":
        self._thread.start()
        return self

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, _mask in self._sel.select(timeout=0.2):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.fileobj, key.data)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()
        self._sel.close()

    def _accept(self) -> None:
        try:
            conn, _ = self._srv.accept()
        except OSError:
            return
        conn.setblocking(False)
        self.connections += 1
        self._sel.register(conn, selectors.EVENT_READ, {"buf": bytearray(), "skipping": False})

    def _read(self, conn: socket.socket, state: dict) -> None:
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            if state["buf"] and not state["skipping"]:
                self._drop("unterminated line")
            self._sel.unregister(conn)
            conn.close()
            return
        buf = state["buf"]
        buf.extend(data)
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > _MAX_PENDING:
                    if not state["skipping"]:
                        self._drop("oversized line")
                    state["skipping"] = True
                    buf.clear()
                return
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            if state["skipping"]:  # the tail of an oversized line
                state["skipping"] = False
                continue
            self._handle(line)

    def _handle(self, line: bytes) -> None:
        if len(line) > MAX_LINE:
            self._drop("oversized line")
            return
        if not line.strip():
            return
        event, why = parse_line(line)
        if event is None:
            self._drop("invalid JSON" if why == "not JSON" else "schema mismatch")
            return
        self.accepted += 1
        self.on_event(event)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        try:
            self._srv.close()
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def describe_drops(self) -> str:
        if not self.dropped:
            return ""
        return "dropped " + ", ".join(f"{n} {r}" for r, n in sorted(self.dropped.items()))


__all__ = ["TraceCallback", "SocketListener", "SocketSink", "default_socket_path", "ListenerError"]
