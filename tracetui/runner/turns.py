"""The turns of head starts (:mod:`.headstarts`, the scheduler's policy): the next run of a grid
starts while the current one takes its warm-up steps, and waits, built, for its turn.

Why. A run's start (its process, the model, the trainer) sat between two runs; started during
the current run's warm-up steps (which are not measured), it overlaps them instead, and never a
measured step: a sweep pays about one start, not one a run.

The rules, kept by :class:`Turns` in tracetui's process:

- a run takes no step until it holds the turn: it asks for it once its trainer is built
  (``on_train_begin``), holds it from its first step to the end of its warm-up, then asks for it
  again, and says when it has ended;
- no turn is given while any run is still starting, or while a lane is between runs (its next
  run about to start);
- the next run may start only while the current one is inside its warm-up, and only where the
  device's free memory holds it beside the current one's steps (:meth:`Turns.seat`; the sweep
  estimates what a step holds from the steps measured so far);
- the oldest ready run gets the turn (the current one, then the one that started early); its
  warm-up may begin while the run before it exits, where there is room, but no measured step
  begins before that run has exited (its process reaped).

So every measured step runs with nothing beside it but a run that waits, blocked on its pipe.
A run's step clock restarts when it gets the turn back (:class:`Gate`): its wait is no step's.
Each run is still its own process (a crash or an out-of-memory cannot poison another); a run
that ran out of memory beside the next one, built early, runs again alone (the sweep's).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from typing import Any, Callable

#: GiB a CUDA process holds outside the caching allocator (context, kernels)
CONTEXT_GIB = 1.0

STARTING, READY, ACTIVE, EXITING = "starting", "ready", "active", "exiting"


class _Seat:
    __slots__ = ("conn", "state", "warm", "footprint", "company")

    def __init__(self, conn: Any):
        self.conn = conn
        self.state = STARTING
        #: stepping inside its warm-up (the next run may start now)
        self.warm = False
        #: GiB the run's process held on its device once built (its "ready")
        self.footprint: float | None = None
        #: when another run was resident beside it: [from, to] on the host clock (to: None, now)
        self.company: list[list[float | None]] = []


class Turns:
    """The coordinator: hands the turn to one seated run at a time (see the module's rules).

    ``room(current, gib)`` says whether the device has room for one more run beside
    ``current`` (which held ``gib`` once built, None if it did not say), ``room_to_step(run)``
    whether ``run`` may take its warm-up steps while the run before it exits (default: no);
    ``on_go(run_id)``: what to send a run with each of its turns (``--until-confident``'s
    references, complete only once the runs before it have ended: the turn that begins a run's
    measured steps is given only once every run before it has been reaped)."""

    def __init__(self, ctx: Any, room: Callable[[str, float | None], bool] | None = None,
                 room_to_step: Callable[[str], bool] | None = None,
                 on_go: Callable[[str], Any] | None = None):
        self._ctx = ctx
        self._room = room or (lambda _rid, _gib: True)
        self._room_to_step = room_to_step or (lambda _rid: False)
        self._on_go = on_go
        self._lock = threading.Condition(threading.Lock())
        self._seats: dict[str, _Seat] = {}  # in the order the runs started
        self._closing: list[Any] = []  # connections of gone seats: closed on the coordinator's thread
        #: lanes (threads) between one run and the next: their next run is about to start
        self._between: set[int] = set()
        self._holder: str | None = None
        self._went: set[str] = set()  # runs that have had a turn
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, name="tracetui-turns", daemon=True)
        self._thread.start()

    # ---- the sweep's side ---------------------------------------------------------------------
    def seat(self, run_id: str) -> Any:
        """A seat for a run about to start; returns the run's end of its pipe (for the payload),
        or None while the run may not start yet (:meth:`wait_to_start`)."""
        with self._lock:
            self._between.discard(threading.get_ident())
            if not self._may_start():
                self._poke()
                return None
            mine, theirs = self._ctx.Pipe(duplex=True)
            self._seats[run_id] = _Seat(mine)
            if len(self._seats) > 1:
                now = time.time()
                for other in self._seats.values():
                    if not (other.company and other.company[-1][1] is None):
                        other.company.append([now, None])
        self._poke()
        return theirs

    def wait_to_start(self, stop: threading.Event) -> None:
        """Wait (as an idle lane: turns go on) until a run may start, or ``stop``."""
        with self._lock:
            while not self._closed and not stop.is_set() and not self._may_start():
                self._lock.wait(0.2)

    def _may_start(self) -> bool:
        """(Under the lock) whether a run may start now."""
        if not self._seats:
            return True
        if len(self._seats) > 1:
            return False
        ((rid, seat),) = self._seats.items()
        if not (seat.state == ACTIVE and seat.warm):
            return False
        return bool(self._room(rid, seat.footprint))

    def unseat(self, run_id: str) -> None:
        """The run's process has ended (reaped): its seat goes. Its lane is between runs until it
        seats the next (:meth:`seat`) or waits or stops (:meth:`idle`): no turn meanwhile, so
        that the next run's start never runs beside a measured step."""
        with self._lock:
            seat = self._seats.pop(run_id, None)
            if self._holder == run_id:
                self._holder = None
            if seat is not None:
                self._closing.append(seat.conn)
            if len(self._seats) == 1:  # the one left is alone from now
                (left,) = self._seats.values()
                if left.company and left.company[-1][1] is None:
                    left.company[-1][1] = time.time()
            self._between.add(threading.get_ident())
            self._lock.notify_all()
        self._poke()

    def idle(self) -> None:
        """The calling lane waits without a run (for one that goes alone), or takes no more:
        it is not between runs, and turns go on."""
        with self._lock:
            self._between.discard(threading.get_ident())
        self._poke()

    def beside(self, run_id: str, at: float) -> bool:
        """Whether ``run_id`` was resident with another run at ``at`` (host clock: when it said it
        ran out of memory): then it may have been crowded out rather than too big. A run that is
        not seated (one going alone) never was."""
        with self._lock:
            seat = self._seats.get(run_id)
            return seat is not None and any(a <= at and (b is None or at <= b) for a, b in seat.company)

    def had_company(self, run_id: str) -> bool:
        """Whether ``run_id`` (seated) was ever resident with another run."""
        with self._lock:
            seat = self._seats.get(run_id)
            return seat is not None and bool(seat.company)

    def resident(self) -> int:
        with self._lock:
            return len(self._seats)

    def waiting(self, run_id: str) -> bool:
        """Whether the run waits for a turn (started, ready, not holding it): not a stall (unless
        the coordinator itself has gone)."""
        if not self._thread.is_alive():
            return False
        with self._lock:
            seat = self._seats.get(run_id)
            return seat is not None and seat.state == READY

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._poke()
        self._thread.join(timeout=2.0)
        with self._lock:
            fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), -1, -1
            closing, self._closing = self._closing + [s.conn for s in self._seats.values()], []
        for conn in closing:
            conn.close()
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    # ---- the coordinator ----------------------------------------------------------------------
    def _poke(self) -> None:
        if self._wake_w < 0:
            return
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _loop(self) -> None:
        import sys
        import traceback

        while True:
            with self._lock:
                if self._closed:
                    return
            try:
                self._round()
            except Exception:  # noqa: BLE001 - reported (its traceback on stderr): the coordinator must not die, every run would wait
                traceback.print_exc(file=sys.stderr)
                time.sleep(0.1)

    def _round(self) -> None:
        from multiprocessing.connection import wait

        with self._lock:
            closing, self._closing = self._closing, []
            conns = {s.conn: rid for rid, s in self._seats.items() if s.state != EXITING}
            wake = self._wake_r
        for conn in closing:  # only this thread waits on them: closed here, never under a wait
            conn.close()
        ready = wait(list(conns) + [wake], timeout=1.0)
        for obj in ready:
            if obj == wake:
                try:
                    os.read(wake, 4096)
                except OSError:
                    pass
                continue
            self._heard(conns[obj], obj)
        self._give()

    @staticmethod
    def _asked(ask: Callable[[str], Any], run_id: str) -> Any:
        """The sweep's answer for ``run_id``; None where asking failed (a turn is still given:
        a run must not wait for ever on an error of the sweep's)."""
        try:
            return ask(run_id)
        except Exception:  # noqa: BLE001 - reported: its traceback on stderr, and the turn goes on
            import sys
            import traceback

            traceback.print_exc(file=sys.stderr)
            return None

    def _heard(self, run_id: str, conn: Any) -> None:
        try:
            msg = conn.recv()
        except (EOFError, OSError, ValueError, pickle.UnpicklingError):  # a closed or garbled pipe: the run has ended
            msg = ("end",)
        with self._lock:
            seat = self._seats.get(run_id)
            if seat is None:
                return
            what = msg[0] if isinstance(msg, tuple) and msg else msg
            if what == "ready":
                seat.state = READY
                if len(msg) > 2 and isinstance(msg[2], (int, float)):
                    seat.footprint = float(msg[2])
            elif what == "yield":
                seat.state = READY
                seat.warm = False
            elif what == "warm":  # stepping inside its warm-up
                seat.warm = seat.state == ACTIVE
            else:  # "end": no more steps; its process exits, and is reaped before measured steps go on
                seat.state = EXITING
                seat.warm = False
            if self._holder == run_id and seat.state != ACTIVE:
                self._holder = None
            self._lock.notify_all()

    def _give(self) -> None:
        """Give the turn to the oldest ready run (:meth:`_next_up`). What goes with it
        (``on_go``) is asked outside the lock: the sweep answers under its own scheduler's
        condition, which a lane holds while it seats a run here."""
        with self._lock:
            rid = self._next_up()
            if rid is None:
                return
            self._holder = rid  # (held meanwhile: no other turn is given; only this thread gives)
        sent = self._asked(self._on_go, rid) if self._on_go else None
        with self._lock:
            seat = self._seats.get(rid)
            try:
                if seat is None:
                    raise ValueError(rid)  # unseated meanwhile: no turn for it
                seat.conn.send(("go", sent) if self._on_go else "go")
            except (OSError, ValueError):
                if seat is not None:
                    seat.state = EXITING
                if self._holder == rid:
                    self._holder = None
                return
            self._went.add(rid)
            seat.state = ACTIVE
            self._lock.notify_all()

    def _next_up(self) -> str | None:
        """(Under the lock) the run the turn goes to now, or None."""
        if self._holder is not None or self._between:
            return None
        if any(s.state == STARTING for s in self._seats.values()):
            return None
        exiting = any(s.state == EXITING for s in self._seats.values())
        for rid, seat in self._seats.items():  # the oldest ready run: the current one keeps its place
            if seat.state != READY:
                continue
            # a run's warm-up may begin while the one before exits (no measured step of
            # either: its measured steps wait for the reap), where there is room for it
            if exiting and (rid in self._went or not self._asked(self._room_to_step, rid)):
                continue
            return rid
        return None


#: seconds a run may wait for its turn before it says it waits (and its GPU sampler pauses)
SAID_AFTER_S = 0.05


class Gate:
    """A run's side of :class:`Turns`: :meth:`take` blocks until the run holds the turn.
    ``on_hold(bool, since)`` is told when the run starts (from ``since``, unix seconds) and stops waiting (its GPU sampler pauses:
    what the device does meanwhile is another run's).

    The run takes the turn at its first step and once more after its ``warmup`` steps, and
    says when its warm-up begins."""

    def __init__(self, conn: Any, warmup: int, on_hold=None):
        self.conn = conn
        self.warmup = warmup
        self.on_hold = on_hold or (lambda _waiting, _since=None: None)
        self._asked = False
        #: seconds spent waiting for the turn (no part of the run's training time)
        self.waited = 0.0

    def due(self, step: int) -> bool:
        """Whether the run gives the turn back after optimizer step ``step`` (1-based)."""
        return step == self.warmup

    def warming(self) -> None:
        """This run holds its first turn, its warm-up steps to come: the next run may start."""
        if self.warmup:
            try:
                self.conn.send(("warm",))
            except (OSError, ValueError):
                pass

    def take(self, footprint: float | None = None) -> Any:
        """Give the turn back (after the first time) and wait for it again. ``footprint``: GiB
        the process holds on its device (said once, with its first ask). Returns what the
        sweep sent with this turn, or None."""
        t0, asked_at = time.monotonic(), time.time()
        self.conn.send(("yield",) if self._asked else ("ready", os.getpid(), footprint))
        self._asked = True
        # a turn that comes at once (the first run's first) is no wait: nothing is said of it;
        # a wait is said as from when the turn was asked for
        waiting = not self.conn.poll(SAID_AFTER_S)
        if waiting:
            self.on_hold(True, asked_at)
        try:
            while True:
                msg = self.conn.recv()
                if msg == "go":
                    return None
                if isinstance(msg, tuple) and msg and msg[0] == "go":
                    return msg[1] if len(msg) > 1 else None
        finally:
            self.waited += time.monotonic() - t0
            if waiting:
                self.on_hold(False)

    def end(self) -> None:
        """No more steps: let the others go on once this process has exited."""
        try:
            self.conn.send(("end",))
        except (OSError, ValueError):
            pass
