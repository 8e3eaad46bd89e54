"""Text from outside tracetui, made safe for a terminal, a widget or a line of a file.

Event fields, log lines, socket lines, file names, settings and exception messages can hold
anything: an escape sequence that clears the screen or retitles the terminal, a carriage return
that writes over a line, a bidirectional override that reverses what follows, a ``[/]`` that
Rich would read as markup. Every string bound for stderr (:func:`say`), stdout,
the monitor's widgets or a CSV cell goes through :func:`clean` (or :func:`safe_text` for a Rich
``Text`` already built): each character that is not printable is written as its Python escape
(``\\x1b``, ``\\n``, ``\\u202e``), so that it is seen and does nothing. Markup is never read:
the widgets build :class:`rich.text.Text` objects (:func:`plain`), never markup strings.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (Rich is imported where a widget needs it: a one-line error needs only clean)
    from rich.text import Text

__all__ = ["clean", "plain", "safe_text"]


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in "\n\t\r":
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def clean(value: Any, newlines: bool = False) -> str:
    """``value`` as a string with every character that is not printable escaped (C0 and C1
    controls, DEL, line and paragraph separators, format characters such as bidirectional
    overrides, lone surrogates). ``newlines``: keep ``\\n`` as a line break (text of several
    lines built by tracetui itself; everything else from outside is one line)."""
    s = value if isinstance(value, str) else str(value)
    if s.isprintable():  # the common case, at C speed
        return s
    if newlines and "\n" in s:
        return "\n".join(clean(part) for part in s.split("\n"))
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in s)


def plain(value: Any, style: str = "") -> Text:
    """A Rich ``Text`` of ``value``, cleaned: shown literally, never read as markup."""
    from rich.text import Text

    return Text(clean(value), style=style, end="")


def safe_text(text: Text | str) -> Text:
    """``text`` (a Rich ``Text`` built by tracetui, holding strings from outside) with every
    character that is not printable escaped, its styles kept; line breaks stay line breaks. A
    ``str`` is taken literally (never as markup)."""
    from rich.text import Text

    if not isinstance(text, Text):
        return Text(clean(text, newlines=True), end="")
    s = text.plain
    if s.replace("\n", "").isprintable():  # the common case
        return text
    bad = [i for i, ch in enumerate(s) if ch != "\n" and not ch.isprintable()]
    out = text.blank_copy()
    for part in text.divide(sorted({c for i in bad for c in (i, i + 1)})):
        p = part.plain
        if len(p) == 1 and p != "\n" and not p.isprintable():
            esc = Text(_escape(p), style=part.style)
            for span in part.spans:
                esc.stylize(span.style, 0, len(esc))
            part = esc
        out.append_text(part)
    return out


def say(line: str) -> None:
    """Write ``line`` to stderr. After an SSH drop stderr is a hung-up terminal (EIO) or a broken
    pipe: the line is lost, never the outputs; stderr then goes to /dev/null, so that its unwritable
    buffer cannot fail the exit either. Whatever it quotes from outside stays one line of plain
    text (:func:`tracetui.core.text.clean`)."""
    try:
        sys.stderr.write(clean(line) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        try:
            sys.stderr = open(os.devnull, "w")
        except OSError:
            pass
