//! The rejection limit (Sentry Arroyo's DLQ limit): a pipeline whose
//! messages are mostly rejected is misconfigured, not unlucky, so it stops
//! instead of turning the whole topic into dead letters.
//!
//! [`Limiter`] is a pure counter owned by [`Rejections`](super::Rejections)
//! behind its lock; callers report each rejection with the number of
//! messages they accepted since their previous report, so accepted
//! messages cost nothing on the hot path.

use std::fmt;

/// When rejections stop being tolerated. Either test trips the limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RejectLimit {
    /// Messages per window of the ratio test (tumbling windows).
    pub window: u64,
    /// Most rejected messages per window, as a fraction of `window`
    /// (`1.0` turns the ratio test off).
    pub max_ratio: f64,
    /// Most rejected messages in a row with nothing accepted between
    /// (`0` turns the test off).
    pub max_consecutive: u64,
}

impl Default for RejectLimit {
    /// At most 10% of a window of 1000 messages, at most 100 in a row.
    fn default() -> Self {
        Self {
            window: 1000,
            max_ratio: 0.1,
            max_consecutive: 100,
        }
    }
}

/// Which limit tripped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitTripped {
    /// More than `max` of a window of `window` messages were rejected.
    Ratio {
        /// Rejections in the window when it tripped.
        rejected: u64,
        /// The window's size.
        window: u64,
        /// The most allowed.
        max: u64,
    },
    /// `count` messages in a row were rejected.
    Consecutive {
        /// The count (equals the limit).
        count: u64,
    },
}

impl fmt::Display for LimitTripped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitTripped::Ratio {
                rejected,
                window,
                max,
            } => write!(
                f,
                "rejection limit exceeded: {rejected} of a window of {window} messages rejected, at most {max} allowed (--max-rejected-ratio)"
            ),
            LimitTripped::Consecutive { count } => write!(
                f,
                "rejection limit exceeded: {count} consecutive messages rejected (--max-rejected-consecutive)"
            ),
        }
    }
}

/// The counting half of [`RejectLimit`].
#[derive(Clone, Debug)]
pub struct Limiter {
    limit: RejectLimit,
    seen: u64,
    rejected: u64,
    consecutive: u64,
}

impl Limiter {
    /// A limiter with nothing seen.
    #[must_use]
    pub fn new(limit: RejectLimit) -> Self {
        Self {
            limit: RejectLimit {
                window: limit.window.max(1),
                ..limit
            },
            seen: 0,
            rejected: 0,
            consecutive: 0,
        }
    }

    /// Most rejections a window tolerates.
    fn max_in_window(&self) -> u64 {
        (self.limit.max_ratio.clamp(0.0, 1.0) * self.limit.window as f64).floor() as u64
    }

    /// One message was rejected, after `accepted` accepted ones since the
    /// previous call.
    ///
    /// # Errors
    /// The limit that this rejection exceeds.
    pub fn reject(&mut self, accepted: u64) -> Result<(), LimitTripped> {
        let window = self.limit.window;
        if accepted > 0 {
            self.consecutive = 0;
            let total = self.seen + accepted;
            if total >= window {
                // The accepted messages closed this window (and maybe more).
                self.seen = total % window;
                self.rejected = 0;
            } else {
                self.seen = total;
            }
        }
        self.seen += 1;
        self.rejected += 1;
        self.consecutive += 1;
        if self.limit.max_consecutive > 0 && self.consecutive >= self.limit.max_consecutive {
            return Err(LimitTripped::Consecutive {
                count: self.consecutive,
            });
        }
        let max = self.max_in_window();
        if self.limit.max_ratio < 1.0 && self.rejected > max {
            return Err(LimitTripped::Ratio {
                rejected: self.rejected,
                window,
                max,
            });
        }
        if self.seen >= window {
            self.seen = 0;
            self.rejected = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(window: u64, max_ratio: f64, max_consecutive: u64) -> Limiter {
        Limiter::new(RejectLimit {
            window,
            max_ratio,
            max_consecutive,
        })
    }

    #[test]
    fn one_percent_never_trips_the_defaults() {
        let mut l = Limiter::new(RejectLimit::default());
        for _ in 0..10_000 {
            l.reject(99).unwrap();
        }
    }

    #[test]
    fn consecutive_trips_at_the_count() {
        let mut l = limiter(1000, 1.0, 5);
        for _ in 0..4 {
            l.reject(0).unwrap();
        }
        assert_eq!(l.reject(0), Err(LimitTripped::Consecutive { count: 5 }));
        // An accepted message between resets the run.
        let mut l = limiter(1000, 1.0, 5);
        for _ in 0..100 {
            for _ in 0..3 {
                l.reject(0).unwrap();
            }
            l.reject(1).unwrap();
        }
    }

    #[test]
    fn ratio_trips_within_the_window_and_resets_after_it() {
        // At most 3 of 10.
        let mut l = limiter(10, 0.3, 0);
        l.reject(0).unwrap();
        l.reject(1).unwrap();
        l.reject(1).unwrap();
        assert_eq!(
            l.reject(1),
            Err(LimitTripped::Ratio {
                rejected: 4,
                window: 10,
                max: 3
            })
        );
        let mut l = limiter(10, 0.3, 0);
        for _ in 0..3 {
            l.reject(0).unwrap();
        }
        // 7 accepted close the window of 10: the next one starts afresh.
        for _ in 0..3 {
            l.reject(7).unwrap();
            l.reject(0).unwrap();
            l.reject(0).unwrap();
        }
    }

    #[test]
    fn a_fully_bad_stream_trips_at_the_first_limit_reached() {
        let mut l = Limiter::new(RejectLimit::default());
        let mut n = 0;
        let tripped = loop {
            n += 1;
            if let Err(t) = l.reject(0) {
                break t;
            }
        };
        assert_eq!(n, 100);
        assert_eq!(tripped, LimitTripped::Consecutive { count: 100 });
        assert!(tripped.to_string().contains("--max-rejected-consecutive"));
        let mut l = limiter(1000, 0.1, 0);
        let n = (1..).find(|_| l.reject(0).is_err()).unwrap();
        assert_eq!(n, 101, "more than 10% of 1000");
    }
}
