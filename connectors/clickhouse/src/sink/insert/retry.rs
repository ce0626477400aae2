//! The retry policy of an insert: [`RetryPolicy`] (capped exponential
//! backoff with jitter, and the per-attempt timeout that grows after each
//! attempt that timed out) and [`Attempts`], the pure decision after each
//! failed attempt (fail over to the next replica, back off, or give up),
//! from the error's [`Remedy`].
//!
//! Why the timeout grows: a timed-out insert keeps running on the server,
//! and may land. If every attempt takes longer than the timeout (heavy
//! materialized views, a merge backlog), a fixed timeout retries forever
//! and each attempt can add the batch again. Doubling the timeout of the
//! next attempt (up to [`RetryPolicy::max_insert_timeout`]) lets a slow
//! server finish one attempt and answer it; the deduplication token
//! (`super::settings`) makes the landed earlier attempts harmless where the
//! server and table support it. Used by each insert worker (tokio task)
//! for the one chunk it is inserting; no I/O, no clock.

use crate::classify::Remedy;
use std::time::Duration;

/// How retriable insert failures are retried: forever (they are never
/// dropped and never acknowledged early), with a delay growing from
/// `initial` by `factor` up to `max`, each delay scaled by a random factor
/// in `[1 - jitter, 1]` so workers do not retry in lockstep.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// First delay.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Growth per attempt.
    pub factor: f64,
    /// Random reduction, 0.0–1.0.
    pub jitter: f64,
    /// Timeout of an insert's first attempt (`--insert-timeout`).
    pub insert_timeout: Duration,
    /// Longest an attempt's timeout grows to: each attempt of a batch that
    /// timed out doubles the next attempt's timeout, up to this.
    pub max_insert_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
            factor: 2.0,
            jitter: 0.5,
            insert_timeout: Duration::from_secs(60),
            max_insert_timeout: Duration::from_secs(480),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `attempt` (1-based), with `unit` a random
    /// number in [0, 1).
    #[must_use]
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exp = self.factor.powi(attempt.saturating_sub(1).min(63) as i32);
        let base = self.initial.as_secs_f64() * exp;
        let capped = base.min(self.max.as_secs_f64());
        let scale = 1.0 - self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0);
        Duration::from_secs_f64(capped * scale)
    }

    /// Timeout of an attempt after `timed_out` earlier attempts of the same
    /// batch timed out: doubled per timeout, capped (never below the first).
    #[must_use]
    pub fn attempt_timeout(&self, timed_out: u32) -> Duration {
        let grown = self
            .insert_timeout
            .saturating_mul(1u32 << timed_out.min(16));
        grown.min(self.max_insert_timeout.max(self.insert_timeout))
    }
}

/// What a worker does after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Send the same bytes to replica `to`, after `backoff` if every
    /// replica of the shard failed in this round.
    Failover {
        /// The replica to try next.
        to: usize,
        /// Wait first, when the round through the replicas is complete.
        backoff: Option<Duration>,
    },
    /// Wait `backoff`, then send the same bytes to the same replica.
    Retry {
        /// How long to wait.
        backoff: Duration,
    },
    /// Fail the chunk: retrying cannot help.
    GiveUp,
}

/// The attempts of one chunk on one shard: which replica the next attempt
/// goes to and how long to wait before it. Rounds through the replicas
/// drive the backoff: failovers within a round do not wait, and the
/// delay grows per completed round (or per retry on the same replica).
#[derive(Clone, Debug)]
pub(crate) struct Attempts {
    replicas: usize,
    current: usize,
    round: u32,
    failed_in_round: usize,
    attempt: u32,
    timed_out: u32,
}

impl Attempts {
    /// The first attempt goes to `preferred` (modulo `replicas`).
    pub(crate) fn new(replicas: usize, preferred: usize) -> Self {
        let replicas = replicas.max(1);
        Attempts {
            replicas,
            current: preferred % replicas,
            round: 0,
            failed_in_round: 0,
            attempt: 1,
            timed_out: 0,
        }
    }

    /// The replica the current attempt goes to.
    pub(crate) fn replica(&self) -> usize {
        self.current
    }

    /// The timeout of the current attempt.
    pub(crate) fn timeout(&self, policy: &RetryPolicy) -> Duration {
        policy.attempt_timeout(self.timed_out)
    }

    /// The current attempt timed out: the next one waits longer.
    pub(crate) fn timed_out(&mut self) {
        self.timed_out = self.timed_out.saturating_add(1);
    }

    /// The current attempt, 1-based.
    pub(crate) fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The current attempt failed with `remedy`; `unit` is a random number
    /// in [0, 1) for the jitter.
    pub(crate) fn next(&mut self, remedy: Remedy, policy: &RetryPolicy, unit: f64) -> Next {
        if remedy == Remedy::GiveUp {
            return Next::GiveUp;
        }
        self.attempt += 1;
        if remedy == Remedy::Failover && self.replicas > 1 {
            self.failed_in_round += 1;
            self.current = (self.current + 1) % self.replicas;
            let backoff =
                (self.failed_in_round >= self.replicas).then(|| self.end_round(policy, unit));
            return Next::Failover {
                to: self.current,
                backoff,
            };
        }
        Next::Retry {
            backoff: self.end_round(policy, unit),
        }
    }

    fn end_round(&mut self, policy: &RetryPolicy, unit: f64) -> Duration {
        self.failed_in_round = 0;
        self.round += 1;
        policy.delay(self.round, unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Remedy::{Failover, GiveUp, Retry};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// (name, replicas, preferred replica, steps: remedy → next, replica).
    type Case<'a> = (&'a str, usize, usize, &'a [(Remedy, Next, usize)]);

    /// Each row: the remedy of the failed attempt, then what follows and
    /// the replica of the next attempt. Default policy, no jitter.
    #[test]
    fn decision_table() {
        let p = RetryPolicy::default();
        let cases: &[Case<'_>] = &[
            (
                "data error gives up at once",
                3,
                0,
                &[(GiveUp, Next::GiveUp, 0)],
            ),
            (
                "transient errors back off on the same replica, growing",
                3,
                1,
                &[
                    (Retry, Next::Retry { backoff: ms(100) }, 1),
                    (Retry, Next::Retry { backoff: ms(200) }, 1),
                    (Retry, Next::Retry { backoff: ms(400) }, 1),
                ],
            ),
            (
                "replica faults fail over without waiting, then back off per round",
                3,
                1,
                &[
                    (
                        Failover,
                        Next::Failover {
                            to: 2,
                            backoff: None,
                        },
                        2,
                    ),
                    (
                        Failover,
                        Next::Failover {
                            to: 0,
                            backoff: None,
                        },
                        0,
                    ),
                    (
                        Failover,
                        Next::Failover {
                            to: 1,
                            backoff: Some(ms(100)),
                        },
                        1,
                    ),
                    (
                        Failover,
                        Next::Failover {
                            to: 2,
                            backoff: None,
                        },
                        2,
                    ),
                    (
                        Failover,
                        Next::Failover {
                            to: 0,
                            backoff: None,
                        },
                        0,
                    ),
                    (
                        Failover,
                        Next::Failover {
                            to: 1,
                            backoff: Some(ms(200)),
                        },
                        1,
                    ),
                ],
            ),
            (
                "a single replica backs off instead of failing over",
                1,
                0,
                &[
                    (Failover, Next::Retry { backoff: ms(100) }, 0),
                    (Failover, Next::Retry { backoff: ms(200) }, 0),
                ],
            ),
            (
                "a transient error mid-round stays and restarts the round",
                2,
                0,
                &[
                    (
                        Failover,
                        Next::Failover {
                            to: 1,
                            backoff: None,
                        },
                        1,
                    ),
                    (Retry, Next::Retry { backoff: ms(100) }, 1),
                    (
                        Failover,
                        Next::Failover {
                            to: 0,
                            backoff: None,
                        },
                        0,
                    ),
                    (
                        Failover,
                        Next::Failover {
                            to: 1,
                            backoff: Some(ms(200)),
                        },
                        1,
                    ),
                    (GiveUp, Next::GiveUp, 1),
                ],
            ),
            (
                "the preferred replica wraps",
                2,
                5,
                &[(
                    Failover,
                    Next::Failover {
                        to: 0,
                        backoff: None,
                    },
                    0,
                )],
            ),
        ];
        for (name, replicas, preferred, steps) in cases {
            let mut a = Attempts::new(*replicas, *preferred);
            assert_eq!(a.replica(), preferred % replicas, "{name}: first replica");
            for (i, (remedy, want, replica)) in steps.iter().enumerate() {
                assert_eq!(a.next(*remedy, &p, 0.0), *want, "{name}: step {i}");
                assert_eq!(a.replica(), *replica, "{name}: replica after step {i}");
            }
        }
    }

    #[test]
    fn attempts_count_and_cap() {
        let p = RetryPolicy::default();
        let mut a = Attempts::new(1, 0);
        assert_eq!(a.attempt(), 1);
        let mut last = Duration::ZERO;
        for _ in 0..40 {
            let Next::Retry { backoff } = a.next(Retry, &p, 0.0) else {
                panic!("not a retry");
            };
            last = backoff;
        }
        assert_eq!(a.attempt(), 41);
        assert_eq!(last, p.max);
        assert_eq!(a.next(GiveUp, &p, 0.0), Next::GiveUp);
        assert_eq!(a.attempt(), 41, "giving up is not an attempt");
    }

    /// Each timeout doubles the next attempt's timeout, up to the cap; a
    /// cap below the first timeout keeps it fixed.
    #[test]
    fn attempt_timeout_grows_per_timeout_and_caps() {
        let p = RetryPolicy {
            insert_timeout: Duration::from_secs(2),
            max_insert_timeout: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        let mut a = Attempts::new(1, 0);
        assert_eq!(a.timeout(&p), Duration::from_secs(2));
        a.next(Failover, &p, 0.0);
        assert_eq!(
            a.timeout(&p),
            Duration::from_secs(2),
            "failures that are not timeouts"
        );
        let want = [4, 8, 10, 10];
        for secs in want {
            a.timed_out();
            assert_eq!(a.timeout(&p), Duration::from_secs(secs));
        }
        let fixed = RetryPolicy {
            max_insert_timeout: Duration::from_secs(1),
            ..p
        };
        assert_eq!(fixed.attempt_timeout(5), Duration::from_secs(2));
        assert_eq!(p.attempt_timeout(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn grows_then_caps_and_jitters_downwards() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, 0.0), Duration::from_millis(100));
        assert_eq!(p.delay(2, 0.0), Duration::from_millis(200));
        assert_eq!(p.delay(4, 0.0), Duration::from_millis(800));
        assert_eq!(p.delay(30, 0.0), Duration::from_secs(10));
        assert_eq!(p.delay(1000, 0.0), Duration::from_secs(10));
        let j = p.delay(30, 0.999_999);
        assert!(
            j >= Duration::from_secs(5) && j < Duration::from_secs(10),
            "{j:?}"
        );
    }
}
