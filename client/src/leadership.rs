//! Following leadership (docs/protocol.md §6.3): what a client has learned about which
//! node leads in which epoch, and the decisions taken on it. No I/O and no clock of its
//! own (the caller passes `now`), so every rule is unit-tested here; `client/` and
//! `producer.rs` act on the answers, and so does the load generator.
//!
//! The rules, in short: remember the highest epoch any answer showed; never use a node
//! that leads an older epoch, or whose lease has lapsed, or that went silent while
//! leading (a *suspect*) — until a newer epoch shows, its suspicion expires, or a
//! follower reports its lease live again a lease after it went silent; follow a
//! `NotLeader` to the node it names unless the name is stale or suspect; when no node
//! holds a live lease, ask the node that said so again after its retry hint (it is the
//! one taking over).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::codec::{ErrorCode, Hint, LeaderState, Leadership, Role};

/// `req_id` of a probe (a repeated `Hello` on a connection where a request waits): a
/// number no client's own request counter reaches.
pub const PROBE_ID: u64 = u64::MAX;

/// How long a suspect stays one, in leases (at least `SUSPECT_MIN`): long enough for a
/// take-over (a lease of silence, then a restart), short enough that a node that was
/// merely slow is tried again soon.
const SUSPECT_LEASES: u32 = 4;
const SUSPECT_MIN: Duration = Duration::from_secs(1);
/// Suspicion without a known lease (static roles, older servers).
const SUSPECT_NO_LEASE: Duration = Duration::from_secs(2);
/// Shortest wait for a silent connection or a slow connect, whatever the lease.
const MIN_WAIT: Duration = Duration::from_millis(100);

/// Where an append goes after a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The leader the refusal named.
    Named(String),
    /// The node that refused, again (after the pause): a take-over is under way there,
    /// or it will name the new leader.
    Stay,
    /// The next address of the list.
    Other,
}

#[derive(Debug, Clone, Copy)]
struct Suspect {
    epoch: u32,
    since: Instant,
}

/// What one client (and its shard clients) has learned; shared behind a mutex, never
/// held across an await.
#[derive(Debug, Default)]
pub struct Seen {
    /// The highest epoch a leader's `HelloOk` or any hint showed.
    pub epoch: u32,
    /// The lease the nodes advertise (version-3 `HelloOk`); `None`: not known.
    pub lease: Option<Duration>,
    suspects: HashMap<String, Suspect>,
}

impl Seen {
    /// Notes an epoch shown by any answer; suspects of older epochs are forgiven (their
    /// leadership is over: at worst they answer as a former leader, refused then).
    pub fn learn_epoch(&mut self, epoch: u32) {
        if epoch > self.epoch {
            self.epoch = epoch;
            self.suspects.retain(|_, s| s.epoch >= epoch);
        }
    }

    /// Notes the lease a version-3 `HelloOk` advertises.
    pub fn learn(&mut self, l: Option<Leadership>) {
        if let Some(l) = l {
            if l.lease_ms > 0 {
                self.lease = Some(Duration::from_millis(l.lease_ms as u64));
            }
        }
    }

    /// `addr` went silent, or lapsed, while leading `epoch`.
    pub fn suspect(&mut self, addr: &str, epoch: u32, now: Instant) {
        self.suspects.insert(addr.to_string(), Suspect { epoch, since: now });
    }

    fn suspicion(&self) -> Duration {
        self.lease.map_or(SUSPECT_NO_LEASE, |l| (l * SUSPECT_LEASES).max(SUSPECT_MIN))
    }

    pub fn is_suspect(&self, addr: &str, now: Instant) -> bool {
        self.suspects.get(addr).is_some_and(|s| now.saturating_duration_since(s.since) < self.suspicion())
    }

    /// Whether a connection whose `HelloOk` said this may carry appends. `Err`: why not
    /// (a leader of an older epoch than one seen, or one whose lease lapsed: `addr`
    /// becomes a suspect; a fenced node). Followers are usable: they refuse with a hint.
    pub fn usable(
        &mut self,
        addr: &str,
        role: Role,
        epoch: u32,
        leadership: Option<Leadership>,
        now: Instant,
    ) -> Result<(), String> {
        self.learn(leadership);
        let view = leadership.map_or(epoch, |l| l.epoch.max(epoch));
        match role {
            Role::Leader if epoch < self.epoch => {
                self.suspect(addr, epoch, now);
                Err(format!("{addr} leads epoch {epoch}, older than epoch {} seen: a former leader", self.epoch))
            }
            Role::Leader if leadership.is_some_and(|l| l.state == LeaderState::Lapsed) => {
                self.suspect(addr, epoch, now);
                Err(format!("{addr} leads epoch {epoch} but its lease has lapsed"))
            }
            Role::Leader => {
                self.learn_epoch(view);
                self.suspects.remove(addr);
                Ok(())
            }
            Role::Follower => {
                self.learn_epoch(view);
                Ok(())
            }
            Role::Fenced => {
                self.learn_epoch(view);
                Err(format!("{addr} is fenced (a former leader)"))
            }
        }
    }

    /// Where to go after `code` from the node at `at`; `named`: the message (a
    /// `NotLeader`'s leader address), `hint`: the version-3 trailer, if any.
    pub fn after_refusal(
        &mut self,
        at: &str,
        code: Option<ErrorCode>,
        named: &str,
        hint: Option<Hint>,
        now: Instant,
    ) -> Target {
        if let Some(h) = hint {
            self.learn_epoch(h.epoch);
        }
        let lapsed = hint.is_some_and(|h| h.state == LeaderState::Lapsed);
        match code {
            Some(ErrorCode::NotLeader) if named.is_empty() => {
                if lapsed {
                    Target::Stay
                } else {
                    Target::Other
                }
            }
            Some(ErrorCode::NotLeader) => {
                let epoch = hint.map_or(self.epoch, |h| h.epoch);
                if epoch < self.epoch {
                    return Target::Other; // a stale name
                }
                if let Some(s) = self.suspects.get(named).copied() {
                    let live_since = hint.is_some_and(|h| h.state == LeaderState::Live)
                        && now.saturating_duration_since(s.since) >= self.lease.unwrap_or(SUSPECT_NO_LEASE);
                    if self.is_suspect(named, now) && !live_since {
                        return Target::Stay; // it went silent: wait for a new epoch here
                    }
                    self.suspects.remove(named); // it beat again since
                }
                Target::Named(named.to_string())
            }
            Some(ErrorCode::Unavailable) if lapsed => {
                // A leader past its lease: someone else may be taking over.
                let epoch = hint.map_or(self.epoch, |h| h.epoch);
                self.suspect(at, epoch, now);
                Target::Other
            }
            _ => Target::Other,
        }
    }

    /// A request waiting this long with nothing received on its connection gets a probe
    /// (a `Hello` on the same connection, answered at once by a live node).
    pub fn probe_after(&self) -> Option<Duration> {
        self.lease.map(|l| (l / 2).max(MIN_WAIT / 2))
    }

    /// A connection silent this long while a request waits is abandoned: its node
    /// cannot have acknowledged anything within its lease (the lease must have lapsed),
    /// so what waits there is outcome-unknown and the client moves on.
    pub fn silent_limit(&self) -> Option<Duration> {
        self.lease.map(|l| l.max(MIN_WAIT))
    }

    /// How long opening a connection may take: the configured timeout, or a lease when
    /// one is known (a node that does not answer within it is tried again later).
    pub fn connect_timeout(&self, configured: Duration) -> Duration {
        self.lease.map_or(configured, |l| configured.min(l.max(MIN_WAIT)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "10.0.0.1:9400";
    const B: &str = "10.0.0.2:9400";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn lease(ms_: u32, epoch: u32, state: LeaderState) -> Option<Leadership> {
        Some(Leadership { lease_ms: ms_, epoch, state })
    }

    fn hint(epoch: u32, state: LeaderState) -> Option<Hint> {
        Some(Hint { epoch, state, retry_ms: 50 })
    }

    #[test]
    fn a_leader_of_an_older_epoch_or_with_a_lapsed_lease_is_not_used() {
        let t = Instant::now();
        let mut s = Seen::default();
        assert!(s.usable(B, Role::Leader, 7, lease(400, 7, LeaderState::Live), t).is_ok());
        assert_eq!((s.epoch, s.lease), (7, Some(ms(400))));
        let e = s.usable(A, Role::Leader, 5, lease(400, 5, LeaderState::Live), t).unwrap_err();
        assert!(e.contains("former leader"), "{e}");
        assert!(s.is_suspect(A, t));
        let e = s.usable(B, Role::Leader, 7, lease(400, 7, LeaderState::Lapsed), t).unwrap_err();
        assert!(e.contains("lapsed") && s.is_suspect(B, t), "{e}");
        // A follower is usable (it refuses with a hint) and teaches the epoch it knows.
        assert!(s.usable(A, Role::Follower, 6, lease(400, 9, LeaderState::Live), t).is_ok());
        assert_eq!(s.epoch, 9);
        assert!(!s.is_suspect(A, t) && !s.is_suspect(B, t), "suspects of older epochs are forgiven");
        assert!(s.usable(A, Role::Fenced, 6, None, t).is_err());
    }

    #[test]
    fn not_leader_is_followed_unless_the_name_is_stale_or_went_silent() {
        let t = Instant::now();
        let mut s = Seen::default();
        s.learn(lease(400, 5, LeaderState::Live));
        let nl = Some(ErrorCode::NotLeader);
        assert_eq!(s.after_refusal(B, nl, A, hint(5, LeaderState::Live), t), Target::Named(A.into()));
        // An older server: no hint, a name.
        assert_eq!(s.after_refusal(B, nl, A, None, t), Target::Named(A.into()));
        s.learn_epoch(7);
        assert_eq!(s.after_refusal(B, nl, A, hint(5, LeaderState::Live), t), Target::Other, "a stale name");
        // A went silent while leading 7: the follower still names it (its lease has not
        // run out yet); stay with the follower, which will take over.
        s.suspect(A, 7, t);
        assert_eq!(s.after_refusal(B, nl, A, hint(7, LeaderState::Live), t + ms(100)), Target::Stay);
        // A lease later the follower still sees A live: A beat again since.
        assert_eq!(s.after_refusal(B, nl, A, hint(7, LeaderState::Live), t + ms(400)), Target::Named(A.into()));
        assert!(!s.is_suspect(A, t + ms(400)));
    }

    #[test]
    fn no_live_leader_means_asking_the_same_node_again() {
        let t = Instant::now();
        let mut s = Seen::default();
        let nl = Some(ErrorCode::NotLeader);
        assert_eq!(s.after_refusal(B, nl, "", hint(7, LeaderState::Lapsed), t), Target::Stay);
        assert_eq!(s.epoch, 7);
        // Without a hint (an older server) an empty NotLeader still means "elsewhere".
        assert_eq!(s.after_refusal(B, nl, "", None, t), Target::Other);
        // A leader past its lease: elsewhere, and not back to it for a while.
        let un = Some(ErrorCode::Unavailable);
        assert_eq!(s.after_refusal(A, un, "lapsed", hint(7, LeaderState::Lapsed), t), Target::Other);
        assert!(s.is_suspect(A, t));
        // Unavailable for another reason (its epoch not accepted yet): just elsewhere.
        assert_eq!(s.after_refusal(B, un, "", hint(7, LeaderState::Live), t), Target::Other);
        assert!(!s.is_suspect(B, t));
    }

    #[test]
    fn suspicion_expires_and_times_follow_the_lease() {
        let t = Instant::now();
        let mut s = Seen::default();
        assert_eq!((s.probe_after(), s.silent_limit()), (None, None), "no lease known: no probes");
        assert_eq!(s.connect_timeout(ms(3000)), ms(3000));
        s.suspect(A, 3, t);
        assert!(s.is_suspect(A, t + ms(1999)) && !s.is_suspect(A, t + ms(2000)));
        s.learn(lease(400, 3, LeaderState::Live));
        assert_eq!((s.probe_after(), s.silent_limit()), (Some(ms(200)), Some(ms(400))));
        assert_eq!(s.connect_timeout(ms(3000)), ms(400));
        assert!(s.is_suspect(A, t + ms(1599)) && !s.is_suspect(A, t + ms(1600)));
        s.learn(lease(100, 3, LeaderState::Live));
        assert_eq!((s.probe_after(), s.silent_limit()), (Some(ms(50)), Some(ms(100))));
        assert!(!s.is_suspect(A, t + SUSPECT_MIN), "at least SUSPECT_MIN");
    }
}
