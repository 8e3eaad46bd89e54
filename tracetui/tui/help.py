"""The help screen: what the main screen cut for want of room, whole, then the keys."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..analysis import BOUNDS
from ..core.text import safe_text
from .widgets import CLOCK


class HelpScreen(ModalScreen):
    """What the main screen shows cut for want of room, whole (``whole``: the answer, the
    failures, every notice); then the keys, built from the app's bindings, and what the bound
    labels mean."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, whole: Text) -> None:
        super().__init__()
        self.whole = whole

    def compose(self) -> ComposeResult:
        text = Text()
        text.append_text(self.whole)
        text.append("\n\nKeys\n", style="bold")
        for b in self.app.BINDINGS:
            if isinstance(b, Binding):
                text.append(f"  {b.key_display or b.key:>6}", style="bold")
                text.append(f"  {b.tooltip or b.description}\n")
        text.append("  ctrl+p", style="bold")
        text.append("  command palette (themes)\n\n"
                    "Arrows move the run list's cursor: the detail pane and the timeline show that trial. "
                    "Tab moves between the run list, the tabs, the pane under them (arrows scroll it) and "
                    "the table.\n"

                    "Tabs: Detail, Timeline, Phases, Steps (step time), Tok/s (throughput), GPU, Memory.\n\n")
        text.append("What bounds a trial", style="bold")
        text.append(" (the bound column)\n")
        for name, words in BOUNDS.items():
            text.append(f"  {name}", style="bold")
            text.append(f": {words}\n")
        text.append(f"\nThe run list's status: {CLOCK}; a status too long for its cell ends in … (the failures "
                    "panel and the detail pane have it whole).\n")
        text.append("\nescape closes this screen", style="dim")
        with VerticalScroll(id="help"):
            yield Static(safe_text(text))
