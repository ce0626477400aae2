//! [`RowSizing`] and [`RateSizer`]: how many rows a shard's open chunk is
//! sealed at when the user gave no `--batch-rows`.
//!
//! ClickHouse's guidance is about one insert per second per table: every
//! insert creates a part, and the server's CPU per row falls as parts grow
//! (parts written, then merged). So at high rates the row limit follows the
//! observed rate: each [`ShardWriter`](super::ShardWriter) measures, per
//! shard, the rows per second its sealed chunks took to fill, and cuts the
//! next chunk at the rows that give the shard about one insert per
//! `period` from all `feeders` writers together (each writer cuts one chunk
//! per `feeders × period`). The other limits still hold whichever comes
//! first: the bytes (the memory budget's share of one batch: see the
//! binary's `Budget`), the age (`--flush-interval`, which at low rates
//! seals chunks before the rate rule would), and [`AUTO_MAX_ROWS`].
//!
//! Pure arithmetic on the driver thread that owns the writer: no clock is
//! read here, the writer passes the elapsed time of each sealed chunk.

use std::time::Duration;

/// Most rows of an automatically sized batch: below ClickHouse's default
/// `max_insert_block_size` (1 048 576), above which the server splits an
/// insert into blocks (and parts) anyway, and the sink's bisection of
/// rejected rows needs a batch to be one block.
pub const AUTO_MAX_ROWS: u64 = 1_000_000;

/// Fewest rows the rate rule cuts a chunk at: below it a chunk's fill time
/// is too short to measure a rate by, and the age limit handles low rates.
pub const AUTO_MIN_ROWS: u64 = 1_000;

/// Weight of the newest chunk's rate in the estimate (an exponential
/// moving average): a change of rate is followed within a few chunks.
const NEWEST_WEIGHT: f64 = 0.5;

/// Chunks that filled faster than this are not measured (their elapsed
/// time is below the clock's useful resolution).
const SHORTEST_FILL: Duration = Duration::from_millis(1);

/// How a writer's row limit is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RowSizing {
    /// [`BatchLimits::rows`](super::BatchLimits::rows) as given (an
    /// explicit `--batch-rows`, exactly-once blocks, tests).
    #[default]
    Fixed,
    /// From the observed rate, at most `BatchLimits::rows`.
    Auto {
        /// Writers (drivers) feeding each shard.
        feeders: u32,
        /// The time between two inserts into one shard the rule aims at.
        period: Duration,
    },
}

impl RowSizing {
    /// One insert per second per shard, shared by `feeders` writers.
    #[must_use]
    pub fn one_insert_per_second(feeders: usize) -> Self {
        Self::Auto {
            feeders: u32::try_from(feeders.max(1)).unwrap_or(u32::MAX),
            period: Duration::from_secs(1),
        }
    }
}

/// The rows a chunk is cut at under [`RowSizing::Auto`], given the
/// writer's `rate` into the shard (rows per second): `rate × feeders ×
/// period` rows, within [`AUTO_MIN_ROWS`] and `cap` (`cap` wins if it is
/// lower).
#[must_use]
pub fn auto_rows(rate: f64, feeders: u32, period: Duration, cap: u64) -> u64 {
    let want = rate * f64::from(feeders.max(1)) * period.as_secs_f64();
    let floor = AUTO_MIN_ROWS.min(cap) as f64;
    if want.is_nan() {
        return cap;
    }
    // `as` saturates: an enormous rate gives u64::MAX before the min.
    (want.max(floor) as u64).min(cap)
}

/// One shard's rate estimate in one writer.
#[derive(Clone, Copy, Debug, Default)]
pub struct RateSizer {
    /// Rows per second, smoothed; None until a chunk was measured.
    rate: Option<f64>,
}

impl RateSizer {
    /// A sealed chunk of `rows` rows took `filled` from its first row to
    /// its seal. Chunks sealed by a flush (a revocation, shutdown, a
    /// schema change) are not passed: their fill time says nothing of the
    /// rate.
    pub fn observe(&mut self, rows: u64, filled: Duration) {
        if rows == 0 || filled < SHORTEST_FILL {
            return;
        }
        let newest = rows as f64 / filled.as_secs_f64();
        self.rate = Some(match self.rate {
            None => newest,
            Some(old) => old + NEWEST_WEIGHT * (newest - old),
        });
    }

    /// The estimated rows per second, once measured.
    #[must_use]
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// The next chunk's row limit: `cap` under [`RowSizing::Fixed`] or
    /// before the first measurement (the bytes or the age cut the first
    /// chunk, which measures the rate), else [`auto_rows`].
    #[must_use]
    pub fn rows(&self, sizing: RowSizing, cap: u64) -> u64 {
        match (sizing, self.rate) {
            (RowSizing::Auto { feeders, period }, Some(rate)) => {
                auto_rows(rate, feeders, period, cap)
            }
            _ => cap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn one_insert_per_second_per_shard_from_all_feeders() {
        // Two drivers each feeding a shard 300k rows/s: each cuts 600k
        // rows, one chunk every 2 s, so the shard gets one insert a second.
        assert_eq!(auto_rows(300_000.0, 2, SECOND, AUTO_MAX_ROWS), 600_000);
        assert_eq!(auto_rows(300_000.0, 1, SECOND, AUTO_MAX_ROWS), 300_000);
        // A faster rate is held to the cap, a slow one to the floor.
        assert_eq!(auto_rows(5e6, 2, SECOND, AUTO_MAX_ROWS), AUTO_MAX_ROWS);
        assert_eq!(auto_rows(10.0, 2, SECOND, AUTO_MAX_ROWS), AUTO_MIN_ROWS);
        // A cap below the floor wins.
        assert_eq!(auto_rows(10.0, 2, SECOND, 300), 300);
        assert_eq!(auto_rows(f64::NAN, 2, SECOND, 77), 77);
        assert_eq!(auto_rows(f64::INFINITY, 2, SECOND, 77), 77);
    }

    #[test]
    fn the_estimate_follows_the_rate_and_ignores_unmeasurable_chunks() {
        let mut s = RateSizer::default();
        let auto = RowSizing::one_insert_per_second(1);
        assert_eq!(s.rows(auto, 500_000), 500_000, "unmeasured: the cap");
        s.observe(100, Duration::from_micros(10));
        s.observe(0, SECOND);
        assert_eq!(s.rate(), None);
        s.observe(200_000, SECOND);
        assert_eq!(s.rows(auto, AUTO_MAX_ROWS), 200_000);
        assert_eq!(s.rows(RowSizing::Fixed, 100_000), 100_000);
        // The rate doubles: the estimate moves half-way per chunk.
        s.observe(400_000, SECOND);
        assert_eq!(s.rows(auto, AUTO_MAX_ROWS), 300_000);
        for _ in 0..30 {
            s.observe(400_000, SECOND);
        }
        assert!((s.rate().unwrap() - 400_000.0).abs() < 1.0);
    }

    proptest! {
        /// The rule never leaves [min(floor, cap), cap], grows with the
        /// rate, and is the rate × feeders × period within those bounds.
        #[test]
        fn auto_rows_is_bounded_monotone_and_exact_inside(
            rate in 0.0f64..1e8,
            more in 0.0f64..1e8,
            feeders in 1u32..64,
            period_ms in 1u64..10_000,
            cap in 1u64..(4 * AUTO_MAX_ROWS),
        ) {
            let period = Duration::from_millis(period_ms);
            let rows = auto_rows(rate, feeders, period, cap);
            prop_assert!(rows <= cap);
            prop_assert!(rows >= AUTO_MIN_ROWS.min(cap));
            prop_assert!(auto_rows(rate + more, feeders, period, cap) >= rows);
            let want = rate * f64::from(feeders) * period.as_secs_f64();
            if want >= AUTO_MIN_ROWS as f64 && want <= cap as f64 {
                prop_assert!((rows as f64 - want).abs() <= 1.0, "{rows} against {want}");
            }
        }

        /// Whatever chunks are observed, the limit stays within the cap,
        /// and a steady rate is learned: after enough chunks at one rate,
        /// the limit is that rate's rule.
        #[test]
        fn a_steady_rate_is_learned_within_bounds(
            noise in prop::collection::vec((1u64..2_000_000, 1u64..5_000), 0..20),
            steady in 1_000u64..2_000_000,
            feeders in 1u32..8,
            cap in 1u64..(2 * AUTO_MAX_ROWS),
        ) {
            let mut s = RateSizer::default();
            let auto = RowSizing::Auto { feeders, period: SECOND };
            for (rows, ms) in noise {
                s.observe(rows, Duration::from_millis(ms));
                prop_assert!(s.rows(auto, cap) <= cap);
            }
            for _ in 0..60 {
                s.observe(steady, SECOND);
            }
            let want = auto_rows(steady as f64, feeders, SECOND, cap);
            let got = s.rows(auto, cap);
            prop_assert!(got.abs_diff(want) <= 1 + want / 1_000_000, "{got} against {want}");
        }
    }
}
