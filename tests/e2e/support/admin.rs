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
    let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return "no /proc smaps".into();
    };
    let (mut file, mut heap, mut big, mut small) = (0u64, 0u64, 0u64, 0u64);
    let (mut big_n, mut small_n) = (0, 0);
    let mut kind = 0;
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else { continue };
        if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
            let (lo, hi) = first.split_once('-').unwrap_or(("0", "0"));
            let size =
                u64::from_str_radix(hi, 16).unwrap_or(0) - u64::from_str_radix(lo, 16).unwrap_or(0);
            let path = f.nth(4).unwrap_or("");
            kind = match path {
                "[heap]" => 1,
                "" if size >= 1 << 20 => {
                    big_n += 1;
                    2
                }
                "" | "[stack]" => {
                    small_n += 1;
                    3
                }
                _ => 0,
            };
        } else if first == "Rss:" {
            let kib: u64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            match kind {
                1 => heap += kib,
                2 => big += kib,
                3 => small += kib,
                _ => file += kib,
            }
        }
    }
    format!(
        "files {} MiB, main heap {} MiB, {big_n} anonymous mappings >= 1 MiB {} MiB, {small_n} smaller {} MiB",
        file / 1024,
        heap / 1024,
        big / 1024,
        small / 1024
    )
}
