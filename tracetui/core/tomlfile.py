"""A sweep's TOML file (``--config FILE.toml``): read within limits of size and depth, its
settings at the top level or under ``[sweep]``, as a table for
:func:`tracetui.core.coerce.from_mapping`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .config import ConfigError
from .paths import input_file_problem


#: a config file longer than this is no sweep's settings (and is not read into memory)
MAX_TOML_BYTES = 1 << 20
#: arrays and inline tables nested deeper than this are refused before parsing (the parser
#: recurses, so deep enough nesting is a RecursionError); a sweep's settings nest two deep
MAX_TOML_DEPTH = 16


def toml_depth(text: str) -> int:
    """How deep ``text``'s arrays and inline tables nest (``[`` and ``{`` outside strings and
    comments; a table header counts one). Linear, no recursion, whatever the text."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if ch in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else ch
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                j += 2 if quote[0] == '"' and text[j] == "\\" else 1
            i = j + len(quote)
            continue
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def load_toml(path: str) -> dict[str, Any]:
    """The settings table of the TOML file at ``path`` (one :class:`ConfigError` if it cannot be
    read, is too large or too deep, is no TOML, or holds a table tracetui does not read)."""
    why = input_file_problem(path)
    if why:
        raise ConfigError("--config", f"{path} {why}", "give the path of a TOML file")
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_TOML_BYTES + 1)
    except OSError as exc:
        raise ConfigError("--config", f"{path} cannot be read ({exc.strerror})", "give a readable TOML file") from None
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError("--config", f"{path} is over {MAX_TOML_BYTES >> 20} MiB, too large for a sweep's settings",
                          "give the TOML file of the sweep's settings")
    try:
        text = raw.decode("utf-8")
        if toml_depth(text) > MAX_TOML_DEPTH:
            raise ConfigError("--config", f"{path} nests arrays or tables more than {MAX_TOML_DEPTH} deep",
                              "a sweep's settings nest at most two deep: fix the file")
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        why = "nested too deep" if isinstance(exc, RecursionError) else exc
        raise ConfigError("--config", f"{path} is not valid TOML ({why})",
                          "fix the file's syntax") from None
    # Settings sit at the top level or under [sweep], not both: a key beside [sweep] would be
    # silently ignored, and a table of another name (a misspelt [swep]) holds nothing tracetui reads.
    if "sweep" in data and not isinstance(data["sweep"], dict):
        raise ConfigError("--config", f"{path}: sweep must be a table ([sweep]), not a value",
                          "write [sweep] on a line of its own, with the settings below it")
    for key, value in data.items():
        if key not in ("sweep", "vary") and isinstance(value, dict):
            raise ConfigError("--config", f"{path}: [{key}] is not a table tracetui reads",
                              "put the settings under [sweep] or at the top level")
    if "sweep" in data:
        beside = [k for k in data if k != "sweep"]
        if beside:
            raise ConfigError("--config", f"{path}: {', '.join(beside[:5])} at the top level beside [sweep] would be ignored",
                              "move them under [sweep] (above it in the file is the top level)")
        return dict(data["sweep"])
    return dict(data)
