import contextlib
import csv
import gc
import importlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest

# The tests never download: offline mode for the hub and datasets, set before either is imported
# (both read it once, at import). A hub id then fails at once instead of retrying a network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Torch's OpenMP threads (one per core) spin while they wait for each other. On a shared two-core
# machine (a sweep's worker beside its parent or the monitor, or beside other jobs) a tiny model's
# steps then take several times as long: 24 steps of the example script took 74 s against 14 s
# with the threads sleeping while they wait instead. The same threads, the same work; set here so
# that every process a test starts inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parent.parent


# The collector and this session's heap: torch, transformers, TRL, datasets and Textual are
# millions of objects, and every full collection walked them all (34 of them, 19 s of a run of
# the quick tests on a 2-core machine, five of those pytest's own as it ends). What has survived
# a test is collected once (its garbage, and what that says) and then frozen out of the
# collector's reach (gc.freeze, as tracetui's fork server does with its imports): a later
# collection walks what later tests made. Frozen objects are still freed when nothing refers to
# them; only a reference cycle among them that a later test lets go of stays.
def _collect_and_freeze() -> None:
    gc.collect()
    gc.freeze()


def pytest_collection_finish(session):
    _collect_and_freeze()


def pytest_configure(config):
    """A pytest-xdist worker starts with SIGINT ignored, and so would every process it starts, as
    does a pytest started in the background by a shell without job control (``pytest -n 0 &``, a
    CI runner's): a test of Ctrl-C (sent to itself, to a sweep, to a script) needs it as a terminal
    delivers it (with it ignored, the test of a check that waits on a silent hub waited forever)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_terminal_summary(terminalreporter):
    """The machine's speed beside the suite's time: the CPU time a fresh interpreter takes to
    import torch, measured once the session's own processes are gone. Most of the suite's time is
    such imports (every sweep's fork server, every script, every torchrun rank), so its time
    scales with this figure: on the project's 2-core machine 1.4 s when the suite took 230-245 s,
    2.1-2.3 s when the same suite took 318 s an hour later, nothing else running."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not sys.platform.startswith("linux"):
        return
    ran = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, ())]
    if not any("slow" in getattr(r, "keywords", {}) for r in ran):  # (a quick run: no need to know)
        return
    proc = subprocess.Popen([sys.executable, "-c", "import torch"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode == 0:
        terminalreporter.write_line(f"this machine: a fresh interpreter imported torch in "
                                    f"{usage.ru_utime + usage.ru_stime:.2f} s of CPU time (the suite's "
                                    "time scales with it: tests/conftest.py)")


#: the groups of the session (:func:`pytest_collection_modifyitems`): the quick tests (and the
#: slow ones that start no training process and time nothing, ``anywhere``); the slow ones; the
#: tests that read what the scenarios of real processes saw (:func:`scenarios`); the ``quiet``
#: ones, that check what a comparison of timings concluded
QUICK, SLOW, READERS, QUIET = range(4)
#: the CPU cores other processes used as the first quiet test started (:func:`_until_quiet`)
_QUIET: list[float] = []


#: whether this session is split over pytest-xdist workers (the project's default)
_XDIST = bool(os.environ.get("PYTEST_XDIST_WORKER"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # the scenarios start with the first reader (under xdist, in the worker that runs the readers),
    # in one process with the first slow test, to run beside the slow tests
    if _group(item) == READERS or (_group(item) == SLOW and not _XDIST):
        _start_scenarios(item.session)
    elif _group(item) == QUIET and not _QUIET:
        _QUIET.append(_until_quiet())
    yield
    _collect_and_freeze()


def _reads_scenarios(item) -> bool:
    return "scenario_results" in getattr(item, "fixturenames", ())


def _group(item) -> int:
    if _reads_scenarios(item):
        return READERS
    if item.get_closest_marker("slow") is None or item.get_closest_marker("anywhere") is not None:
        return QUICK
    timed = {"tiny_sweep", "until_confident_sweep"} & set(item.fixturenames)  # (their verdicts, their clocks)
    return QUIET if item.get_closest_marker("quiet") is not None or timed else SLOW


def _until_quiet(most_s: float = 120.0) -> float:
    """Before the first ``quiet`` test: wait until processes outside this one (another pytest-xdist
    worker's tests, what a scenario left) use under a third of a core over a second, as tracetui
    itself measures it (:mod:`tracetui.probe.quiet`), for at most ``most_s`` (then a warning in the
    session's summary says the quiet tests started on a busy machine); the cores they used."""
    from tracetui.probe import quiet

    end = time.monotonic() + most_s
    while True:
        a = quiet.snapshot(root=os.getpid())
        time.sleep(1.0)
        other = quiet.between(a, quiet.snapshot(root=os.getpid())).get("other_cpu_cores", 0.0)
        if other < 0.33:
            return other
        if time.monotonic() > end:
            warnings.warn(f"the quiet tests start on a busy machine: other processes used {other:.2f} CPU cores "
                          f"after {most_s:.0f} s of waiting")
            return other


@pytest.hookimpl(tryfirst=True)  # (before pytest-xdist reads the groups)
def pytest_collection_modifyitems(session, config, items):
    """The order of the session (a stable sort: within each group the files' own order).

    In one process: the quick tests; the slow ones, with the scenarios of real processes in the
    background from the first of them on (:func:`_start_scenarios`); the tests that read what
    those saw; last the ``quiet`` ones, on a machine nothing else of the session loads
    (:func:`_until_quiet`).

    Under pytest-xdist (``--dist loadgroup --no-loadscope-reorder``, the project's default) xdist
    hands out the work in this order, each next piece to a worker that is nearly out of it: first
    the readers, one xdist group: the worker that takes them runs the scenarios and waits for
    them; the other workers take the quick tests, then the slow ones, one by one (and the first,
    once its scenarios are done, what is left of them); last the ``quiet`` tests, one group, to
    the first worker that asks, where they wait until the others have ended their last tests.
    Tests that share a fixture of a module or of the session go together (:func:`_shared_fixture`)."""
    order = (READERS, QUICK, SLOW, QUIET) if _XDIST else (QUICK, SLOW, READERS, QUIET)
    items.sort(key=lambda item: order.index(_group(item)))
    for item in items:
        if _group(item) == READERS:
            item.add_marker(pytest.mark.xdist_group("scenarios"))
        elif _group(item) == QUIET:
            item.add_marker(pytest.mark.xdist_group("quiet"))
        elif shared := _shared_fixture(item):
            item.add_marker(pytest.mark.xdist_group(shared))


def _shared_fixture(item) -> str | None:
    """The fixture of this suite that ``item`` shares with other tests, built once per module (a
    monitor driven once for several tests) or once per session (a real sweep), if any: the tests
    that share it go to one worker, which builds it once for all of them."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    ours = [d for ds in defs.values() for d in ds if d.func.__module__.startswith("tests.")]
    session = sorted(d.argname for d in ours if d.scope == "session")
    if session:
        return f"session-fixture:{session[0]}"
    return f"module-fixture:{item.module.__name__}" if any(d.scope == "module" for d in ours) else None


#: a real headless sweep of the tiny preset on this 2-core CPU, recorded (the shape of
#: :func:`tiny_sweep`: --splits 1x4,2x2,4x1 --steps 8 --warmup 2 --seq-len 64), for the replays
#: that need a CPU machine's log beside the H200's and no training of their own
CPU_TINY = ROOT / "tests" / "data" / "cpu_tiny_sweep.jsonl"


def run_cli(*args, cwd=None, timeout=600, env=None):
    """Run ``python -m tracetui ARGS`` as a real subprocess. A sweep runs one repeat unless the
    test asks for more (the default of two doubles every sweep's time; the tests that are about
    repeats say so)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    args = cli_args(args)
    return subprocess.run([sys.executable, "-m", "tracetui", *args], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def cli_args(args) -> list[str]:
    args = [str(a) for a in args]
    if "--repeats" not in args and not (args and args[0] in ("show", "watch", "run")):
        cut = args.index("--") if "--" in args else len(args)
        args = args[:cut] + ["--repeats", "1"] + args[cut:]
    return args


def run_main(*args, cwd=None, env=None):
    """``tracetui ARGS`` called in this process (``tracetui.cli.main.main``, what ``python -m
    tracetui`` runs), with what it writes to stdout and stderr captured, in ``cwd`` and with
    ``env`` added to the environment for the call; returns what :func:`run_cli` returns,
    ``returncode`` being what ``main`` returned (the exit status).
    For the tests whose subject is a sweep's outputs rather than the process around it: the
    sweep's trials are still real processes, forked from this process's fork server, and the
    command saves the seconds a fresh interpreter and its own fork server take to import torch,
    transformers and TRL. The tests about signals, exit by signal, a killed tracetui or its own
    fork server keep :func:`run_cli`."""
    from tracetui.cli.main import main

    args = cli_args(args)
    out, err = io.StringIO(), io.StringIO()
    old, before = os.getcwd(), {k: os.environ.get(k) for k in env or {}}
    os.chdir(cwd or ROOT)
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    finally:
        os.chdir(old)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["tracetui", *args], code, out.getvalue(), err.getvalue())


def busy_marked(text: str, rows) -> bool:
    """Whether ``text`` (what a command said, a verdict) carries the busy mark exactly when one of
    ``rows`` (summary rows: the CSV's, the JSON's or :func:`tracetui.analysis.summarise`'s) was
    measured on a busy machine. For the tests that ask for a verdict with ``--allow-busy``: the
    claim is asserted on its own, this says it is marked as measured busy when it was (and only
    then)."""
    busy = any(r.get("busy") for r in rows)
    return ("[measured on a busy machine: " in text) == busy


@contextlib.contextmanager
def tmpfs(folder: Path, size: str):
    """A real small file system of ``size`` (``16k``) mounted on ``folder`` (made), unmounted after;
    the test is skipped where it cannot be mounted (not root)."""
    folder.mkdir(exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def full_disk(tmp_path):
    """A real file system with no space left (a 64 KiB tmpfs, filled)."""
    with tmpfs(tmp_path / "full", "64k") as folder:
        fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x" * 4096)
        os.close(fd)
        yield folder


@pytest.fixture(autouse=True)
def _fork_server_address_kept():
    """A test that removes the address of this worker's fork server (multiprocessing's temporary
    folder, say, by running its finalizers here) fails itself, rather than every fork-server test
    that this worker runs after it ("could not start its process (No such file or directory)")."""
    from multiprocessing import forkserver

    server = forkserver._forkserver  # noqa: SLF001 - multiprocessing's one server of this process
    before = server._forkserver_address  # noqa: SLF001 - no public accessor
    before = before if before and os.path.exists(before) else None  # (gone already: not this test's doing)
    yield
    if before and server._forkserver_address == before:  # noqa: SLF001 - (the same server still)
        assert os.path.exists(before), f"this test removed the fork server's address {before}"


@pytest.fixture
def short_tmp():
    """A fresh folder with a short path, removed after the test: a $TMPDIR for tracetui's sockets
    (a socket path may have 107 bytes; a pytest-xdist worker's tmp_path leaves too few of them,
    and tracetui would put its sockets in /tmp instead)."""
    folder = Path(tempfile.mkdtemp(prefix="tt-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def wait_until(pred, timeout=120, interval=0.1):
    """Poll ``pred`` every ``interval`` seconds until it is true; fail after ``timeout`` seconds."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out")
        time.sleep(interval)


HOLD_IMPORT = textwrap.dedent("""
    import importlib.abc, os, sys, time

    class Hold(importlib.abc.MetaPathFinder):
        # the import of one module takes its time (as on a slow disk): held here, once this
        # process has said so in its mark (its pid)
        def find_spec(self, name, path, target=None):
            if name == os.environ["TRACETUI_TEST_HOLD"]:
                sys.meta_path.remove(self)
                mark = os.environ["TRACETUI_TEST_HOLD_MARK"]
                with open(mark + ".tmp", "w") as fh:
                    fh.write(str(os.getpid()))
                os.replace(mark + ".tmp", mark)
                end = time.monotonic() + 120
                while time.monotonic() < end:
                    time.sleep(0.05)
            return None

    if os.environ.get("TRACETUI_TEST_HOLD") and os.environ.get("TRACETUI_TEST_HOLD_IN", "") in " ".join(sys.argv):
        sys.meta_path.insert(0, Hold())
""")


def held_import(folder: Path, module: str, only: str = "") -> tuple[dict, Path]:
    """The environment under which a Python process holds its import of ``module`` for two
    minutes (only a process with ``only`` in its command line, if given), and the file that
    appears, with the process's pid in it, once one has got there: a fault to wait for, not
    a time to guess. (A ``sitecustomize`` on ``PYTHONPATH`` in ``folder``, before this tree.)"""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HOLD_IMPORT)
    mark = folder / "held"
    env = {"PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]), "TRACETUI_TEST_HOLD": module,
           "TRACETUI_TEST_HOLD_MARK": str(mark), "TRACETUI_TEST_HOLD_IN": only}
    return env, mark


async def pilot_until(pilot, predicate, timeout: float = 30.0) -> None:
    """:func:`wait_until` for a Textual app under test: let it run (``pilot.pause``) until
    ``predicate()`` holds; fail after ``timeout`` seconds."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.05)


#: a file each scenario's wall time is appended to, if set (``TT_SCENARIO_TIMES=/tmp/t.txt pytest
#: ...``): which scenarios are the long ones, to name in :func:`scenarios`'s ``first``
SCENARIO_TIMES = os.environ.get("TT_SCENARIO_TIMES")


def side_by_side(tmp_path_factory, scenarios: dict, most: int | None = None) -> dict:
    """Run each scenario (a function of a fresh folder), ``most`` at a time (all at once if None),
    in the order given, each in a thread, and return what each returned, or the exception it
    raised, by name (:func:`outcome` raises it in the test that reads it). For scenarios of real
    processes that spend their time starting up and waiting for each other (a sweep, then a
    signal to it): side by side they share the machine's two cores instead of queueing for one.
    Only for scenarios whose checks do not depend on how busy the machine is: no verdicts, no
    timings."""
    names = list(scenarios)
    folders = {name: tmp_path_factory.mktemp(f"side{i}") for i, name in enumerate(names)}
    results: dict = {}
    queue = list(reversed(names))
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                if not queue:
                    return
                name = queue.pop()
            t0 = time.monotonic()
            try:
                results[name] = scenarios[name](folders[name])
            except BaseException as exc:  # noqa: BLE001 - raised again by the test that reads it
                results[name] = exc
            _note_time(name, t0)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(most or len(names), len(names)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def in_turn(tmp_path_factory, table: dict) -> dict:
    """Run each of ``table``'s functions of a fresh folder in this process, one after another, and
    return what each returned, or the exception it raised, by name (:func:`outcome` raises it in
    the test that reads it): for sweeps run with :func:`run_main` (which needs the main thread)
    whose outputs several tests read."""
    results: dict = {}
    for i, (name, work) in enumerate(table.items()):
        t0 = time.monotonic()
        try:
            results[name] = work(tmp_path_factory.mktemp(f"turn{i}"))
        except Exception as exc:  # noqa: BLE001 - raised again by the test that reads it
            results[name] = exc
        _note_time(name, t0)
    return results


def _note_time(name, t0: float) -> None:
    if SCENARIO_TIMES:  # (appended whole: one write of one line, from whichever thread)
        with open(SCENARIO_TIMES, "a") as fh:
            fh.write(f"{time.monotonic() - t0:7.1f} s  {name}\n")


#: the scenarios of real processes of each test module that has some (see :func:`scenarios`)
_SCENARIOS: dict[str, dict] = {}
#: how many of them run at once: they start interpreters, fork servers and trials (each set a GB
#: or two of memory), and two cores are kept busy by a few
SCENARIOS_AT_ONCE = 6


def scenarios(module: str, table: dict, first=()) -> dict:
    """A test module's scenarios: functions of a fresh folder that start real processes (a sweep,
    a script, a watcher) and return what they saw, for its tests to check. Every module's that the
    session tests run side by side, :data:`SCENARIOS_AT_ONCE` at a time, those named in ``first``
    (the longest, longest first; :data:`SCENARIO_TIMES` says which) before the rest
    (:func:`scenario_results`): what one group of them leaves of the two cores, another's take,
    and the pool does not end on a long one started last. Only for scenarios whose checks do not
    depend on how busy the machine is."""
    _SCENARIOS[module] = {"first": [k for k in first], "table": table}
    return table


#: the background run of the scenarios (:func:`_start_scenarios`): its thread and what it returned
_POOL: dict = {}


def _start_scenarios(session) -> None:
    """Start, once, in a background thread, the scenarios of every module whose selected tests
    read them (:func:`scenario_results`), :data:`SCENARIOS_AT_ONCE` at a time, the ``first`` of
    each module before the rest: they then run beside the other tests (most of their time is
    spent starting processes and waiting for them: the other tests take what they leave of the
    two cores, and the other way round). Scenarios check nothing that depends on how busy the
    machine is; the ``quiet`` tests run once they are done."""
    if _POOL:
        return
    # The libraries that a scenario's in-process part and the tests beside it import, imported
    # here first: imported for the first time from two threads at once, a lazy module
    # (transformers') can fail one of them ("cannot import name 'TrainerCallback'").
    for name in ("tracetui.probe.callback", "trl"):  # (torch, transformers, PEFT; TRL)
        importlib.import_module(name)

    wanted = sorted({item.module.__name__ for item in session.items if _reads_scenarios(item)})
    registered = [(m, _SCENARIOS[m]) for m in wanted if m in _SCENARIOS]
    # the ``first`` of the modules taken in turns (each module's longest, then each one's next):
    # the longest start together, and the short ones fill the slots they leave at the end
    deepest = max((len(r["first"]) for _m, r in registered), default=0)
    order = [(m, r["first"][i]) for i in range(deepest) for m, r in registered if i < len(r["first"])]
    order += [(m, k) for m, r in registered for k in r["table"] if (m, k) not in order]
    tables = dict(registered)
    factory = session.config._tmp_path_factory  # (what the tmp_path_factory fixture returns)

    def run() -> None:
        _POOL["results"] = side_by_side(factory, {(m, k): tables[m]["table"][k] for m, k in order},
                                        most=SCENARIOS_AT_ONCE)

    _POOL["thread"] = threading.Thread(target=run, daemon=True, name="scenarios")
    _POOL["thread"].start()


@pytest.fixture(scope="session")
def scenario_results(request) -> dict:
    """What each scenario of every module under test returned, by module, then by name: run once
    (started with the first slow test, or here), for every selected test that reads them."""
    _start_scenarios(request.session)
    _POOL["thread"].join()
    by_module: dict = {}
    for (m, k), v in _POOL["results"].items():
        by_module.setdefault(m, {})[k] = v
    return by_module


def outcome(results: dict, name):
    """What scenario ``name`` of :func:`side_by_side` returned; the exception it raised, raised."""
    got = results[name]
    if isinstance(got, BaseException):
        raise got
    return got


def kill_left(*procs) -> None:
    """For a ``finally``: whichever of ``procs`` (``Popen`` objects, or None for one never
    started) still runs is killed, and reaped."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


#: what a trial holds before it builds anything (:func:`cpu_memory_limit`), once read
_DATA_BASE: dict = {}
_DATA_BASE_LOCK = threading.Lock()


def cpu_memory_limit(above_gib: float) -> float:
    """A ``--memory-limit`` for a CPU test, ``above_gib`` GiB above what a trial holds before it
    builds anything, as the limit counts it on the CPU (its data size, RLIMIT_DATA: the
    libraries' writable data, the data set library's memory arena), read once in a process
    forked from this process's fork server as trials are. That base is the build's, not the
    test's: torch's CUDA build holds about 0.53 GiB more than its CPU build, on a machine
    without a GPU too; above it, a test asks the same of every build."""
    from concurrent.futures import ProcessPoolExecutor

    from tracetui.probe.memory import data_peak_gib
    from tracetui.runner.lifetime import trial_context

    with _DATA_BASE_LOCK:
        if "gib" not in _DATA_BASE:
            with ProcessPoolExecutor(1, mp_context=trial_context()) as pool:
                _DATA_BASE["gib"] = pool.submit(data_peak_gib).result()
    return round(_DATA_BASE["gib"] + above_gib, 2)


# ---- a Ray cluster (tests/raycluster.py) ----

@pytest.fixture(scope="module")
def ray_cluster():
    """A real Ray cluster on this machine (Ray's own ``ray.cluster_utils.Cluster``): a head node and
    one more, one CPU each, started once for each module that asks (:mod:`tests.raycluster`). Its
    nodes' temporary folder (``TMPDIR`` of their processes) is a fresh one of its own, ``node_tmp``:
    what the sweeps' lanes leave there is theirs alone."""
    from ray.cluster_utils import Cluster

    from .raycluster import MARK

    os.environ[MARK] = uuid.uuid4().hex
    node_tmp = Path(tempfile.mkdtemp(prefix="tt-ray-", dir="/tmp"))  # (short: sockets are made there)
    for attempt in range(3):  # (Ray gives a node 30 s to register: on a loaded machine, not always enough)
        c = Cluster(initialize_head=False)
        try:
            c.add_node(num_cpus=1, include_dashboard=False, env_vars={"TMPDIR": str(node_tmp)})
            c.add_node(num_cpus=1, env_vars={"TMPDIR": str(node_tmp)})
            c.wait_for_nodes()
            break
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for it; started again, or re-raised
            c.shutdown()
            if attempt == 2 or "timed out during startup" not in str(exc):
                raise
    c.node_tmp = node_tmp
    yield c
    c.shutdown()
    os.environ.pop(MARK, None)
    shutil.rmtree(node_tmp, ignore_errors=True)


@pytest.fixture
def starts(monkeypatch) -> list[str]:
    """What a command started of the costly parts it may start once its settings pass: the fork
    server (:func:`tracetui.runner.lifetime.trial_context`, as the settings' loading asks for it)
    and a script sweep; each call recorded here instead, for the tests of what is refused before."""
    from tracetui.cli import commands
    from tracetui.session import loading

    started: list[str] = []
    monkeypatch.setattr(loading, "trial_context", lambda *a: started.append("fork server"))
    monkeypatch.setattr(commands, "ScriptSweep", lambda *a, **k: started.append("script sweep"))
    return started


@pytest.fixture
def fresh_lanes(monkeypatch):
    """Each run on the cluster a fresh process (``TRACETUI_START=spawn``, as ``--fresh``): the
    lanes start no fork server, which imports torch, transformers and TRL that the stand-in
    worker does not need. The forked lanes are the two-node sweep's and the script sweep's."""
    monkeypatch.setenv("TRACETUI_START", "spawn")


# ---- real sweeps shared by the tests that read them (each runs once a session, when first asked) ----

@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory):
    """One real headless sweep on the tiny preset (``tracetui --export csv``, called in this
    process: see :func:`run_main`), shared by the tests that read its outputs: three splits of
    effective batch 4, the default three warm-up steps (each next run gets a head start) and six
    measured."""
    d = tmp_path_factory.mktemp("sweep")
    out, steps = d / "out.csv", d / "steps.csv"
    proc = run_main("--export", "csv", "-o", out, "--steps-csv", steps, "--splits", "1x4,2x2,4x1",
                    "--steps", 9, "--warmup", 3, "--seq-len", 64, "--runs-dir", d / "runs")
    logs = list((d / "runs").glob("*/events.jsonl"))
    return dict(proc=proc, out=out, steps=steps, jsonl=logs[0] if logs else None, dir=d)


@pytest.fixture(scope="session")
def until_confident_sweep(tmp_path_factory):
    """One real headless sweep with ``--until-confident`` at an unreachable 0.01%: 4x1, the
    cheaper split, goes first and runs to its cap; 1x4, about twice as slow on a CPU at 64 tokens
    a row, stops once its rank is settled. Two warm-up steps: 1x4 gets a head start, and its
    references come with its turns. ``--allow-busy``: a verdict even on a busy machine.
    Shared by the stopping rule's tests and the head starts'.

    Measured busy (what other processes took, as the sweep's rows say), it runs once more, once
    the machine is quiet again (:func:`_until_quiet`): with a core's worth of load from outside
    the suite, 1x4's interval stays too wide to settle within the cap, and the rule it is here
    to show never gets to stop it."""
    steps, warmup = 20, 2
    for attempt in range(2):
        d = tmp_path_factory.mktemp("confident")
        out = d / "s.json"
        proc = run_main("--export", "json", "-o", out, "--splits", "1x4,4x1", "--steps", steps, "--warmup", warmup,
                        "--seq-len", 64, "--until-confident", 0.01, "--min-steps", 6, "--allow-busy",
                        "--runs-dir", d / "runs")
        busy = out.exists() and any(r.get("busy") for r in json.loads(out.read_text())["splits"])
        if not busy or attempt:
            break
        _until_quiet()
    return dict(proc=proc, out=out, runs=d / "runs", cap=steps - warmup)


@pytest.fixture(scope="session")
def cpu_oom_sweep(tmp_path_factory):
    """One real headless sweep where the big micro-batch runs out of memory: on the CPU
    --memory-limit caps each run's data size (RLIMIT_DATA), and 16x1 cannot allocate at 512
    tokens a row while 1x16 can (1.19 GiB above what a trial holds before it builds anything:
    2.6 GiB with torch's CPU build, where 1x16's peak read 1.6). Two warm-up steps: 1x16 starts
    beside 16x1 (a head start)."""
    d = tmp_path_factory.mktemp("oom")
    out = d / "s.json"
    limit = cpu_memory_limit(1.19)
    proc = run_main("--effective-batch", 16, "--splits", "16x1,1x16", "--steps", 3, "--warmup", 2, "--seq-len", 512,
                    "--memory-limit", limit, "--runs-dir", d / "runs", "--export", "json", "-o", out)
    return dict(proc=proc, out=out, runs=d / "runs")
