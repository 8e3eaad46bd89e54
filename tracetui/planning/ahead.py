"""The runs a search has left, guessed (it decides as it goes): for its estimate
(:meth:`tracetui.planning.plan.Planner.estimate`).

Memory probes not yet run, then per effective batch not finished: before a split of it has
measured, :data:`EXPECTED_SPLITS` splits in all (the start and its two neighbours), the largest
micro-batches predicted to fit first, less those begun; once one has, the best's neighbours not
yet tried that the search would still run (predicted to fit, and not shown unable to win); each
``--repeats`` times; and the repeats left of splits begun.
"""

from __future__ import annotations

from .estimate import Pending, TrialResult

#: splits a search usually runs per effective batch: the start and its two neighbours
EXPECTED_SPLITS = 3


class SearchAhead:
    """:meth:`pending` for :class:`tracetui.planning.search.SearchPlanner` (its fields)."""

    pending_how = (f"the search's runs left guessed: the memory probes, then {EXPECTED_SPLITS} splits per "
                   "effective batch (the start and its neighbours)")

    def pending(self, finished: list[TrialResult]) -> list[Pending]:
        ran: dict = {}
        for r in finished:
            ran[r.trial] = ran.get(r.trial, 0) + 1
        out: list[Pending] = []
        for fam in self.families.values():
            if self.limit is not None and not fam.memory.ready and fam.oom_at is None:
                out += [(p, self.probe_steps) for p in fam.probes if p not in ran]
        for (fk, _eb), group in self.groups.items():
            fam = self.families[fk]
            begun = [t for t in group if t in ran or t in self.predicted or t in self._start.values()]
            out += [(t, None) for t in begun for _ in range(max(0, self.repeats - ran.get(t, 0)))]
            if all(t in self.done for t in group):
                continue
            fresh = [t for t in reversed(group) if t not in begun and t not in self.done
                     and self._fits(fam, t.micro_batch)[0]]
            ok = [t for t in group if self._median(t) is not None]
            if ok:  # the walk from the best so far: its neighbours left, as the search itself decides
                best = min(ok, key=self._median)
                i = group.index(best)
                near = {group[j] for j in (i - 1, i + 1) if 0 <= j < len(group)}
                fresh = [t for t in fresh if t in near and not self._hopeless(fam, t, best)]
            else:
                fresh = fresh[:max(0, EXPECTED_SPLITS - len(begun))]
            out += [(t, None) for t in fresh for _ in range(self.repeats)]
        return out
