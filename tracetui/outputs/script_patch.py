"""Where a swept script sets its own trainer arguments, and the change to the recommended values
as a unified diff (``--emit-patch FILE``).

A script that builds ``SFTConfig(per_device_train_batch_size=1, ...)`` from literals ignores the
flags a sweep could give it; the sweep applied each run's values inside its trainer
(:mod:`tracetui.probe.apply`), which also recorded where the script built the arguments its
trainer received (``args_origin``: file and line) and which of the script's values it replaced
(``applied``). The handoff then reads that file with :mod:`ast`:

* a value written as a literal keyword of the constructor call (``per_device_train_batch_size=1``)
  is replaced in place, every other byte of the file kept;
* a field the call does not pass at all is added to it (``gradient_accumulation_steps=1,``), when
  the call takes no ``**kwargs`` and is the arguments' constructor;
* a literal assigned to the field afterwards (``args.per_device_train_batch_size = 2``) is
  replaced too: it is what the trainer would get;
* a value from a variable, an expression, ``**cfg`` or a parser is not guessed at: the closing
  lines name the call and say where to change it.

Pure: reads source text only, imports nothing heavy.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

#: the fields of the split: without ``args_origin``, a call passing the first is the constructor
SPLIT_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps")
#: applied fields that say where a run writes, never part of a recommendation
WHERE_FIELDS = ("output_dir",)
#: ``applied[...]['how']`` of a value the script's command line gave (tracetui.probe.apply.GIVEN)
GIVEN = "command line"
#: model arguments among the planned values: passed where the script loads its model
MODEL_FIELDS = ("attn_implementation",)

# How a field is set in the source (Change.kind)
LITERAL = "literal"  # a literal keyword of the call: replaced
ADDED = "added"  # not passed to the call: added to it
ASSIGNED = "assigned"  # a literal assigned to the field later (args.FIELD = 2): replaced
EXPRESSION = "expression"  # a keyword (or an assignment) from a variable or an expression
KWARGS = "kwargs"  # not a keyword of the call, which takes **cfg: where cfg comes from
ELSEWHERE = "elsewhere"  # no call to read (a parser built it; the source cannot be read)


@dataclass(frozen=True)
class Edit:
    """One replacement in a file's text: characters ``start:end`` become ``text``."""
    file: str
    start: int
    end: int
    text: str


@dataclass
class Change:
    """How one field is set in the source, and what the handoff does about it."""
    field: str
    #: the recommended value
    value: Any
    kind: str
    file: str = ""
    line: int | None = None
    #: the source text there now (a literal, an expression, ``**cfg``)
    old: str = ""
    #: the call that built the arguments, as said: ``SFTConfig(...) at hard.py:14``
    call: str = ""
    #: why there is no call to read, for :data:`ELSEWHERE`
    why: str = ""
    #: a literal there is the recommended value already
    same: bool = False

    @property
    def patched(self) -> bool:
        return self.kind in (LITERAL, ADDED, ASSIGNED)

    def words(self, shown=os.path.basename) -> str:
        """One line: where the field is set and what to do there."""
        new = source_of(self.value)
        at = f"{shown(self.file)}:{self.line}" if self.file and self.line else shown(self.file) if self.file else ""
        if self.same:
            within = f" in {self.call.split(' at ')[0]}" if self.call else ""
            return f"{at}: {self.field}={self.old}{within}, as recommended, yet the trainer got another value: " \
                   "find where the script changes it"
        if self.kind == LITERAL:  # (the call's name alone: the line is the keyword's)
            return f"{at}: {self.field}={self.old} in {self.call.split(' at ')[0]}: make it {new}"
        if self.kind == ASSIGNED:
            return f"{at}: {self.field} = {self.old}: make it {new}"
        if self.kind == ADDED:
            return f"{self.call}: {self.field} not passed (its default): add {self.field}={new}"
        if self.kind == EXPRESSION:
            return f"{at}: {self.field}={self.old} in {self.call or 'an assignment'}: change {self.old} where it " \
                   f"comes from to give {new}"
        if self.kind == KWARGS:
            return f"{self.field}: set through {self.old} in {self.call}: change it where " \
                   f"{self.old.lstrip('*')} comes from, to {new}"
        return f"{self.field}: {self.why}: set it to {new} there"


@dataclass
class Found:
    """Every change of one recommendation: one per field, and the edits of those patched."""
    changes: list[Change] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)

    @property
    def patchable(self) -> bool:
        return bool(self.edits)

    def diff(self, base: str) -> str:
        """The edits as one unified diff, each file's path relative to ``base`` (``a/hard.py``,
        ``b/hard.py``): ``patch -p1`` or ``git apply`` applies it in ``base``."""
        out = []
        for path in dict.fromkeys(e.file for e in self.edits):
            text = _read(path)
            new = text
            for e in sorted((e for e in self.edits if e.file == path), key=lambda e: e.start, reverse=True):
                new = new[:e.start] + e.text + new[e.end:]
            rel = os.path.relpath(path, base).replace(os.sep, "/")
            lines = difflib.unified_diff(_lines(text), _lines(new), f"a/{rel}", f"b/{rel}")
            for line in lines:
                out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        return "".join(out)

    def base(self, script: str | None = None) -> str:
        """The folder the diff is applied in: the script's, if every file patched is in it, else
        the deepest folder that holds them all."""
        files = [os.path.abspath(e.file) for e in self.edits]
        if script:
            folder = os.path.dirname(os.path.abspath(script))
            if all(os.path.commonpath([folder, f]) == folder for f in files):
                return folder
        return os.path.commonpath([os.path.dirname(f) for f in files]) if files else os.getcwd()


def source_of(value: Any, like: str = "") -> str:
    """``value`` as Python source; a string in the quotes ``like`` (the text it replaces) uses."""
    if isinstance(value, str) and like[:1] == '"':
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _read(path: str) -> str:
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def _lines(text: str) -> list[str]:
    """``text`` in lines as Python's tokenizer counts them (``\\n``, ``\\r\\n`` or ``\\r``), each
    with its line ending: ``str.splitlines`` also splits at form feeds and other separators."""
    out = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)
    return out


class _Source:
    """A file's text, its syntax tree, and character offsets of the tree's positions (which
    count UTF-8 bytes within a line)."""

    def __init__(self, path: str):
        self.path = path
        self.text = _read(path)
        self.tree = ast.parse(self.text, filename=path)
        self.lines = _lines(self.text)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_end(self, lineno: int) -> int:
        return self.starts[lineno]


def _name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _covering(src: _Source, line: int, name: str, fields: list[str]) -> ast.Call | None:
    """The call at ``line`` that built the arguments: the innermost of the calls whose lines hold
    it that are named ``name`` (the arguments' class), else that pass any of ``fields``; else the
    outermost call there (a parser's, which the words then name)."""
    here = [c for c in _calls(src.tree) if c.lineno <= line <= c.end_lineno]
    size = lambda c: (c.end_lineno - c.lineno, c.end_col_offset - c.col_offset)  # noqa: E731
    found = [c for c in here if name and _name(c) == name] or \
        [c for c in here if any(k.arg in fields for k in c.keywords)]
    if found:
        return min(found, key=size)
    return max(here, key=size, default=None)


def _said(src: _Source, call: ast.Call, shown) -> str:
    return f"{_name(call) or 'the call'}(...) at {shown(src.path)}:{call.lineno}"


def _assignments(src: _Source, name: str) -> list[ast.Assign]:
    """``X.name = value`` anywhere in the file (a script that sets its arguments after building
    them), in the order they stand."""
    out = [n for n in ast.walk(src.tree) if isinstance(n, ast.Assign)
           and any(isinstance(t, ast.Attribute) and t.attr == name for t in n.targets)]
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def _added(src: _Source, call: ast.Call, missing: list[tuple[str, Any]]) -> Edit:
    """One edit adding ``missing`` keywords to ``call``: on lines of their own where the call puts
    each argument on its own line, else after its last argument."""
    words = [f"{name}={source_of(value)}" for name, value in missing]
    args = sorted([*call.args, *call.keywords], key=lambda n: (n.end_lineno, n.end_col_offset))
    if not args:  # SFTConfig(): inside the parentheses
        start = src.offset(call.func.end_lineno, call.func.end_col_offset)
        at = src.text.index("(", start) + 1
        return Edit(src.path, at, at, ", ".join(words))
    last = args[-1]  # (never **cfg: a call that takes it gets nothing added)
    start, end = src.span(last)
    before = src.text[src.starts[last.lineno - 1]:start]
    rest_end = src.line_end(last.end_lineno)
    rest = src.text[end:rest_end]
    own_line = (call.lineno < last.lineno and not before.strip()
                and re.fullmatch(r"[ \t]*,?[ \t]*(#[^\r\n]*)?(\r\n|\r|\n)", rest) is not None)
    if own_line:
        newline = re.search(r"(\r\n|\r|\n)$", rest).group(1)
        comma = "" if rest.lstrip().startswith(",") else ","
        added = "".join(f"{before}{w},{newline}" for w in words)
        return Edit(src.path, end, rest_end, comma + rest + added)
    return Edit(src.path, end, end, "".join(f", {w}" for w in words))


def find_changes(values: dict[str, Any], path: str | None, line: int | None = None, call_name: str = "",
                 script: str | None = None, shown=os.path.basename, had: dict[str, Any] | None = None) -> Found:
    """Where ``values`` (field -> recommended value) are set, and the edits that set them.

    ``path``/``line``/``call_name``: where the script built its arguments (``args_origin``);
    without a line, the calls of ``script`` (or ``path``) that pass
    ``per_device_train_batch_size`` are the constructor, if there is exactly one. ``shown``:
    how a path is written in the words. ``had``: field -> the value the trainer got from the
    script (``applied[...]['script']``), where known: a literal assigned to the field elsewhere
    (``x.per_device_train_batch_size = 2``) counts only where it is that value (an assignment in
    a branch the run did not take, or to another object, is left alone)."""
    found = Found()
    src = _open_source(values, path or script, line, shown, found)
    if src is None:
        return found
    fields = [f for f in values if f not in MODEL_FIELDS]
    call, where = _constructor_call(src, line, call_name, fields, shown)
    constructor = call is not None and (not call_name or _name(call) == call_name)
    missing: list[tuple[str, Any]] = []
    for name, value in values.items():
        if name in MODEL_FIELDS:
            found.changes.append(_model_change(src, name, value, found, shown))
            continue
        assigned = [n for n in _assignments(src, name)
                    if had is None or name not in had or not _literal(n.value) or _is(n.value, had[name])]
        change = _call_change(src, name, value, call, constructor, bool(assigned), where, line, found, shown)
        if change is not None and change.kind == ADDED:
            missing.append((name, value))
        for node in assigned:  # what the trainer gets is the last of these
            found.changes.append(_assigned_change(src, name, value, node, found))
        if change is not None:
            found.changes.append(change)
    if missing:
        found.edits.append(_added(src, call, missing))
    found.changes.sort(key=lambda c: (c.file, c.line or 0))
    return found


def _open_source(values: dict[str, Any], target: str | None, line: int | None, shown, found: Found) -> _Source | None:
    """The file the arguments are built in, parsed; None (every field in ``found`` said to be
    set elsewhere, and why) where it is not known or cannot be read."""
    try:
        src = _Source(target) if target else None
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError) as exc:
        why = f"the arguments are built at {shown(target)}{f':{line}' if line else ''}, which cannot be read " \
              f"({getattr(exc, 'strerror', None) or exc})"
        found.changes = [Change(f, v, ELSEWHERE, target, line, why=why) for f, v in values.items()]
        return None
    if src is None:
        found.changes = [Change(f, v, ELSEWHERE, why="where the script builds its arguments is not known")
                         for f, v in values.items()]
    return src


def _constructor_call(src: _Source, line: int | None, call_name: str, fields: list[str],
                      shown) -> tuple[ast.Call | None, str]:
    """The call that built the arguments (None where it is not known) and the words that say
    where it is, or why it is not known."""
    if line:
        return (_covering(src, line, call_name, fields),
                f"{call_name or 'its arguments'} built at {shown(src.path)}:{line}")
    calls = [c for c in _calls(src.tree) if any(k.arg == SPLIT_FIELDS[0] for k in c.keywords)]
    where = (f"{len(calls)} calls in {shown(src.path)} pass {SPLIT_FIELDS[0]} "
             f"({', '.join(f'line {c.lineno}' for c in calls)}): which one the trainer received is not known"
             if calls else f"no call in {shown(src.path)} passes {SPLIT_FIELDS[0]}")
    return (calls[0] if len(calls) == 1 else None), where


def _call_change(src: _Source, name: str, value: Any, call: ast.Call | None, constructor: bool, assigned: bool,
                 where: str, line: int | None, found: Found, shown) -> Change | None:
    """How the constructor ``call`` sets ``name`` (a literal replaced, an expression or
    ``**kwargs`` said, a keyword to add: ``ADDED``), or why it does not; None where only
    assignments elsewhere (``assigned``) set it."""
    kw = next((k for k in call.keywords if k.arg == name), None) if call is not None else None
    said = _said(src, call, shown) if call is not None else ""
    if kw is not None and _literal(kw.value):
        old, same = _replace(src, kw.value, value, found)
        return Change(name, value, LITERAL, src.path, kw.value.lineno, old, said, same=same)
    if kw is not None:
        return Change(name, value, EXPRESSION, src.path, kw.value.lineno, src.segment(kw.value), said)
    if assigned:
        return None
    if call is not None and any(k.arg is None for k in call.keywords):
        star = next(k for k in call.keywords if k.arg is None)
        return Change(name, value, KWARGS, src.path, call.lineno, "**" + src.segment(star.value), said)
    if call is not None and constructor:
        return Change(name, value, ADDED, src.path, call.lineno, call=said)
    why = f"{where}, by {said}, which does not pass {name}" if call is not None else where
    return Change(name, value, ELSEWHERE, src.path, line, why=why)


def _assigned_change(src: _Source, name: str, value: Any, node: ast.Assign, found: Found) -> Change:
    """``X.name = value`` elsewhere in the file: a literal replaced, an expression said."""
    if _literal(node.value):
        old, same = _replace(src, node.value, value, found)
        return Change(name, value, ASSIGNED, src.path, node.lineno, old, same=same)
    return Change(name, value, EXPRESSION, src.path, node.lineno, src.segment(node.value))


def _is(node: ast.AST, value: Any) -> bool:
    """Whether the literal ``node`` is ``value`` as a run's read-back carries it (a dict or a
    list as its JSON text)."""
    literal = ast.literal_eval(node)
    if literal == value and type(literal) is type(value):
        return True
    try:
        return isinstance(value, str) and json.dumps(literal, sort_keys=True, default=str) == value
    except (TypeError, ValueError):
        return False


def _replace(src: _Source, node: ast.AST, value: Any, found: Found) -> tuple[str, bool]:
    """The literal ``node`` replaced by ``value`` (an edit added to ``found``, unless it is that
    value already): its source text, and whether it was the value already."""
    old = src.segment(node)
    same = ast.literal_eval(node) == value
    if not same:
        start, end = src.span(node)
        found.edits.append(Edit(src.path, start, end, source_of(value, old)))
    return old, same


def _model_change(src: _Source, name: str, value: Any, found: Found, shown) -> Change:
    """A model argument (the attention kernel): where the script loads its model with it as a
    literal keyword, replaced; else said."""
    passing = [(c, k) for c in _calls(src.tree) for k in c.keywords if k.arg == name]
    if len(passing) == 1 and _literal(passing[0][1].value):
        call, kw = passing[0]
        old, same = _replace(src, kw.value, value, found)
        return Change(name, value, LITERAL, src.path, kw.value.lineno, old, _said(src, call, shown), same=same)
    return Change(name, value, ELSEWHERE, src.path, why=f"{shown(src.path)} loads its model without a literal "
                  f"{name}= (from_pretrained(..., {name}=...))")


def recommended_changes(settings: dict[str, Any], planned: dict[str, Any], script: str | None = None,
                        shown=os.path.basename) -> tuple[Found | None, str]:
    """What a swept script must change to train the recommendation, from a run of the
    recommended trial: ``settings`` (its read-back: ``applied``, ``args_origin``) and ``planned``
    (field -> the recommended value, trainer and model arguments). ``(None, why)`` where nothing
    is to change in the script: the script's own values are the recommendation's, or its
    command line gave them (the recommended command is then the handoff)."""
    applied = {k: v for k, v in (settings.get("applied") or {}).items() if isinstance(v, dict)}
    origin = settings.get("args_origin") or {}
    if applied:
        values = {k: planned[k] for k, a in applied.items()
                  if a.get("replaced") and k not in WHERE_FIELDS and k in planned}
        if not values:
            given = [k for k, a in applied.items() if a.get("how") == GIVEN and k not in WHERE_FIELDS]
            return None, ("the script takes them from its command line: the recommendation's command is the handoff"
                          if given else "the script's own values are the recommendation's")
    else:  # a run that did not say (an older probe): the split, and what the source passes as literals
        values = {k: planned[k] for k in SPLIT_FIELDS if k in planned}
    had = {k: a["script"] for k, a in applied.items() if "script" in a} if applied else None
    found = find_changes(values, origin.get("file"), origin.get("line"), str(origin.get("call") or ""),
                         script=script, shown=shown, had=had)
    if not applied:  # a literal that is the recommendation's already is nothing to change
        found.changes = [c for c in found.changes if not c.same]
        if not found.changes:
            return None, "the script's own values are the recommendation's"
    return found, ""
