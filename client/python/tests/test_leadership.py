"""The leadership rules of docs/protocol.md §6.3 (``corelog._leadership``), the same
cases as the Rust client's ``leadership.rs`` tests: pure, no server."""

from __future__ import annotations

from corelog._leadership import NAMED, OTHER, STAY, Seen
from corelog.codec import ErrorCode, Hint, LeaderState, Leadership, Role

A = "10.0.0.1:9400"
B = "10.0.0.2:9400"
NL, UN = ErrorCode.NOT_LEADER, ErrorCode.UNAVAILABLE


def lease(ms: int, epoch: int, state: LeaderState) -> Leadership:
    return Leadership(ms, epoch, state)


def hint(epoch: int, state: LeaderState) -> Hint:
    return Hint(epoch, state, 50)


def test_a_leader_of_an_older_epoch_or_with_a_lapsed_lease_is_not_used() -> None:
    s, t = Seen(), 100.0
    assert s.usable(B, Role.LEADER, 7, lease(400, 7, LeaderState.LIVE), t) is None
    assert (s.epoch, s.lease) == (7, 0.4)
    why = s.usable(A, Role.LEADER, 5, lease(400, 5, LeaderState.LIVE), t)
    assert why is not None and "former leader" in why and s.is_suspect(A, t)
    why = s.usable(B, Role.LEADER, 7, lease(400, 7, LeaderState.LAPSED), t)
    assert why is not None and "lapsed" in why and s.is_suspect(B, t)
    # A follower is usable and teaches the epoch it knows; older suspects are forgiven.
    assert s.usable(A, Role.FOLLOWER, 6, lease(400, 9, LeaderState.LIVE), t) is None
    assert s.epoch == 9 and not s.is_suspect(A, t) and not s.is_suspect(B, t)
    assert s.usable(A, Role.FENCED, 6, None, t) is not None


def test_not_leader_is_followed_unless_the_name_is_stale_or_went_silent() -> None:
    s, t = Seen(), 100.0
    s.learn(lease(400, 5, LeaderState.LIVE))
    assert s.after_refusal(B, NL, A, hint(5, LeaderState.LIVE), t) == (NAMED, A)
    assert s.after_refusal(B, NL, A, None, t) == (NAMED, A)
    s.learn_epoch(7)
    assert s.after_refusal(B, NL, A, hint(5, LeaderState.LIVE), t) == (OTHER, ""), "a stale name"
    s.suspect(A, 7, t)
    assert s.after_refusal(B, NL, A, hint(7, LeaderState.LIVE), t + 0.1) == (STAY, B)
    assert s.after_refusal(B, NL, A, hint(7, LeaderState.LIVE), t + 0.4) == (NAMED, A), "it beat again"
    assert not s.is_suspect(A, t + 0.4)


def test_no_live_leader_means_asking_the_same_node_again() -> None:
    s, t = Seen(), 100.0
    assert s.after_refusal(B, NL, "", hint(7, LeaderState.LAPSED), t) == (STAY, B)
    assert s.epoch == 7
    assert s.after_refusal(B, NL, "", None, t) == (OTHER, "")
    assert s.after_refusal(A, UN, "", hint(7, LeaderState.LAPSED), t) == (OTHER, "")
    assert s.is_suspect(A, t)
    assert s.after_refusal(B, UN, "", hint(7, LeaderState.LIVE), t) == (OTHER, "")
    assert not s.is_suspect(B, t)


def test_suspicion_expires_and_times_follow_the_lease() -> None:
    s, t = Seen(), 100.0
    assert (s.probe_after(), s.silent_limit(), s.connect_timeout(3.0)) == (None, None, 3.0)
    s.suspect(A, 3, t)
    assert s.is_suspect(A, t + 1.999) and not s.is_suspect(A, t + 2.001)
    s.learn(lease(400, 3, LeaderState.LIVE))
    assert (s.probe_after(), s.silent_limit(), s.connect_timeout(3.0)) == (0.2, 0.4, 0.4)
    assert s.is_suspect(A, t + 1.599) and not s.is_suspect(A, t + 1.601)
    s.learn(lease(100, 3, LeaderState.LIVE))
    assert (s.probe_after(), s.silent_limit()) == (0.05, 0.1)
    assert not s.is_suspect(A, t + 1.0), "at least a second"
