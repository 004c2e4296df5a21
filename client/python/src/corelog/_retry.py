"""The one retry path of every append (part of :mod:`corelog.aio`): plain appends, stream
appends and idempotent producers all go through :class:`Attempts`, which holds the
failover budget, the back-off, and the outcome over all attempts (docs/protocol.md §6).

The rule it keeps: a call may say ``not_written`` only if no attempt of it can still land.
An attempt that was handed to a connection and got no definite answer (the connection
broke, no answer in time, ``OutcomeUnknown``, ``ReplicationTimeout``) may land; after one,
the call's outcome is at best ``unknown`` — unless a later attempt of an idempotent
append gets a definite answer (its position, or ``duplicate``: the earlier one landed).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional, Tuple

from .codec import Frame, Role
from .errors import (
    NOT_WRITTEN, UNKNOWN, WRITTEN, Cancelled, ConnectionClosed, CorelogError, Fenced, NotLeader, NotSent,
    OutcomeUnknown, Overloaded, ReplicationTimeout, RequestTimeout, SequenceGap, ServerError, ShuttingDown,
    Unavailable, UnknownProducer, Unreachable,
)
from .types import ClientConfig
from ._connection import _BACKOFF_MAX, _BACKOFF_START, log

__all__ = ["Attempts", "MOVE", "LOST", "WAIT", "STOP", "step"]

#: Nothing was written here: try again, on another node (or the leader the error names).
MOVE = "move"
#: The attempt may have landed: an idempotent append is sent again, a plain one is not.
LOST = "lost"
#: An idempotent append waits for an earlier sequence of its producer, then goes again.
WAIT = "wait"
#: A definite answer that no retry changes.
STOP = "stop"

_MOVE = (NotLeader, Unavailable, Fenced, ShuttingDown, Overloaded, Unreachable, NotSent)
_LOST = (ConnectionClosed, RequestTimeout, OutcomeUnknown, ReplicationTimeout)
_WAIT = (SequenceGap, UnknownProducer)


def step(err: CorelogError) -> str:
    """What an append does after an attempt failed with ``err``: :data:`MOVE`,
    :data:`LOST`, :data:`WAIT` (only producers meet these) or :data:`STOP`."""
    if isinstance(err, _MOVE):
        return MOVE
    if isinstance(err, _LOST):
        return LOST
    if isinstance(err, _WAIT):
        return WAIT
    return STOP


class Attempts:
    """One append's attempts: budget (``failover_timeout`` from the start, or from the
    first failure for a producer), back-off (20 ms doubling to 100 ms, or the retry hint
    of a version-3 refusal), and what they may have left in the log."""

    def __init__(self, cfg: ClientConfig, what: str, start: bool = True) -> None:
        self.cfg = cfg
        self.what = what
        self.deadline: Optional[float] = time.monotonic() + cfg.failover_timeout if start else None
        self._backoff = _BACKOFF_START
        #: The last retry hint a refusal gave (a take-over under way): later pauses of
        #: this append use it too.
        self._hint: Optional[float] = None
        #: Attempts handed to a connection.
        self.sent = 0
        #: Some attempt got no definite answer: it may be in the log.
        self.in_doubt = False
        #: The last attempt was handed to a connection and is not answered yet.
        self.flying = False
        #: Called once, right before the first attempt is handed to a connection; False
        #: withdraws the append (the blocking API's ``Future.cancel()``).
        self.gate: Optional[Callable[[], bool]] = None

    def start(self) -> None:
        """Starts the budget now if it has not started (a producer's, at its first failure)."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.cfg.failover_timeout

    def left(self) -> float:
        """Seconds of budget left (the whole budget if it has not started)."""
        if self.deadline is None:
            return self.cfg.failover_timeout
        return max(0.0, self.deadline - time.monotonic())

    def sending(self) -> None:
        """Counts an attempt about to be handed to a connection (after the gate)."""
        if self.sent == 0 and self.gate is not None and not self.gate():
            raise Cancelled(NOT_WRITTEN, why=f"{self.what} withdrawn before it was sent")
        self.sent += 1
        self.flying = True

    def unsent(self) -> None:
        """The attempt just counted was refused before it left (:class:`NotSent`)."""
        self.sent -= 1
        self.flying = False

    def answered(self, err: CorelogError) -> str:
        """Notes the last attempt's failure; returns its :func:`step`."""
        self.flying = False
        s = step(err)
        if s == LOST:
            self.in_doubt = True
        return s

    def answered_on(self, conn: Any, err: CorelogError) -> Tuple[str, CorelogError]:
        """:meth:`answered` for an attempt on ``conn``. A connection to a follower never
        writes an append (a node that takes over closes the connections greeted as a
        follower's first; other role changes restart its process): an attempt lost there
        was not written, and is answered as such."""
        if conn.info.role == Role.FOLLOWER and step(err) == LOST and not isinstance(err, ServerError):
            self.flying = False
            return MOVE, Unreachable(f"{conn.addr}: a follower's connection ended before its answer ({err}); "
                                     "a follower writes nothing")
        return self.answered(err), err

    def outcome(self, err: Optional[CorelogError] = None) -> str:
        """The call's outcome if it ended now with ``err`` (``None``: cancelled)."""
        own = err.outcome if err is not None else (UNKNOWN if self.flying else NOT_WRITTEN)
        if own == NOT_WRITTEN and self.in_doubt:
            return UNKNOWN
        return own

    def fail(self, err: CorelogError) -> CorelogError:
        """``err`` as the call's error: its outcome over all attempts, ``attempts`` set."""
        outcome = self.outcome(err)
        if outcome != err.outcome:
            err.args = (f"{err.args[0] if err.args else err}; outcome unknown: an earlier attempt of this "
                        f"{self.what} got no answer and may still be written",)
            err.outcome = outcome
        err.attempts = self.sent
        if outcome != NOT_WRITTEN or self.sent > 1:
            log.warning("%s failed after %d attempt(s), outcome %s: %s", self.what, self.sent, outcome, err)
        return err

    async def pause(self, err: CorelogError) -> None:
        """Sleeps the back-off (or the retry hint ``err`` carries: a take-over under way,
        ask again soon without growing the back-off) before the next attempt; raises
        :meth:`fail` of ``err`` when the budget would end first."""
        self.start()
        assert self.deadline is not None
        hint = getattr(err, "hint", None)
        hinted = hint.retry_ms / 1000 if hint is not None and hint.retry_ms > 0 else self._hint
        self._hint = hinted
        wait = self._backoff if hinted is None else hinted
        if time.monotonic() + wait >= self.deadline:
            raise self.fail(err)
        log.info("%s: attempt %d failed (%s); retrying in %d ms", self.what, self.sent, err, round(wait * 1000))
        await asyncio.sleep(wait)
        if hinted is None:
            self._backoff = min(self._backoff * 2, _BACKOFF_MAX)

    def cancelled(self, fut: "Optional[asyncio.Future[Frame]]" = None,
                  parse: Optional[Callable[[Frame], Any]] = None) -> Cancelled:
        """The :class:`~corelog.errors.Cancelled` to raise when the caller is cancelled
        while ``fut`` (the answer to the last attempt, if one was sent) is pending: exact
        when the answer had already arrived, else ``unknown`` once anything was sent."""
        if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None and parse:
            try:
                return Cancelled(WRITTEN, parse(fut.result()), f"{self.what} was answered first")
            except CorelogError as e:
                if step(e) != LOST:
                    return Cancelled(self.outcome(e), why=f"{self.what} was refused first: {e}")
        outcome = self.outcome()
        why = "its request may have left" if outcome == UNKNOWN else "nothing was sent"
        log.info("%s cancelled after %d attempt(s): outcome %s", self.what, self.sent, outcome)
        return Cancelled(outcome, why=f"{self.what}: {why}")
