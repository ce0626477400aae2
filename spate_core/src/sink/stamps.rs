//! The Kafka timestamps of a chunk's rows, kept so the chunk's
//! acknowledgement can observe each row's delivery latency (message
//! timestamp to ClickHouse's confirmation) in
//! `spate_delivery_latency_seconds`.
//!
//! Run-length encoded by millisecond: the messages of a partition are
//! read in order and a producer stamps a burst alike, so a chunk holds far
//! fewer runs than rows at any rate worth measuring (about one run per
//! millisecond of production), and nothing per row at all when the
//! messages carry no timestamp.

use prometheus::Histogram;

/// Timestamps (ms since the Unix epoch) of a chunk's rows, as runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stamps {
    runs: Vec<(i64, u32)>,
}

impl Stamps {
    /// Room for `runs` runs.
    #[must_use]
    pub fn with_capacity(runs: usize) -> Self {
        Self {
            runs: Vec::with_capacity(runs),
        }
    }

    /// Empty, keeping its room.
    pub fn clear(&mut self) {
        self.runs.clear();
    }

    /// The memory it holds.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<(i64, u32)>()
    }

    /// `rows` more rows of a message stamped `ts_ms`.
    pub fn push(&mut self, ts_ms: i64, rows: u32) {
        match self.runs.last_mut() {
            Some((ts, n)) if *ts == ts_ms && n.checked_add(rows).is_some() => *n += rows,
            _ => self.runs.push((ts_ms, rows)),
        }
    }

    /// The rows stamped.
    #[must_use]
    pub fn rows(&self) -> u64 {
        self.runs.iter().map(|&(_, n)| u64::from(n)).sum()
    }

    /// Runs held (memory: 16 bytes each).
    #[must_use]
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Observe each stamped row's latency at `now_ms` in `histogram`
    /// (through a local copy, flushed once: no atomic per row). A stamp
    /// ahead of `now_ms` (a producer's clock ahead of ours) counts as 0.
    pub fn observe(&self, histogram: &Histogram, now_ms: i64) {
        if self.runs.is_empty() {
            return;
        }
        let local = histogram.local();
        for &(ts, n) in &self.runs {
            let seconds = now_ms.saturating_sub(ts).max(0) as f64 / 1000.0;
            for _ in 0..n {
                local.observe(seconds);
            }
        }
        local.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::Collector;
    use prometheus::HistogramOpts;

    #[test]
    fn runs_merge_equal_stamps_and_count_every_row() {
        let mut s = Stamps::default();
        s.push(1_000, 1);
        s.push(1_000, 1);
        s.push(1_001, 3);
        s.push(1_000, 1);
        assert_eq!(s.runs(), 3);
        assert_eq!(s.rows(), 6);
    }

    #[test]
    fn each_row_is_observed_at_its_latency() {
        let h = Histogram::with_opts(HistogramOpts::new("t", "t").buckets(vec![0.5, 1.0, 2.0]))
            .unwrap();
        let mut s = Stamps::default();
        s.push(10_000, 2); // 1.5 s before now
        s.push(11_200, 1); // 0.3 s
        s.push(12_000, 1); // ahead of now: 0
        s.observe(&h, 11_500);
        assert_eq!(h.get_sample_count(), 4);
        assert!(
            (h.get_sample_sum() - 3.3).abs() < 1e-9,
            "{}",
            h.get_sample_sum()
        );
        let families = h.collect();
        let buckets = families[0].get_metric()[0].get_histogram().get_bucket();
        let counts: Vec<u64> = buckets.iter().map(|b| b.cumulative_count()).collect();
        assert_eq!(counts, vec![2, 2, 4]);
    }
}
