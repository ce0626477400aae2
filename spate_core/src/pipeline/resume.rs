//! [`ResumeRetry`]: lanes whose resume the source refused, retried by the
//! controller with a capped exponential backoff.
//!
//! Owned and touched by the controller thread only; no channels. A driver
//! asks once to resume a lane (`DriverEvent::ResumeLanes`), when the shards
//! it feeds clear, and has already cleared its own pause flag by then. If
//! the source refuses, a lane with no data waiting would never ask again
//! and would stay paused at the source for good. So the controller records
//! the refused lanes here and retries them on its own turns, until the
//! source resumes them, their driver pauses them again, or they go away.

use crate::source::LaneId;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Wait before the first retry.
const FIRST_DELAY: Duration = Duration::from_millis(50);
/// Longest wait between retries (a retry is one cheap client call).
const MAX_DELAY: Duration = Duration::from_secs(1);

/// Lanes paused at the source that should not be, and when to try again.
#[derive(Debug)]
pub(crate) struct ResumeRetry {
    lanes: BTreeSet<LaneId>,
    /// Wait before the next retry, doubled by each retry.
    delay: Duration,
    /// When the lanes are due; `None` while none are waiting (none were
    /// refused, or their retry is under way).
    next_at: Option<Instant>,
}

impl Default for ResumeRetry {
    fn default() -> Self {
        Self {
            lanes: BTreeSet::new(),
            delay: FIRST_DELAY,
            next_at: None,
        }
    }
}

impl ResumeRetry {
    /// The source refused to resume `lanes` at `now`: retry them after the
    /// current delay (joining a retry already scheduled).
    pub(crate) fn refused(&mut self, lanes: &[LaneId], now: Instant) {
        self.lanes.extend(lanes.iter().copied());
        self.next_at.get_or_insert(now + self.delay);
    }

    /// These lanes need no retry any more (resumed, paused again by their
    /// driver, or gone). With none left the backoff starts over.
    pub(crate) fn clear<'a>(&mut self, lanes: impl IntoIterator<Item = &'a LaneId>) {
        for lane in lanes {
            self.lanes.remove(lane);
        }
        if self.lanes.is_empty() {
            self.delay = FIRST_DELAY;
            self.next_at = None;
        }
    }

    /// The lanes to try again at `now`: all of them once their backoff
    /// passed, else none. Taking them starts the retry: the next refusal
    /// waits twice as long.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<LaneId> {
        if self.next_at.is_none_or(|at| now < at) {
            return Vec::new();
        }
        self.next_at = None;
        self.delay = (self.delay * 2).min(MAX_DELAY);
        self.lanes.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_lanes_are_due_after_a_growing_capped_backoff() {
        let t0 = Instant::now();
        let mut r = ResumeRetry::default();
        assert!(r.take_due(t0 + MAX_DELAY).is_empty(), "nothing refused");
        r.refused(&[LaneId(1), LaneId(2)], t0);
        assert!(r.take_due(t0 + FIRST_DELAY / 2).is_empty());
        // Another refusal joins the retry already scheduled.
        r.refused(&[LaneId(3)], t0 + FIRST_DELAY / 2);
        let t1 = t0 + FIRST_DELAY;
        assert_eq!(r.take_due(t1), vec![LaneId(1), LaneId(2), LaneId(3)]);
        assert!(
            r.take_due(t1).is_empty(),
            "taken: not due again until refused"
        );
        // The retry refused too: twice the wait.
        r.refused(&[LaneId(1), LaneId(2), LaneId(3)], t1);
        assert!(r.take_due(t1 + FIRST_DELAY).is_empty());
        let t2 = t1 + FIRST_DELAY * 2;
        assert_eq!(r.take_due(t2).len(), 3);
        let mut t = t2;
        for _ in 0..20 {
            r.refused(&[LaneId(1)], t);
            t += MAX_DELAY;
            assert_eq!(r.take_due(t).len(), 3, "the wait is capped");
        }
    }

    #[test]
    fn cleared_lanes_are_not_retried_and_the_backoff_starts_over() {
        let t0 = Instant::now();
        let mut r = ResumeRetry::default();
        r.refused(&[LaneId(1), LaneId(2)], t0);
        assert_eq!(r.take_due(t0 + FIRST_DELAY).len(), 2);
        r.refused(&[LaneId(1), LaneId(2)], t0);
        r.clear(&[LaneId(1)]);
        assert_eq!(r.take_due(t0 + MAX_DELAY), vec![LaneId(2)]);
        r.refused(&[LaneId(2)], t0);
        r.clear(&[LaneId(2)]);
        assert!(r.take_due(t0 + MAX_DELAY).is_empty());
        r.refused(&[LaneId(3)], t0);
        assert_eq!(
            r.take_due(t0 + FIRST_DELAY),
            vec![LaneId(3)],
            "the first wait again"
        );
    }
}
