"""A fork server kept between commands (Linux): the second and later tracetui commands of a
session skip the libraries' imports (10-13 s on an H200 host, issue #15).

The first command starts the server as a process of its own session, detached from the
terminal; it imports :data:`tracetui.runner.lifetime.PRELOAD` as the per-command server does,
then forks one trial per request and sends each one's pid and exit status back, as
multiprocessing's own fork server does. It ends once no command has asked anything of it for
``TRACETUI_KEEP_SERVER`` seconds (default :data:`DEFAULT_KEEP_S`) with no trial of its alive.

Nothing a server imported may differ from what the command would import: a server serves only
commands with the same *key* (:func:`server_key`): the interpreter and its flags, the working
directory, ``sys.path`` and the packages installed on it (their names and versions: an install or
an upgrade changes them), tracetui's own source files, and the environment but for variables that only say where a
shell runs (:data:`VOLATILE`). Any other command starts a server of its own. A forked trial
then takes the command's own environment, working directory and standard output and error,
so it runs as it would have forked from a server of this command.

A trial dies with the command that asked for it, however it dies (a thread waits on the
command's end of the trial's data pipe: :func:`watch_the_command`), and with its server (its
parent-death signal, as before). The server's socket lies in a directory only this user can
open (:func:`server_dir`); the server refuses a request from another user.

``TRACETUI_KEEP_SERVER=0`` keeps none: each command starts and ends its own server, as before."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, spawn
from multiprocessing import util as mp_util
from multiprocessing.context import reduction, set_spawning_popen
from pathlib import Path

#: seconds a kept server waits for the next command; 0: none kept
KEEP_ENV = "TRACETUI_KEEP_SERVER"
DEFAULT_KEEP_S = 600.0
#: where the servers' sockets lie (default: $XDG_RUNTIME_DIR/tracetui, or /tmp/tracetui-UID)
DIR_ENV = "TRACETUI_SERVER_DIR"
#: variables that differ from one shell or terminal to the next and that no library reads as it
#: is imported: a server started from one serves commands that differ in them
VOLATILE = frozenset({
    "_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES", "TERM", "COLORTERM", "TERM_PROGRAM",
    "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "TMUX", "TMUX_PANE", "STY", "WINDOW", "WINDOWID",
    "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "XDG_SESSION_ID", "DISPLAY",
    "PS1", "PROMPT_COMMAND", "TRACETUI_OWNER_PID", KEEP_ENV, DIR_ENV, "TRACETUI_USER_NVML_CHECK",
    "PYTORCH_NVML_BASED_CUDA_CHECK"})
_LEN = struct.Struct("q")  # what multiprocessing's fork server sends: pids, exit statuses
_MAX_FDS = 256
#: set in a trial forked from a kept server
IN_KEPT_TRIAL = False


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (exited, or a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def reattach() -> None:
    """Find or start a server again (:func:`tracetui.runner.lifetime._ensure_server`, which sets
    the environment a server starts in; set by it, which imports this module)."""


def keep_seconds() -> float:
    """``TRACETUI_KEEP_SERVER``: how long a kept server waits (0: none); a bad value is refused
    with one line."""
    raw = os.environ.get(KEEP_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_KEEP_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        from ..config import ConfigError

        raise ConfigError(KEEP_ENV, f"{raw!r} is not a number of seconds",
                          f"give how long a fork server waits for the next command (0: none kept; "
                          f"default {DEFAULT_KEEP_S:.0f})")
    return value


def server_dir() -> Path | None:
    """This user's directory for kept servers, made private if new; None (keep no server) where
    it is not this user's alone, since anyone who can reach a server's socket could run code as
    this user."""
    chosen = os.environ.get(DIR_ENV)
    if chosen:
        path = Path(chosen)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "tracetui"
    else:
        path = Path("/tmp") / f"tracetui-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def _tracetui_sources() -> list:
    root = Path(__file__).resolve().parent.parent
    out = []
    for path in sorted(root.rglob("*.py")):
        with contextlib.suppress(OSError):
            st = path.stat()
            out.append((str(path.relative_to(root)), st.st_mtime_ns, st.st_size))
    return out


def server_key(preload: list[str], env: dict | None = None) -> str:
    """What a server's imports depend on, hashed (see the module's note)."""
    env = dict(os.environ if env is None else env)
    installed = []  # what is installed where imports look (an install or an upgrade renames these)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            names = []
        installed.append((entry, sorted(n for n in names if n.endswith((".dist-info", ".egg-info", ".pth")))))
    what = {"executable": sys.executable, "version": sys.version, "flags": mp_util._args_from_interpreter_flags(),  # noqa: SLF001
            "cwd": os.getcwd(), "path": installed, "tracetui": _tracetui_sources(), "preload": preload,
            "env": sorted((k, v) for k, v in env.items() if k not in VOLATILE)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


# ---- the command's side -----------------------------------------------------------------------

class KeptServer:
    """A kept server this command uses: its socket, its pid, and whether this command started it."""

    def __init__(self, address: str, pid: int, started: bool, keep_s: float = DEFAULT_KEEP_S):
        self.address, self.pid, self.started, self.keep_s = address, pid, started, keep_s

    def alive(self) -> bool:
        return not process_gone(self.pid)

    def connect(self, fds: list[int]) -> tuple[int, int]:
        """Ask for a trial (multiprocessing's ``connect_to_new_process``, to this server): the
        read end of its status pipe (its pid, then its exit status) and the write end of its
        data pipe."""
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(self.address)
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            try:
                reduction.sendfds(client, [child_r, child_w, resource_tracker.getfd(), 1, 2, *fds])
                return parent_r, parent_w
            except BaseException:
                os.close(parent_r)
                os.close(parent_w)
                raise
            finally:
                os.close(child_r)
                os.close(child_w)


#: the kept server this process uses, once it has one
current: KeptServer | None = None


def _ping(address: str) -> bool:
    """Whether a server listens at ``address``; the connection counts as a request (its wait
    for the next command starts again)."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(address)
        except OSError:
            return False
    return True


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def attach(preload: list[str], server_env: dict, keep_s: float) -> KeptServer | None:
    """The kept server for this command: a running one with its key, else one started now
    (``server_env``: its environment). None where none can be kept here."""
    global current
    import fcntl

    where = server_dir()
    if where is None:
        return None
    key = server_key(preload)
    sock, pidfile = where / f"{key}.sock", where / f"{key}.pid"
    with open(where / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one command at a time finds or starts it
        pid = _read_pid(pidfile)
        if pid and not process_gone(pid) and _ping(str(sock)):
            current = KeptServer(str(sock), pid, started=False, keep_s=keep_s)
            return current
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(sock))
            os.chmod(sock, 0o600)
            listener.listen(64)
            log = open(where / f"{key}.log", "w")
            try:
                proc = subprocess.Popen(
                    [sys.executable, *mp_util._args_from_interpreter_flags(), "-c",  # noqa: SLF001
                     "from tracetui.runner.kept import serve; serve()", str(listener.fileno()), str(keep_s),
                     json.dumps(preload), str(sock)],
                    pass_fds=[listener.fileno()], env=server_env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
            finally:
                log.close()
        tmp = pidfile.with_suffix(".pid.new")
        tmp.write_text(f"{proc.pid}\n")
        os.replace(tmp, pidfile)
        _reaped_later(proc)
        current = KeptServer(str(sock), proc.pid, started=True, keep_s=keep_s)
        return current


_started: list = []


def _reaped_later(proc) -> None:
    """The server is this process's child until this process ends: keep its handle, so that
    subprocess reaps it if it ends first (no zombie left)."""
    _started.append(proc)
    _started[:] = [p for p in _started if p.poll() is None]


def started_note() -> str:
    """For the command that started the kept server, at its end: one line that it stays, for how
    long, and how to keep none (a process of tracetui's left running should say so once)."""
    if current is None or not current.started or not current.alive():
        return ""
    return (f"the fork server (pid {current.pid}) stays for the next command, until {current.keep_s:.0f} s pass "
            f"without one; TRACETUI_KEEP_SERVER=0 keeps none")


def forget() -> None:
    """This process uses no kept server from now on (a sweep later in the process finds one again)."""
    global current
    current = None


# ---- the trial's side -------------------------------------------------------------------------

def watch_the_command() -> None:
    """In a trial forked from a kept server: die as soon as the command that asked for it has
    gone. The command holds the write end of the trial's data pipe while it lives (the trial
    keeps a copy of the read end: multiprocessing's parent sentinel), so the read end reaches
    its end of file then, whatever ended the command."""
    from multiprocessing import parent_process
    from multiprocessing.connection import wait

    parent = parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="tracetui-command-watch", daemon=True).start()


# ---- the server -------------------------------------------------------------------------------

def _read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = os.read(fd, n - len(data))
        if not got:
            raise EOFError("the command went before it sent the trial")
        data += got
    return data


def _serve_one(child_r: int, rt_fd: int, out_fd: int, err_fd: int, fds: list[int]) -> int:
    """In the forked trial: the command's standard output and error, environment and
    resource tracker; then multiprocessing's own start of a child (its preparation data: the
    command's ``sys.path`` and working directory; then the process object)."""
    global IN_KEPT_TRIAL
    from multiprocessing import resource_tracker

    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    (size,) = _LEN.unpack(_read_exactly(child_r, _LEN.size))
    env = pickle.loads(_read_exactly(child_r, size))
    os.environ.clear()
    os.environ.update(env)
    IN_KEPT_TRIAL = True
    server = forkserver._forkserver  # noqa: SLF001 - what multiprocessing's own server sets in a child
    server._forkserver_alive_fd = None
    server._inherited_fds = fds
    resource_tracker._resource_tracker._fd = rt_fd  # noqa: SLF001
    return spawn._main(child_r, os.dup(child_r))  # noqa: SLF001


def serve() -> None:
    """The kept server's main (its arguments: the listening socket's fd, the seconds to wait
    for the next command, the modules to import, its socket's path)."""
    listener_fd, keep_s, preload, address = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # (a new session: only a sender that means it)
    for name in preload:
        try:
            __import__(name)
        except ImportError:
            pass
    _Server(socket.socket(fileno=listener_fd), keep_s, address).loop()


class _Server:
    def __init__(self, listener: socket.socket, keep_s: float, address: str):
        self.listener, self.keep_s, self.address = listener, keep_s, address
        self.inode = os.stat(address).st_ino
        self.children: dict[int, int] = {}  # pid -> the write end of its status pipe
        self.last = time.monotonic()
        self.sig_r, self.sig_w = os.pipe()
        for fd in (self.sig_r, self.sig_w):
            os.set_blocking(fd, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.sig_w)

    def loop(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self.listener, selectors.EVENT_READ)
            sel.register(self.sig_r, selectors.EVENT_READ)
            while True:
                wait = None if self.children else max(0.0, self.keep_s - (time.monotonic() - self.last))
                # (at least every 5 s: whether its socket is still its own)
                ready = {key.fileobj for key, _ in sel.select(min(wait, 5.0) if wait is not None else 5.0)}
                if self.sig_r in ready:
                    self._reap()
                if self.listener in ready:
                    self._accept(sel)
                    continue
                if not self._mine():
                    return  # its socket was removed or taken over: no command can reach it
                if not self.children and time.monotonic() - self.last >= self.keep_s and self._end():
                    return

    def _mine(self) -> bool:
        try:
            return os.stat(self.address).st_ino == self.inode
        except OSError:
            return False

    def _end(self) -> bool:
        """Leave, unless a command is finding it now (it holds the lock and has pinged)."""
        import fcntl

        base = self.address[: -len(".sock")]
        with open(base + ".lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                time.sleep(0.05)
                return False
            import select

            if select.select([self.listener], [], [], 0)[0]:
                return False  # a request came meanwhile
            if self._mine():
                for path in (self.address, base + ".pid", base + ".log"):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
        return True

    def _reap(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.sig_r, 65536)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = self.children.pop(pid, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.write(fd, _LEN.pack(os.waitstatus_to_exitcode(status)))
                os.close(fd)
                self.last = time.monotonic()

    def _accept(self, sel) -> None:
        self.last = time.monotonic()
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            if uid != os.getuid():
                return
            try:
                fds = reduction.recvfds(conn, _MAX_FDS + 1)
            except (EOFError, OSError, RuntimeError):
                return  # a ping: a command finding this server
        if len(fds) < 5:
            for fd in fds:
                os.close(fd)
            return
        child_r, child_w, rt_fd, out_fd, err_fd, *inherited = fds
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                sel.close()
                self.listener.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (self.sig_r, self.sig_w, child_w, *self.children.values()):
                    os.close(fd)
                code = _serve_one(child_r, rt_fd, out_fd, err_fd, inherited)
            except BaseException:  # noqa: BLE001 - a trial's failure is its own: into its stderr
                with contextlib.suppress(BaseException):
                    sys.excepthook(*sys.exc_info())
                    sys.stderr.flush()
            finally:
                os._exit(code)
        try:
            os.write(child_w, _LEN.pack(pid))
        except OSError:
            pass
        self.children[pid] = child_w
        for fd in (child_r, rt_fd, out_fd, err_fd, *inherited):
            os.close(fd)


# ---- the context trials start in --------------------------------------------------------------

class _Popen(popen_forkserver.Popen):
    """A trial forked by :data:`current` (multiprocessing's fork-server start, asked of it), or by
    this command's own fork server where none could be kept."""

    def _launch(self, process_obj):
        server = current
        if server is None:
            return super()._launch(process_obj)
        prep = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        try:
            self.sentinel, w = server.connect(self._fds)
        except OSError:  # gone since the last look (its socket removed, the server killed): once more
            forget()
            reattach()
            if current is None:
                return super()._launch(process_obj)
            self.sentinel, w = current.connect(self._fds)
        keep = os.dup(w)  # the trial's sign that this command lives (watch_the_command)
        self.finalizer = mp_util.Finalize(self, mp_util.close_fds, (keep, self.sentinel))
        env = pickle.dumps(dict(os.environ))
        with open(w, "wb", closefd=True) as fh:
            fh.write(_LEN.pack(len(env)) + env)
            fh.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class KeptProcess(mp_context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


class KeptContext(mp_context.ForkServerContext):
    """The multiprocessing context whose processes :class:`_Popen` starts."""
    Process = KeptProcess


def context() -> KeptContext:
    return _CONTEXT


_CONTEXT = KeptContext()
