"""A trial: one point in the space a sweep compares.

A trial is a frozen, hashable value: the physical shape of the batch (micro-batch x
accumulation x world size) and the values of any other settings being compared
(``--vary``). It is the identity of a run everywhere: the plan, the events (``run_started``
carries its fields), the summary rows, the CSV. Its label is made by :meth:`Trial.label` only and
is never parsed back: a trial travels as its fields (:meth:`Trial.fields`,
:meth:`Trial.from_fields`).

This module imports nothing of tracetui's: every layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

#: a varied setting's value: what a TOML/JSON scalar can be
Value = Any
#: the longest :meth:`Trial.slug` (a run's id and file names are made of it)
SLUG_CHARS = 96


@dataclass(frozen=True, order=True)
class Trial:
    micro_batch: int
    grad_accum: int
    world_size: int = 1
    #: the varied settings, sorted by name: ``(("attn_implementation", "eager"), ...)``
    settings: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.settings, Mapping):  # accept a dict, keep a sorted tuple
            object.__setattr__(self, "settings", tuple(sorted(self.settings.items())))
        else:
            object.__setattr__(self, "settings", tuple(sorted(self.settings)))

    # ---- what it is --------------------------------------------------------------------------
    @property
    def effective_batch(self) -> int:
        """Examples per optimizer step, over every rank."""
        return self.micro_batch * self.grad_accum * self.world_size

    @property
    def split(self) -> str:
        """The batch shape alone: ``4x1``, or ``4x1x2`` on two ranks."""
        return f"{self.micro_batch}x{self.grad_accum}" + (f"x{self.world_size}" if self.world_size > 1 else "")

    def setting(self, name: str, default: Value = None) -> Value:
        return dict(self.settings).get(name, default)

    @property
    def settings_dict(self) -> dict[str, Value]:
        return dict(self.settings)

    def label(self, short: Mapping[str, str] | None = None, repeat: str = "") -> str:
        """The one way a trial is written for people: ``4x1``, ``4x1 attn=eager ckpt=on``;
        one of its runs: ``4x1#2 attn=eager`` (``repeat``). ``short``: shorter names for
        settings (the knob registry's)."""
        head = f"{self.split}#{repeat}" if repeat else self.split
        return " ".join(x for x in (head, self.settings_label(short)) if x)

    def settings_label(self, short: Mapping[str, str] | None = None) -> str:
        """The settings part of :meth:`label`: ``attn=eager ckpt=on`` ("" when none)."""
        short = short or {}
        return " ".join(f"{short.get(k, k)}={format_value(v)}" for k, v in self.settings)

    def slug(self, short: Mapping[str, str] | None = None) -> str:
        """The label as a file and run-id name: ``4x1_attn-eager_ckpt-on``; at most
        :data:`SLUG_CHARS` characters of ASCII letters, digits and ``._-`` (one longer is cut,
        and ends in a hash of the whole: names of different trials stay different, and a file
        name stays far within what a file system takes)."""
        import hashlib

        short = short or {}
        raw = self.split + "".join(f"_{short.get(k, k)}-{format_value(v)}" for k, v in self.settings)
        out = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "-" for c in raw)
        if len(out) > SLUG_CHARS:
            out = out[:SLUG_CHARS - 11] + "-" + hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest()[:10]
        return out

    def key(self) -> tuple:
        """What runs are pooled by (with the machine): equal keys are repeats of one trial."""
        return (self.effective_batch, self.micro_batch, self.grad_accum, self.world_size, self.settings)

    # ---- as it travels -----------------------------------------------------------------------
    def fields(self) -> dict[str, Any]:
        """The fields of a ``run_started`` event that say which trial a run is."""
        out: dict[str, Any] = dict(micro_batch=self.micro_batch, grad_accum=self.grad_accum,
                                   world_size=self.world_size, effective_batch=self.effective_batch)
        if self.settings:
            out["varied"] = dict(self.settings)
        return out

    @classmethod
    def from_fields(cls, event: Mapping[str, Any]) -> "Trial":
        """The trial of a ``run_started`` event (its fields, never its label)."""
        ws = int(event.get("world_size") or 1)
        varied = event.get("varied") or {}
        return cls(int(event["micro_batch"]), int(event["grad_accum"]), ws,
                   tuple(sorted(varied.items())) if isinstance(varied, Mapping) else ())

    def with_settings(self, settings: Iterable[tuple[str, Value]]) -> "Trial":
        return Trial(self.micro_batch, self.grad_accum, self.world_size, tuple(settings))


def format_value(value: Value) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)
