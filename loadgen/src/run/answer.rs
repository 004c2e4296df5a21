//! The answer to one append: response frames read as the driver needs them, and in
//! failover mode the lease rules for a silent leader (probe, then give up).

use std::cell::RefCell;
use std::time::Instant;

use corelog_client::codec::{decode_frame, ErrorCode, Hint, Leadership, Request, Response, Role, CLIENT_VERSION};
use corelog_client::leadership::{Seen, PROBE_ID};
use corelog_runtime::tls_io::Reader;
use corelog_runtime::watchdog::Watchdog;

use super::link::Link;
use super::RunConfig;

/// One response frame, as the driver needs it.
pub(super) enum Answer {
    /// `Appended` / `Appended2`.
    Appended,
    /// An error frame (its hint, on a version-3 connection that carries one).
    Refused { code: u16, message: String, hint: Option<Hint> },
    /// The answer to a probe.
    Probe { role: Role, epoch: u32, leadership: Option<Leadership> },
    /// Anything else (an opcode not expected here).
    Other,
}

/// Reads one response frame.
async fn next(r: &mut Reader) -> Result<Answer, String> {
    loop {
        if let Some((f, used)) = decode_frame(r.data()).map_err(|e| e.to_string())? {
            let a = match Response::parse(&f) {
                Ok(Response::Appended { .. } | Response::Appended2 { .. }) => Answer::Appended,
                Ok(Response::Error { code, message }) => {
                    Answer::Refused { code, message: message.to_string(), hint: None }
                }
                Ok(Response::Refusal { code, message, hint }) => {
                    Answer::Refused { code, message: message.to_string(), hint: Some(hint) }
                }
                Ok(Response::WrongVersion { message, .. }) => Answer::Refused {
                    code: ErrorCode::WrongExpectedVersion as u16,
                    message: message.to_string(),
                    hint: None,
                },
                Ok(Response::HelloOk { role, epoch, leadership, .. }) if f.req_id == PROBE_ID => {
                    Answer::Probe { role, epoch, leadership }
                }
                Ok(_) => Answer::Other,
                Err(e) => return Err(e.to_string()),
            };
            r.consume(used);
            return Ok(a);
        }
        if !r.fill().await.map_err(|e| e.to_string())? {
            return Err("server closed the connection".into());
        }
    }
}

/// Why an append got no answer.
pub(super) enum NoAnswer {
    /// Nothing within the run's `--timeout`.
    Timeout,
    /// The connection broke.
    Broken,
    /// Given up: silent for a whole lease, or a probe showed the node no longer leads
    /// with a live lease (`Seen::usable`); the node is a suspect now.
    Abandoned,
}

/// The answer to the append just sent on `c`. Failover mode, against a leader that
/// advertises a lease: probed after half a lease of silence (a `Hello` answered at once
/// by a live node), abandoned after a whole one (docs/protocol.md §6.3). The read is
/// never dropped half-way: the probe is written while it waits.
pub(super) async fn answer(
    c: &mut Link,
    cfg: &RunConfig,
    seen: &RefCell<Seen>,
    watchdog: &mut Watchdog,
) -> Result<Answer, NoAnswer> {
    let sent = Instant::now();
    // The plain read unless failover against a leasing leader: this is every append's
    // path, and the load generator shares the CPUs with the servers it measures.
    let limits = if cfg.failover && c.leases {
        let s = seen.borrow();
        s.probe_after().zip(s.silent_limit())
    } else {
        None
    };
    let Some((probe_after, silent)) = limits else {
        return match watchdog.within(sent, cfg.timeout, next(&mut c.r)).await {
            Some(Ok(a)) => Ok(a),
            Some(Err(_)) => Err(NoAnswer::Broken),
            None => Err(NoAnswer::Timeout),
        };
    };
    let addr = cfg.targets[c.alt % cfg.targets.len()].to_string();
    let mut heard = sent;
    let mut probed = false;
    loop {
        let read = next(&mut c.r);
        let mut read = std::pin::pin!(read);
        loop {
            let due = if probed { heard + silent } else { heard + probe_after };
            let limit = due.min(sent + cfg.timeout).saturating_duration_since(sent);
            match watchdog.within(sent, limit, read.as_mut()).await {
                Some(Ok(Answer::Probe { role, epoch, leadership })) => {
                    if seen.borrow_mut().usable(&addr, role, epoch, leadership, Instant::now()).is_err() {
                        return Err(NoAnswer::Abandoned);
                    }
                    (heard, probed) = (Instant::now(), false);
                    break; // read the next frame
                }
                Some(Ok(a)) => return Ok(a),
                Some(Err(_)) => return Err(NoAnswer::Broken),
                None if Instant::now() >= sent + cfg.timeout => return Err(NoAnswer::Timeout),
                None if probed => {
                    seen.borrow_mut().suspect(&addr, c.epoch, Instant::now());
                    return Err(NoAnswer::Abandoned);
                }
                None => {
                    let mut probe = Vec::new();
                    Request::Hello { version: CLIENT_VERSION }.encode(PROBE_ID, &mut probe);
                    if c.w.write(&probe).await.is_err() {
                        return Err(NoAnswer::Broken);
                    }
                    probed = true;
                }
            }
        }
    }
}
