"""What the fork server runs as it starts (:data:`tracetui.runner.lifetime.PRELOAD`).

A step that fails here must not end the server: each trial then does the step itself, or fails
in its own log. What failed is noted in :data:`PROBLEMS`, which every trial forked from the
server inherits and says (the built-in worker in a notice, a forked script on its stderr, which
is its run's log), so that a slower start or a missing helper is never silent.
"""

#: what the fork server's start-up could not do, each in words
PROBLEMS: list[str] = []


def note(what: str, exc: BaseException) -> None:
    """Note that start-up step ``what`` failed with ``exc`` (see the module's note)."""
    PROBLEMS.append(f"the fork server's start-up: {what} failed ({type(exc).__name__}: {str(exc)[:200]})")
