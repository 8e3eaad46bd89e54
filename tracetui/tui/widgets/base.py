"""What the panels are built on: text clipped to the lines a panel has (never silently), a
text panel as tall as its text, and a table cell safe from markup."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget

from ...core.text import plain, safe_text

#: how a panel cut to its lines says where to read the rest
MORE = " … (? shows it whole)"


def clip_lines(text: Text, console, width: int, limit: int, more: str = MORE) -> Text:
    """``text`` wrapped to ``width`` cells in at most ``limit`` lines; when it needs more, the
    last line kept ends with ``more``."""
    lines = text.wrap(console, max(1, width))
    if len(lines) <= limit:
        return Text("\n").join(lines)
    kept = lines[:max(1, limit)]
    last = kept[-1]
    last.rstrip()
    last.truncate(max(0, width - cell_len(more)))
    last.append(more, style="dim")
    return Text("\n").join(kept)


class Clipped(Widget):
    """Text shown whole when it fits the lines the stylesheet gives the panel (its
    ``max-height``, else its ``height``), else as many lines as fit, the last saying where the
    rest is (:data:`MORE`): the answer, the failures and the notices are never cut silently.
    :attr:`full` is the whole text, for the help screen."""

    DEFAULT_CSS = "Clipped { height: auto; }"

    def __init__(self, text: str | Text = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.full = safe_text(text)

    def show(self, text: Text) -> None:
        self.full = safe_text(text)  # (it quotes events, settings and messages from outside)
        self.refresh(layout=True)

    def line_limit(self) -> int:
        for scalar in (self.styles.max_height, self.styles.height):
            if scalar is not None and scalar.is_cells:
                return max(1, int(scalar.value) - self.styles.gutter.height)
        return 1_000

    def fitted(self, width: int) -> Text:
        return clip_lines(self.full, self.app.console, width, self.line_limit())

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.fitted(width).split())

    def render(self) -> Text:
        return self.fitted(self.size.width)


class Pane(Widget):
    """A text panel drawn for the width it has, as tall as its text: the app puts it in a
    scrolling container, so what the screen cannot hold (at 80x24, most of the detail) scrolls
    into view."""

    DEFAULT_CSS = "Pane { height: auto; }"

    def content(self, width: int) -> Text:  # pragma: no cover - overridden
        return Text()

    def shown(self, width: int) -> Text:
        """:meth:`content`, its strings from outside made harmless (:func:`~tracetui.core.text.safe_text`)."""
        return safe_text(self.content(max(20, width)))

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.shown(width).wrap(self.app.console, max(1, width)))

    def render(self) -> Text:
        return self.shown(self.size.width)


def cell(value) -> Text:
    """A table cell as a Rich ``Text``: a ``str`` given to a ``DataTable`` is read as markup (a
    ``[/]`` in a GPU name or a varied value crashed the monitor), and what it quotes from outside
    is cleaned (:mod:`tracetui.core.text`)."""
    return safe_text(value) if isinstance(value, Text) else plain(value)


def cut_words(text: Text, width: int) -> Text:
    """``text`` in ``width`` cells: whole if it fits, else cut at the last word boundary that
    leaves room for an ellipsis (``oom: out of…``, never ``ok (bus``); its first word stays whole
    (the status), the ellipsis after it where nothing more fits."""
    if text.cell_len <= width:
        return text
    plain_text = text.plain
    first = plain_text.split(" ", 1)[0]
    room = max(width - 1, 1)
    cut = plain_text.rfind(" ", 0, room + 1)
    end = cut if cut >= len(first) else len(first)
    out = text[:end].copy()
    out.rstrip()
    out.append("…")
    return out
