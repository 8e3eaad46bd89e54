"""The package's shape: no import circle (imports inside functions counted too), and the entry
point answers --help without the heavy libraries."""

import ast
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


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join((here[: len(here) - node.level + 1] if node.level else [])
                            + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def test_no_import_circle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["tracetui.cli"] and graph["tracetui.runner.sweep"]  # the reading sees imports
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


def test_help_imports_nothing_heavy():
    code = ("import sys, contextlib, io\n"
            "from tracetui.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft', 'textual') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
