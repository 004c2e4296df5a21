"""Following leadership (docs/protocol.md §6.3), as the Rust client's ``leadership.rs``:
what a client has learned about which node leads in which epoch, and the decisions taken
on it. No I/O and no clock of its own (callers pass ``now``, a ``time.monotonic()``).

The rules, in short: remember the highest epoch any answer showed; never use a node that
leads an older epoch, or whose lease has lapsed, or that went silent while leading (a
*suspect*) — until a newer epoch shows, its suspicion expires, or a follower reports its
lease live again a lease after it went silent; follow a ``NotLeader`` to the node it
names unless the name is stale or suspect; when no node holds a live lease, ask the node
that said so again after its retry hint (it is the one taking over).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from .codec import ErrorCode, Hint, LeaderState, Leadership, Role

__all__ = ["Seen", "NAMED", "STAY", "OTHER"]

#: Go to the leader the refusal named.
NAMED = "named"
#: Ask the node that refused again (after the pause): a take-over is under way there.
STAY = "stay"
#: The next address of the list.
OTHER = "other"

_SUSPECT_LEASES = 4
_SUSPECT_MIN = 1.0
_SUSPECT_NO_LEASE = 2.0
_MIN_WAIT = 0.1


class Seen:
    """What one client (and its shard clients) has learned."""

    def __init__(self) -> None:
        #: The highest epoch a leader's ``HelloOk`` or any hint showed.
        self.epoch = 0
        #: The lease the nodes advertise, in seconds (``None``: not known).
        self.lease: Optional[float] = None
        self._suspects: Dict[str, Tuple[int, float]] = {}

    def learn_epoch(self, epoch: int) -> None:
        """Notes an epoch; suspects of older epochs are forgiven."""
        if epoch > self.epoch:
            self.epoch = epoch
            self._suspects = {a: s for a, s in self._suspects.items() if s[0] >= epoch}

    def learn(self, leadership: Optional[Leadership]) -> None:
        """Notes the lease a version-3 ``HelloOk`` advertises."""
        if leadership is not None and leadership.lease_ms > 0:
            self.lease = leadership.lease_ms / 1000

    def suspect(self, addr: str, epoch: int, now: float) -> None:
        """``addr`` went silent, or lapsed, while leading ``epoch``."""
        self._suspects[addr] = (epoch, now)

    def _suspicion(self) -> float:
        return _SUSPECT_NO_LEASE if self.lease is None else max(self.lease * _SUSPECT_LEASES, _SUSPECT_MIN)

    def is_suspect(self, addr: str, now: float) -> bool:
        s = self._suspects.get(addr)
        return s is not None and now - s[1] < self._suspicion()

    def usable(self, addr: str, role: Role, epoch: int, leadership: Optional[Leadership], now: float
               ) -> Optional[str]:
        """``None`` if a connection whose ``HelloOk`` said this may carry appends, else why
        not (a leader of an older epoch than one seen, or whose lease lapsed: ``addr``
        becomes a suspect; a fenced node). Followers are usable (they refuse with a hint)."""
        self.learn(leadership)
        view = max(epoch, leadership.epoch) if leadership is not None else epoch
        if role == Role.LEADER and epoch < self.epoch:
            self.suspect(addr, epoch, now)
            return f"{addr} leads epoch {epoch}, older than epoch {self.epoch} seen: a former leader"
        if role == Role.LEADER and leadership is not None and leadership.state == LeaderState.LAPSED:
            self.suspect(addr, epoch, now)
            return f"{addr} leads epoch {epoch} but its lease has lapsed"
        self.learn_epoch(view)
        if role == Role.LEADER:
            self._suspects.pop(addr, None)
            return None
        if role == Role.FENCED:
            return f"{addr} is fenced (a former leader)"
        return None

    def after_refusal(self, at: str, code: Optional[int], named: str, hint: Optional[Hint], now: float
                      ) -> Tuple[str, str]:
        """Where to go after a refusal with ``code`` from ``at``: ``(NAMED, addr)``,
        ``(STAY, at)`` or ``(OTHER, "")``."""
        if hint is not None:
            self.learn_epoch(hint.epoch)
        lapsed = hint is not None and hint.state == LeaderState.LAPSED
        if code == ErrorCode.NOT_LEADER and not named:
            return (STAY, at) if lapsed else (OTHER, "")
        if code == ErrorCode.NOT_LEADER:
            epoch = hint.epoch if hint is not None else self.epoch
            if epoch < self.epoch:
                return OTHER, ""  # a stale name
            s = self._suspects.get(named)
            if s is not None:
                wait = self.lease if self.lease is not None else _SUSPECT_NO_LEASE
                live_since = hint is not None and hint.state == LeaderState.LIVE and now - s[1] >= wait
                if self.is_suspect(named, now) and not live_since:
                    return STAY, at  # it went silent: wait for a new epoch here
                self._suspects.pop(named, None)  # it beat again since
            return NAMED, named
        if code == ErrorCode.UNAVAILABLE and lapsed:
            self.suspect(at, hint.epoch if hint is not None else self.epoch, now)
            return OTHER, ""
        return OTHER, ""

    def probe_after(self) -> Optional[float]:
        """A request waiting this long with nothing received gets a probe."""
        return None if self.lease is None else max(self.lease / 2, _MIN_WAIT / 2)

    def silent_limit(self) -> Optional[float]:
        """A connection silent this long while a request waits is abandoned."""
        return None if self.lease is None else max(self.lease, _MIN_WAIT)

    def connect_timeout(self, configured: float) -> float:
        """The configured timeout, or a lease when one is known."""
        return configured if self.lease is None else min(configured, max(self.lease, _MIN_WAIT))
