//! Admin HTTP server (tokio, on `--admin-addr`): `/metrics`, `/healthz`,
//! `/readyz`. `/healthz` is 503, naming the thread, when a pipeline
//! thread's loop stops turning ([`crate::health`]).
//!
//! hyper's HTTP/1.1 server with keep-alive, GET and HEAD, a request head
//! size limit, a header read timeout, a bounded number of connections and
//! a graceful stop (`server`); the answers are in `routes`. It runs on
//! the process's I/O runtime and reads shared flags ([`Readiness`], the
//! [`Metrics`](crate::metrics::Metrics) registry); it never touches the pipeline threads.

use crate::health::Liveness;
use crate::health::SourceReadiness;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[cfg(test)]
mod http_tests;
mod routes;
mod server;

pub use server::{serve, start, AdminConfig, AdminServer};

/// Readiness as `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Readiness {
    /// Source side: joined, shutting down.
    pub source: Arc<SourceReadiness>,
    /// The last sink probe succeeded.
    pub sinks_connected: AtomicBool,
    /// What the last failed sink probe said.
    pub sink_error: Mutex<Option<String>>,
    /// The pipeline threads' heartbeats (`/healthz`).
    pub liveness: Arc<Liveness>,
}

impl Readiness {
    /// `(ready, JSON body)`.
    #[must_use]
    pub fn report(&self) -> (bool, String) {
        let joined = self.source.joined.load(Ordering::Acquire);
        let shutting_down = self.source.shutting_down.load(Ordering::Acquire);
        let sinks = self.sinks_connected.load(Ordering::Acquire);
        let sink_error = self
            .sink_error
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        let blocked = (self.source.blocked.lock())
            .map(|b| b.clone())
            .unwrap_or_default();
        let ready = joined && sinks && !shutting_down && blocked.is_empty();
        let blocked: Vec<String> = blocked.iter().map(|b| json_string(b)).collect();
        let body = format!(
            "{{\"ready\":{ready},\"consumer_joined\":{joined},\"sinks_connected\":{sinks},\"shutting_down\":{shutting_down},\"sink_error\":{},\"blocked_partitions\":[{}]}}\n",
            sink_error.map_or("null".to_string(), |e| json_string(&e)),
            blocked.join(",")
        );
        (ready, body)
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_names_failing_conditions() {
        let r = Readiness::default();
        let (ready, body) = r.report();
        assert!(!ready);
        assert!(body.contains("\"consumer_joined\":false"));
        r.source.joined.store(true, Ordering::Release);
        r.sinks_connected.store(true, Ordering::Release);
        assert!(r.report().0);
        *r.sink_error.lock().unwrap() = Some("shard 0 \"x\"".into());
        r.sinks_connected.store(false, Ordering::Release);
        let (ready, body) = r.report();
        assert!(!ready);
        assert!(
            body.contains("\"sink_error\":\"shard 0 \\\"x\\\"\""),
            "{body}"
        );
    }
}
