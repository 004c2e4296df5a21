//! Which data path each TLS connection took: counted per connection kind and logged the
//! first time per thread, so an operator sees why kernel TLS was not used without a log
//! line per connection.

use std::cell::RefCell;
use std::collections::HashSet;

thread_local! {
    static SAID: RefCell<HashSet<(&'static str, bool)>> = RefCell::new(HashSet::new());
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("main").to_string()
}

/// Counts a TLS connection's data path (`corelog_ktls_connections_total{conn,path}`) and
/// logs the first of each kind per thread, with the reason when it stayed in userspace
/// although kernel TLS is available.
pub fn report(conn: &'static str, kernel: bool, why: Option<&str>) {
    debug_assert!(!(kernel && why.is_some()), "kTLS report: a reason given for a connection in the kernel");
    metrics::counter!("corelog_ktls_connections_total", "conn" => conn, "path" => if kernel { "kernel" } else { "userspace" })
        .increment(1);
    if !kernel && why.is_none() {
        return; // kTLS unavailable: said once at start-up
    }
    let first = SAID.with(|s| s.borrow_mut().insert((conn, kernel)));
    if first {
        match why {
            None => log::info!("{}: kernel TLS active on {conn} connections", thread_name()),
            Some(w) => {
                log::info!("{}: kernel TLS not used on a {conn} connection: {w}; userspace rustls", thread_name())
            }
        }
    }
}
