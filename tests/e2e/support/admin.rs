//! Watching a running spate from outside: its admin server (`/metrics`,
//! `/readyz`) and its memory from `/proc`.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// A loopback port free right now, for `--admin-addr`.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET `path` from the admin server on `port`; `None` if it does not
/// answer within 2 s.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The value of an unlabelled gauge or counter in a `/metrics` text.
pub fn gauge(metrics: &str, name: &str) -> Option<i64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The sum of every series of `name` whose labels contain all of `labels`
/// (each `key="value"`), in a `/metrics` text.
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (lbl, value) = rest.split_once("} ")?;
            labels
                .iter()
                .all(|want| lbl.split(',').any(|have| have == *want))
                .then_some(value)
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// Peak resident set size so far (VmHWM), in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
