"""The package's shape: no import circle (imports inside functions counted too), and the entry
point answers --help without the heavy libraries."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "tracetui"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


@functools.cache  # (the tests below read each file; none changes a tree)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _import_nodes(path: Path, where: str = "anywhere") -> list[ast.stmt]:
    """The import statements of a file: ``anywhere``, at its ``top`` only, or ``inside`` functions."""
    tree = _tree(path)
    if where == "top":
        return [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    nested = [n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)]
    return [n for n in (nested if where == "inside" else ast.walk(tree)) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _targets(name: str, path: Path, node: ast.stmt, modules: dict[str, Path]) -> set[str]:
    """What one import statement of module ``name`` imports (the package's modules by name, other
    libraries by their top name)."""
    if isinstance(node, ast.Import):
        return {alias.name if alias.name in modules else alias.name.split(".")[0] for alias in node.names}
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = ".".join((here[: len(here) - node.level + 1] if node.level else []) + ([node.module] if node.module else []))
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base if node.level or base in modules
            else base.split(".")[0] for a in node.names}


def _imports(name: str, path: Path, modules: dict[str, Path], where: str = "anywhere") -> set[str]:
    """The package's modules that ``name`` imports (``where``: see :func:`_import_nodes`)."""
    found = set().union(*(_targets(name, path, n, modules) for n in _import_nodes(path, where)))
    return {m for m in found if m in modules and m != name}


def test_no_import_circle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["tracetui.cli.main"] and graph["tracetui.runner.sweep"]  # the reading sees imports
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            assert state.get(dep) != 1, "import circle: " + " -> ".join(path[path.index(dep):] + [node, dep])
            if dep not in state:
                walk(dep, path + [node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [])


#: The layers, lowest first, along the data flow; a module's layer is its folder: what the user
#: declares (the domain core), the events every part speaks, the analysis of events, the probe
#: that measures in a trial, the planners that choose the next trial, the callbacks and injection
#: that carry events out of a user's process, the launch dialects (how a trial becomes a command
#: or a config file: pure, no processes), the runner that starts and watches trials, the outputs,
#: the session shared by the entry points and the monitor, the monitor, and the entry points. A
#: module may import its own folder and the folders below it, never one above (at its top or
#: inside a function).
LAYERS = ("core", "events", "analysis", "probe", "planning", "callbacks", "inject", "launch", "runner", "outputs",
          "session", "tui", "cli")
#: the package's own files outside the folders, in the entry points' layer
TOP = {"tracetui": "the package (its lazy ``TraceCallback``)", "tracetui.__main__": "``python -m tracetui``"}


def _layer(module: str) -> int:
    if module in TOP:
        return LAYERS.index("cli")
    folder = module.split(".")[1]
    assert folder in LAYERS, f"{module} is in no layer's folder: move it into one of {LAYERS}"
    return LAYERS.index(folder)


def test_every_module_lives_in_a_layer_folder():
    loose = [m for m in _modules() if m.count(".") == 1 and m not in TOP and m.split(".")[1] not in LAYERS]
    assert not loose, f"modules outside the layer folders: {loose}"


def test_imports_go_down_the_layers_only():
    modules = _modules()
    wrong = []
    for name, path in sorted(modules.items()):
        for dep in sorted(_imports(name, path, modules)):
            if _layer(dep) > _layer(name):
                wrong.append(f"{name} imports {dep}, a folder above its own")
    assert not wrong, "\n".join(wrong)


def test_help_imports_nothing_heavy():
    code = ("import sys, contextlib, io\n"
            "from tracetui.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft', 'textual') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


#: the libraries whose import takes seconds (or draws on the terminal): a module of the package
#: that imports one at its top (itself or through the package's modules it imports there) may be
#: imported inside a function, so that what does not need it (``--help``, a headless command,
#: the fork server's start) stays light
HEAVY = ("torch", "transformers", "trl", "peft", "datasets", "textual", "ray")
#: imports of the package's own modules inside functions for another reason, each said
LAZY_FOR_A_REASON = {
    # ``tracetui.TraceCallback`` is built on first use: its class derives from transformers'
    ("tracetui", "tracetui.callbacks.attach"),
    # in the user's interpreter from its start: tracetui comes in only once transformers does
    ("tracetui.inject.sitecustomize", "tracetui.callbacks.attach"),
    ("tracetui.inject.sitecustomize", "tracetui.probe.apply"),
}


def test_imports_inside_functions_are_of_heavy_modules_only():
    modules = _modules()
    heavy: dict[str, bool] = {}

    def is_heavy(name: str) -> bool:
        if name not in heavy:
            heavy[name] = False  # (while it is being looked at: no circle comes back to it)
            path = modules[name]
            top = set().union(*(_targets(name, path, n, modules) for n in _import_nodes(path, "top")))
            heavy[name] = any(t in HEAVY for t in top) or any(is_heavy(m) for m in top if m in modules and m != name)
        return heavy[name]

    wrong = [f"{name} imports {dep} inside a function: import it at its top"
             for name, path in sorted(modules.items()) for dep in sorted(_imports(name, path, modules, "inside"))
             if not is_heavy(dep) and (name, dep) not in LAZY_FOR_A_REASON]
    assert not wrong, "\n".join(wrong)


def test_a_headless_command_imports_no_textual(tmp_path):
    """``tracetui run --export`` of a command: the monitor's library is never imported."""
    code = ("import sys\nfrom tracetui.cli.main import main\n"
            f"rc = main(['run', '--export', 'csv', '-o', {str(tmp_path / 'o.csv')!r}, '--runs-dir', "
            f"{str(tmp_path / 'runs')!r}, '--', sys.executable, '-c', 'pass'])\n"
            "print(rc, 'textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False"], (out.stdout, out.stderr[-2000:])


def test_nvml_is_opened_in_one_module():
    """GPU facts come from NVML through tracetui/core/nvml.py alone."""
    modules = _modules()
    openers = sorted(name for name, path in modules.items()
                     if any("pynvml" in _targets(name, path, n, modules) for n in _import_nodes(path)))
    assert openers == ["tracetui.core.nvml"], openers


#: the most lines a module and a function may have; a function may go over only with a comment
#: ``# long: why`` on its ``def`` line
MODULE_LINES, FUNCTION_LINES = 500, 60


def test_modules_and_functions_stay_short():
    long = []
    for name, path in sorted(_modules().items()):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MODULE_LINES:
            long.append(f"{name}: {text.count(chr(10))} lines (split it by job)")
        lines = text.splitlines()
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > FUNCTION_LINES and "# long:" not in lines[node.lineno - 1]:
                    long.append(f"{name}.{node.name}: {size} lines (split it into named steps)")
    assert not long, "\n".join(long)
