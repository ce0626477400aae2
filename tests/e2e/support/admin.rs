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
    status_kib(pid, "VmHWM:")
}

/// Resident set size now (VmRSS), in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// A `kB` field of `/proc/<pid>/status`.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Where a process's resident memory is, from `/proc/<pid>/smaps`, in
/// MiB: the binary and libraries, glibc's main heap, anonymous mappings of
/// at least 1 MiB (glibc's thread arenas and large buffers, which spate's
/// mmap threshold puts in mappings of their own; the kernel merges
/// adjacent ones), and the smaller anonymous ones (thread stacks, small
/// buffers). For a failure message.
pub fn rss_breakdown(pid: u32) -> String {
    const FILES: usize = 0;
    const HEAP: usize = 1;
    const BIG: usize = 2;
    const SMALL: usize = 3;
    let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return "no /proc smaps".into();
    };
    // Resident KiB and mapping count per kind; `kind` is the mapping whose
    // fields follow its header line.
    let (mut rss, mut count, mut kind) = ([0u64; 4], [0usize; 4], FILES);
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((lo, hi)) = first.split_once('-') {
            let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16))
            else {
                continue;
            };
            // perms, offset, device, inode, then the path (none if anonymous)
            kind = match f.nth(4).unwrap_or("") {
                "[heap]" => HEAP,
                "" if hi - lo >= 1 << 20 => BIG,
                "" | "[stack]" => SMALL,
                _ => FILES,
            };
            count[kind] += 1;
        } else if first == "Rss:" {
            rss[kind] += f.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    format!(
        "files {} MiB, main heap {} MiB, {} anonymous mappings >= 1 MiB {} MiB, {} smaller {} MiB",
        rss[FILES] >> 10,
        rss[HEAP] >> 10,
        count[BIG],
        rss[BIG] >> 10,
        count[SMALL],
        rss[SMALL] >> 10
    )
}
