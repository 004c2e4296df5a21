"""Where and when an append is tried again (part of :mod:`corelog.aio`).

:class:`Nodes` is where: a cluster's addresses and the one connection in use, replaced by
the rules of :mod:`._leadership` (docs/protocol.md §6.3). The :class:`~corelog.aio.Client`
is a :class:`Nodes` with requests on top; producers and subscriptions hold a bare one, so
that they need nothing from the client module.

:class:`Attempts` is when: plain appends, stream appends and idempotent producers all go
through it, which holds the failover budget, the back-off, and the outcome over all
attempts (docs/protocol.md §6).

The rule it keeps: a call may say ``not_written`` only if no attempt of it can still land.
An attempt that was handed to a connection and got no definite answer (the connection
broke, no answer in time, ``OutcomeUnknown``, ``ReplicationTimeout``) may land; after one,
the call's outcome is at best ``unknown`` — unless a later attempt of an idempotent
append gets a definite answer (its position, or ``duplicate``: the earlier one landed).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from . import codec
from .codec import Frame, Role
from .errors import (
    NOT_WRITTEN, UNKNOWN, WRITTEN, Cancelled, ClientClosed, ConfigError, ConnectionClosed, CorelogError, Fenced,
    NotLeader, NotSent, OutcomeUnknown, Overloaded, ReplicationTimeout, RequestTimeout, SequenceGap, ServerError,
    ShuttingDown, Unavailable, UnknownProducer, Unreachable,
)
from .types import ClientConfig, ServerInfo
from ._connection import _BACKOFF_MAX, _BACKOFF_START, Addrs, Connection, _check_addrs, _why, config_error, log
from ._leadership import NAMED, STAY, Seen

__all__ = ["Attempts", "MOVE", "LOST", "WAIT", "STOP", "Nodes", "step"]

N = TypeVar("N", bound="Nodes")

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


class Nodes:
    """A cluster's nodes, one connection at a time, shared by every task: which node to
    use, and where to go after a refusal or a lost connection (docs/protocol.md §6.3).

    ``addrs``: ``"host:port"`` or several, ``"A,B"`` (or a list), the nodes' client
    addresses; ``_shard``: use that shard's direct ports on them instead.
    """

    def __init__(self, addrs: Addrs, config: Optional[ClientConfig] = None, *,
                 _shard: Optional[int] = None, _given: Optional[List[str]] = None,
                 _parent: Optional["Nodes"] = None, **settings: Any) -> None:
        self.config = ClientConfig.of(config, **settings)
        given = _check_addrs(addrs)
        self._given = _given if _given is not None else given
        self._shard = _shard
        self._addrs = [codec.shard_addr(a, _shard) for a in given] if _shard is not None else given
        self._next = 0
        self._hint: Optional[str] = None
        self._conn: Optional[Connection] = None
        self._lock: Optional[asyncio.Lock] = None
        self._by_shard: Dict[int, "Nodes"] = {}
        self._closed = False
        #: The client whose shard count this one shares (shard clients: their maker).
        self._root: Nodes = _parent._root if _parent is not None else self
        self._count: Optional[int] = None
        #: What answers showed about leadership (docs/protocol.md §6.3); shared with the
        #: shard clients.
        self._seen: Seen = _parent._seen if _parent is not None else Seen()

    # ------------------------------------------------------------------ connections

    async def __aenter__(self: N) -> N:
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def connect(self: N) -> N:
        """Connects now (else the first request does): :class:`Unreachable` if no node
        answers, :class:`~corelog.errors.ConfigError` if the TLS settings cannot work."""
        await self._connection()
        return self

    async def close(self) -> None:
        """Closes the connections (this client's and its shard clients'); later calls
        raise :class:`~corelog.errors.ClientClosed`."""
        self._closed = True
        for c in list(self._by_shard.values()):
            await c.close()
        if self._conn is not None:
            await self._conn.aclose()
            self._conn = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def shard(self) -> Optional[int]:
        """The shard whose direct ports this client uses (``None``: the shared port)."""
        return self._shard

    async def info(self) -> ServerInfo:
        """The ``HelloOk`` of the current connection."""
        return (await self._connection()).info

    async def shard_count(self) -> int:
        """The cluster's shard count (from the first ``HelloOk``; it never changes)."""
        root = self._root
        if root._count is None:
            root._count = max(1, (await self._connection()).info.shard_count)
        return root._count

    async def _shard_count(self, attempts: Attempts) -> int:
        """:meth:`shard_count`, following leadership within ``attempts``' budget."""
        while True:
            try:
                return await self.shard_count_within(attempts.left())
            except Unreachable as e:
                await attempts.pause(e)

    async def shard_count_within(self, budget: float) -> int:
        """:meth:`shard_count`, connecting for at most ``budget`` seconds."""
        root = self._root
        if root._count is None:
            root._count = max(1, (await self._connection(budget)).info.shard_count)
        return root._count

    async def _connection(self, budget: Optional[float] = None) -> Connection:
        """The current connection, or a new one to the first address that answers and may
        carry appends (docs/protocol.md §6.3): a leader named by ``NotLeader`` first,
        suspects only when every address is one, each within ``connect_timeout`` (a lease
        once one is known) and all within ``budget`` seconds. :class:`Unreachable` if none
        answers; :class:`ConfigError` if none answers and one failed for a reason no retry
        cures."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            c = self._conn
            if c is not None and not c.closed:
                return c
            if self._closed:
                raise ClientClosed("the client is closed")
            loop = asyncio.get_running_loop()
            end = None if budget is None else loop.time() + budget
            errs = []
            bad: Optional[ConfigError] = None
            hint, self._hint = self._hint, None
            order = ([hint] if hint is not None else []) + \
                [self._addrs[(self._next + k) % len(self._addrs)] for k in range(len(self._addrs))]
            now = time.monotonic()
            fresh = [a for a in order if not self._seen.is_suspect(a, now)]
            for k, a in enumerate(fresh or order):
                connect = self._seen.connect_timeout(self.config.connect_timeout)
                timeout = connect if end is None else min(connect, end - loop.time())
                if timeout <= 0:
                    errs.append(f"{a}: failover budget spent")
                    break
                try:
                    c = await Connection.open(a, self.config, timeout=timeout, seen=self._seen)
                except (OSError, asyncio.TimeoutError, CorelogError) as e:
                    errs.append(f"{a}: {_why(e)}")
                    bad = bad or config_error(a, self.config, e)
                    if isinstance(e, asyncio.TimeoutError) and self._seen.lease is not None:
                        # No answer within a lease: not tried again until it expires.
                        self._seen.suspect(a, self._seen.epoch, time.monotonic())
                    if a is not hint:
                        self._next = (self._addrs.index(a) + 1) % len(self._addrs)
                    continue
                why = self._seen.usable(a, c.info.role, c.info.epoch, c.info.leadership, time.monotonic())
                if why is None:
                    self._conn = c
                    if a is not hint:
                        self._next = self._addrs.index(a)
                    return c
                c.close()
                errs.append(why)
                if a is not hint:
                    self._next = (self._addrs.index(a) + 1) % len(self._addrs)
            if bad is not None:
                raise bad
            log.info("no node reachable: %s", "; ".join(errs))
            raise Unreachable("no node reachable: " + "; ".join(errs))

    def _after_refusal(self, conn: Connection, err: CorelogError) -> None:
        """Where to go after the refusal ``err`` (nothing written) from ``conn``: the
        rules of :mod:`._leadership`, then :meth:`_move_on`."""
        code = getattr(err, "code", None)
        named = ""
        if isinstance(err, NotLeader) and err.leader:
            named = err.leader
            if self._shard is not None:
                try:
                    named = codec.shard_addr(named, self._shard)
                except ValueError:
                    named = ""
        where, to = self._seen.after_refusal(conn.addr, code, named, getattr(err, "hint", None), time.monotonic())
        if where == STAY and isinstance(err, ServerError) and not conn.closed:
            return  # the connection is kept: the next attempt goes on it after the pause
        self._move_on(conn, to if where in (NAMED, STAY) else None, shard_addr=False)

    def _move_on(self, old: Connection, to: Optional[str] = None, shard_addr: bool = True) -> None:
        """Drops ``old`` if it is still current; the next connection goes to ``to`` (a
        leader named by ``NotLeader``, or the same node: an address of the list, or one
        tried once first) or to the address after the current one. ``shard_addr``: ``to``
        is a client address (made the shard's direct one here)."""
        if to is not None and self._shard is not None and shard_addr:
            try:
                to = codec.shard_addr(to, self._shard)
            except ValueError:
                to = None
        if self._conn is old:
            self._conn = None
            old.retire()
            if to is not None and to in self._addrs:
                self._next = self._addrs.index(to)
            elif to is not None:
                self._hint = to
                self._next += 1
            else:
                self._next += 1
            log.info("leaving %s; next: %s", old.addr, to or self._addrs[self._next % len(self._addrs)])
