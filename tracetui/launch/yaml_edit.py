"""Top-level keys of a user's YAML file changed in the file's own text (:func:`edit`).

A config-file trainer's run gets a copy of the user's YAML with a few keys changed, and
``--emit-config`` hands the user their own file back with the recommended keys: both must read
as the user's file. So the file is never dumped again: PyYAML's parser gives where each
top-level key's value lies in the text, and only that value is replaced; its anchor, the
comments, quotes, flow collections and every other byte stay as they were.

What a value's change would change beside it is said, never left to happen:

- a value that carries an anchor (``micro_batch_size: &mb 2``) keeps it, and every alias of it
  elsewhere (``eval_batch_size: *mb``) is written out as the value it had (``eval_batch_size:
  2``): only the planned key changes (a measured run's evaluation batch, say, stays the user's);
  each such alias is named in :attr:`Edited.said`;
- a value that is an alias (``micro_batch_size: *mb``) is replaced where it is; the anchor and
  its other aliases keep their value;
- a key the file does not have is added at the end under a comment line saying tracetui added it;
- a key left out is removed with its lines, its anchor's aliases written out as above.

Where a change cannot be made that way (an alias of a multi-line block that a removed value
anchors), :class:`EditError` says so in one line; nothing is rewritten whole.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml import events as ev

#: the comment line above the keys tracetui adds
ADDED = "# added by tracetui (not in the original file):"
#: a value's anchor at its start, with the blanks after it
_ANCHOR = re.compile(r"&[^\s,\[\]{}]+[ \t]*")


class EditError(ValueError):
    """A change the file's own text cannot take without changing what else it says."""


@dataclass
class Edited:
    """The edited text, and what the edit did beside the changed keys (one line each)."""
    text: str
    said: list[str] = field(default_factory=list)


@dataclass
class _Node:
    first: int  # its first event
    last: int  # its last event
    start: int  # where its text starts (its anchor and tag included)
    end: int  # where its text ends


@dataclass
class _Entry:
    key: str
    key_start: int
    key_end: int
    value: _Node


def _node(events: list, i: int) -> tuple[_Node, int]:
    """The node whose first event is ``events[i]``, and the index after it."""
    e = events[i]
    if not isinstance(e, ev.CollectionStartEvent):
        return _Node(i, i, e.start_mark.index, e.end_mark.index), i + 1
    flows: list[bool] = []
    end = e.end_mark.index
    j = i
    while True:
        x = events[j]
        if isinstance(x, ev.CollectionStartEvent):
            flows.append(bool(x.flow_style))
            end = max(end, x.end_mark.index)
        elif isinstance(x, ev.CollectionEndEvent):
            if flows.pop():  # a block collection's end is marked at what follows it
                end = max(end, x.end_mark.index)
            if not flows:
                return _Node(i, j, e.start_mark.index, end), j + 1
        else:
            end = max(end, x.end_mark.index)
        j += 1


def _scalar(value: Any, style: str | None = None) -> str:
    """``value`` as a YAML scalar, a string in the quotes it replaces (plain where it reads back)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if style == "'":
        return "'" + text.replace("'", "''") + "'"
    if style is None and text == text.strip() and not re.search(r"[#,\[\]{}]|: |:$", text):
        try:
            if yaml.safe_load(f"k: {text}\n") == {"k": text}:
                return text
        except yaml.YAMLError:
            pass
    return json.dumps(text)  # a double-quoted YAML string


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


def _line_end(text: str, pos: int) -> int:
    """Where the line holding the text that ends at ``pos`` ends, its newline included."""
    if pos > 0 and text[pos - 1] == "\n":
        return pos
    j = text.find("\n", pos)
    return len(text) if j < 0 else j + 1


def _own_text(text: str, event, node: _Node) -> str:
    """A node's text without its anchor (what an alias of it stands for, written out)."""
    start = node.start
    if getattr(event, "anchor", None):
        m = _ANCHOR.match(text, start)
        start = m.end() if m else start
    return text[start:node.end]


@dataclass
class _Doc:
    """A parsed file: its text, its value, its events, its top mapping and each top key's entry."""
    text: str
    original: dict
    events: list
    top: Any
    entries: dict[str, _Entry]
    end_of_map: Any
    doc_end: Any

    def owner(self, n: int) -> str:
        """The top key whose value holds event ``n`` ("" for none)."""
        return next((x.key for x in self.entries.values() if x.value.first <= n <= x.value.last), "")


@dataclass
class _Cuts:
    """What an edit does: the text's cuts, applied from the end, and what it says of them."""
    #: (start, end, new text)
    cuts: list[tuple[int, int, str]] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    #: event ranges whose text goes
    replaced: list[tuple[int, int]] = field(default_factory=list)
    #: event ranges whose anchored values change
    changed_anchors: list[tuple[int, int]] = field(default_factory=list)


def edit(text: str, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> Edited:
    """``text`` (a YAML file whose top is a mapping) with each top-level key of ``changes`` set
    to its value and the keys of ``drop`` left out, in the text itself (see the module)."""
    doc = _parse(text)
    done = _Cuts()
    for key, value in changes.items():
        if key in doc.entries:
            _set(doc, doc.entries[key], value, done)
    for key in drop:
        if key in doc.entries:
            _drop(doc, doc.entries[key], done)
    _write_out_aliases(doc, done)
    _add_missing(doc, [(k, v) for k, v in changes.items() if k not in doc.entries], done)
    out = text
    for start, end, new in sorted(done.cuts, key=lambda c: (c[0], c[1]), reverse=True):
        out = out[:start] + new + out[end:]
    expected = {k: v for k, v in {**doc.original, **changes}.items() if k not in drop}
    try:
        ok = yaml.safe_load(out) == expected
    except yaml.YAMLError:
        ok = False
    if not ok:
        raise EditError(f"the keys {', '.join(list(changes) + list(drop))} could not be changed in the "
                        "file's own text")
    return Edited(out, done.said)


def _parse(text: str) -> _Doc:
    """``text``'s events and top-level entries (the last of a repeated key is the one that counts)."""
    try:
        original = yaml.safe_load(text)
        events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise EditError(f"is not valid YAML ({exc})".splitlines()[0]) from None
    if not isinstance(original, dict) or len(events) < 3 or not isinstance(events[2], ev.MappingStartEvent):
        raise EditError("does not hold a mapping of keys")
    entries: dict[str, _Entry] = {}
    i = 3
    while not isinstance(events[i], ev.MappingEndEvent):
        k = events[i]
        _knode, i = _node(events, i)
        value, i = _node(events, i)
        if isinstance(k, ev.ScalarEvent):
            entries[k.value] = _Entry(k.value, k.start_mark.index, k.end_mark.index, value)
    return _Doc(text, original, events, events[2], entries, events[i], events[i + 1] if i + 1 < len(events) else None)


def _set(doc: _Doc, entry: _Entry, value: Any, done: _Cuts) -> None:
    """Replace ``entry``'s value with ``value`` where it stands (an anchor kept, an alias replaced)."""
    text = doc.text
    node, first = entry.value, doc.events[entry.value.first]
    if isinstance(first, ev.AliasEvent):
        done.cuts.append((node.start, node.end, _scalar(value)))
        done.said.append(f"{entry.key} was *{first.anchor}: it now holds {_scalar(value)} itself "
                         f"(the anchor &{first.anchor} and its other uses keep their value)")
        return
    start = node.start
    if first.anchor:
        m = _ANCHOR.match(text, start)
        start = m.end() if m else start
    done.changed_anchors.append((node.first, node.last))
    style = first.style if isinstance(first, ev.ScalarEvent) and isinstance(value, str) else None
    new = _scalar(value, style if style in ("'", '"') else None)
    if isinstance(first, ev.CollectionStartEvent) and not first.flow_style and not first.anchor:
        # a block: from the key's colon to its last line
        colon = re.compile(r"\s*:").match(text, entry.key_end)
        start = colon.end() if colon else start
        new = " " + new
    elif start == 0 or not text[start - 1].isspace():
        new = " " + new  # an empty value right after its colon, or an anchor with no blank after it
    done.cuts.append((start, node.end, new))
    done.replaced.append((node.first, node.last))


def _drop(doc: _Doc, entry: _Entry, done: _Cuts) -> None:
    """Remove ``entry`` with its lines (in a flow mapping: with its comma)."""
    node, top = entry.value, doc.top
    if top.flow_style:
        later = [x.key_start for x in doc.entries.values() if x.key_start > entry.key_start]
        comma = doc.text.rfind(",", 0, entry.key_start)
        done.cuts.append((entry.key_start, min(later), "") if later else
                         (comma if comma > top.start_mark.index else entry.key_start, node.end, ""))
    else:
        done.cuts.append((_line_start(doc.text, entry.key_start), _line_end(doc.text, node.end), ""))
    done.replaced.append((node.first, node.last))
    done.changed_anchors.append((node.first, node.last))


def _write_out_aliases(doc: _Doc, done: _Cuts) -> None:
    """Each alias of a changed or removed value, outside what is replaced, written out as it was."""
    events = doc.events
    defined: dict[str, int] = {}  # a name defined again means the later one after it
    aliases: list[tuple[int, int]] = []  # (alias event, its anchor's event)
    for n, e in enumerate(events):
        if isinstance(e, ev.AliasEvent):
            aliases.append((n, defined[e.anchor]))
        elif isinstance(e, (ev.ScalarEvent, ev.CollectionStartEvent)) and e.anchor:
            defined[e.anchor] = n
    for n, target in aliases:
        if any(a <= n <= b for a, b in done.replaced) or not any(a <= target <= b for a, b in done.changed_anchors):
            continue
        alias, anchored = events[n], events[target]
        source, _ = _node(events, target)
        written = _own_text(doc.text, anchored, source)
        if "\n" in written.strip("\n") or (isinstance(anchored, ev.CollectionStartEvent) and not anchored.flow_style):
            raise EditError(f"*{alias.anchor} in {doc.owner(n) or 'a key'} is an alias of a block under "
                            f"{doc.owner(target)}, which tracetui changes; it cannot be written out on one line")
        written = written.strip()
        done.cuts.append((alias.start_mark.index, alias.end_mark.index, written))
        where = doc.owner(n)
        site = (where if where and doc.entries[where].value.first == n
                else f"the *{alias.anchor} in {where or 'a key'}")
        done.said.append(f"{site} keeps {written}: it was *{alias.anchor}, an alias of {doc.owner(target)}'s value, "
                         "written out so that it does not change with it")


def _add_missing(doc: _Doc, added: list[tuple[str, Any]], done: _Cuts) -> None:
    """Keys the file does not have: at the end, under a line saying who added them."""
    if not added:
        return
    text, top = doc.text, doc.top
    newline = "\r\n" if "\r\n" in text else "\n"
    if top.flow_style:
        at = doc.end_of_map.start_mark.index
        lead = ", " if doc.entries else ""
        done.cuts.append((at, at, lead + ", ".join(f"{k}: {_scalar(v)}" for k, v in added)))
        return
    indent = " " * top.start_mark.column if doc.entries else ""
    at = (_line_start(text, doc.doc_end.start_mark.index) if isinstance(doc.doc_end, ev.DocumentEndEvent)
          and doc.doc_end.explicit else len(text))
    block = (newline if at and text[at - 1] != "\n" else "") + indent + ADDED + newline
    block += "".join(f"{indent}{k}: {_scalar(v)}{newline}" for k, v in added)
    done.cuts.append((at, at, block))
