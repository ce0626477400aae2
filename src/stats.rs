//! What a running spate tells its operator without a dashboard: a one-line
//! summary every `--stats-interval` (rows/s, lag, paused lanes, errors),
//! and, for a `--until-end` run attached to a terminal, a progress line
//! (rows, rows/s, remaining lag, ETA) rewritten in place once a second.

use spate_core::metrics::{Metrics, Totals};
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Spawn the summary (if `every` is not zero) and the progress line (if
/// `progress`) on `io`.
pub fn spawn(io: &tokio::runtime::Handle, metrics: Arc<Metrics>, every: Duration, progress: bool) {
    if !every.is_zero() {
        let metrics = metrics.clone();
        io.spawn(async move {
            let mut last = (Instant::now(), metrics.totals());
            loop {
                tokio::time::sleep(every).await;
                let now = (Instant::now(), metrics.totals());
                let s = Sample::between(last, now);
                tracing::info!(
                    target: "spate::stats",
                    rows_per_s = s.rows_per_s.round() as u64,
                    rows = s.now.inserted,
                    consumed = s.now.consumed,
                    lag = s.now.lag,
                    lanes = s.now.lanes_active,
                    paused = s.now.lanes_paused,
                    decode_errors = s.now.decode_errors,
                    insert_errors = s.now.insert_errors,
                    "stats"
                );
                last = now;
            }
        });
    }
    if progress {
        io.spawn(async move {
            let started = Instant::now();
            let mut last = (started, metrics.totals());
            let mut rate = Rate::default();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = (Instant::now(), metrics.totals());
                let s = Sample::between(last, now);
                rate.add(s.rows_per_s);
                let line = progress_line(&now.1, rate.value(), started.elapsed());
                // \r and "erase to end of line": one line, rewritten.
                let _ = write!(std::io::stderr(), "\r{line}\x1b[K");
                last = now;
            }
        });
    }
}

/// Whether stderr is a terminal (the progress line is for people).
pub fn stderr_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(2) == 1 }
}

struct Sample {
    now: Totals,
    rows_per_s: f64,
}

impl Sample {
    fn between(last: (Instant, Totals), now: (Instant, Totals)) -> Self {
        let secs = now.0.duration_since(last.0).as_secs_f64().max(1e-3);
        Self {
            now: now.1,
            rows_per_s: now.1.inserted.saturating_sub(last.1.inserted) as f64 / secs,
        }
    }
}

/// An exponentially smoothed rate, so the ETA does not jump each second.
#[derive(Default)]
struct Rate(Option<f64>);

impl Rate {
    fn add(&mut self, x: f64) {
        self.0 = Some(self.0.map_or(x, |r| 0.7 * r + 0.3 * x));
    }
    fn value(&self) -> f64 {
        self.0.unwrap_or(0.0)
    }
}

fn progress_line(t: &Totals, rows_per_s: f64, elapsed: Duration) -> String {
    let eta = if t.lag <= 0 {
        "done".to_string()
    } else if rows_per_s < 1.0 {
        "unknown".to_string()
    } else {
        human_duration(Duration::from_secs_f64(t.lag as f64 / rows_per_s))
    };
    format!(
        "spate: {} rows in {}, {}/s, {} to go, ETA {eta}{}",
        human_count(t.inserted as f64),
        human_duration(elapsed),
        human_count(rows_per_s),
        human_count(t.lag.max(0) as f64),
        if t.lanes_paused > 0 {
            format!(", {} lanes paused", t.lanes_paused)
        } else {
            String::new()
        }
    )
}

fn human_count(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.2}G", x / 1e9),
        x if x >= 1e6 => format!("{:.2}M", x / 1e6),
        x if x >= 1e4 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 3600 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_shows_rows_rate_lag_and_eta() {
        let t = Totals {
            inserted: 1_500_000,
            lag: 3_000_000,
            lanes_paused: 2,
            ..Totals::default()
        };
        let line = progress_line(&t, 500_000.0, Duration::from_secs(75));
        assert_eq!(
            line,
            "spate: 1.50M rows in 1m15s, 500.0k/s, 3.00M to go, ETA 6s, 2 lanes paused"
        );
        let done = Totals {
            inserted: 42,
            ..Totals::default()
        };
        assert_eq!(
            progress_line(&done, 0.0, Duration::from_secs(3)),
            "spate: 42 rows in 3s, 0/s, 0 to go, ETA done"
        );
        let stuck = Totals {
            lag: 10,
            ..Totals::default()
        };
        assert!(progress_line(&stuck, 0.0, Duration::ZERO).ends_with("ETA unknown"));
        assert_eq!(human_duration(Duration::from_secs(7322)), "2h02m");
    }

    #[test]
    fn rates_are_per_second_and_smoothed() {
        let t0 = Instant::now();
        let a = Totals {
            inserted: 100,
            ..Totals::default()
        };
        let b = Totals {
            inserted: 1100,
            ..Totals::default()
        };
        let s = Sample::between((t0, a), (t0 + Duration::from_secs(2), b));
        assert!((s.rows_per_s - 500.0).abs() < 1e-9);
        let mut r = Rate::default();
        r.add(100.0);
        r.add(200.0);
        assert!((r.value() - 130.0).abs() < 1e-9);
    }
}
