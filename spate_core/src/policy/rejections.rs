//! [`Rejections`]: the shared policy object of one pipeline. Called by the
//! chains (driver threads) for decode failures and tombstones, and by the
//! insert workers (the sink's I/O runtime) for rows the server rejected;
//! both get an [`Action`] back. Counts `spate_messages_rejected_total
//! {topic,stage,reason}`, logs each rejection (at most
//! [`LOG_BURST`] lines per [`LOG_WINDOW`], then a summary of what was not
//! logged) and applies the [`RejectLimit`](super::RejectLimit). The lock is
//! taken only on a rejection, never for an accepted message.

use super::limit::Limiter;
use super::{ErrorPolicy, OnError, PolicyError};
use crate::clock::SharedClock;
use crate::metrics::Metrics;
use prometheus::{IntCounterVec, Opts, Registry};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Log lines per window before rejections are only counted.
pub const LOG_BURST: u32 = 10;
/// The log rate limit's window.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// Where a message was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The chain could not turn it into a row (or it is a tombstone).
    Decode,
    /// The server rejected its row.
    Insert,
}

impl Stage {
    /// The metric label and dead-letter header value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Decode => "decode",
            Stage::Insert => "insert",
        }
    }
}

/// What the caller does with a rejected message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Stop the pipeline naming the message.
    Fail,
    /// Go on; the message's offset is done with.
    Skip,
    /// Hand the original message to the dead-letter destination.
    DeadLetter,
}

/// One rejected message, as the caller describes it.
#[derive(Clone, Copy, Debug)]
pub struct Rejection<'a> {
    /// Where.
    pub stage: Stage,
    /// Topic of the message.
    pub topic: &'a str,
    /// Partition of the message.
    pub partition: i32,
    /// Offset of the message.
    pub offset: i64,
    /// The column, when the failure is about one.
    pub column: Option<&'a str>,
    /// Low-cardinality kind, the metric's `reason` label (e.g.
    /// [`decode_reason`]'s answer, or `code_395` for a server error).
    pub reason: &'a str,
    /// The full error text.
    pub error: &'a str,
}

/// The families the error policy registers on first use (dashboards and
/// their tests).
pub const METRIC_NAMES: &[&str] = &["spate_messages_rejected_total"];

#[derive(Clone)]
struct RejectMetrics(IntCounterVec);

impl RejectMetrics {
    fn register(r: &Registry) -> Self {
        let c = IntCounterVec::new(
            Opts::new(
                "spate_messages_rejected_total",
                "Messages rejected by the error policy (skipped, dead-lettered or failed), by stage and reason.",
            ),
            &["topic", "stage", "reason"],
        )
        .expect("valid metric");
        r.register(Box::new(c.clone())).expect("unique metric");
        Self(c)
    }
}

#[derive(Debug)]
struct LogWindow {
    started: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

#[derive(Debug)]
struct Inner {
    limiter: Limiter,
    log: LogWindow,
}

/// The error policy of one pipeline at run time (see the module docs).
pub struct Rejections {
    policy: ErrorPolicy,
    dead_letters: Option<Arc<dyn super::DeadLetterSink>>,
    counter: IntCounterVec,
    clock: SharedClock,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Rejections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rejections")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Rejections {
    /// The runtime object of `policy`, counting on `metrics`.
    #[must_use]
    pub fn new(policy: ErrorPolicy, metrics: &Metrics, clock: SharedClock) -> Arc<Self> {
        Self::with_dead_letters(policy, metrics, clock, None)
    }

    /// [`new`](Self::new), with the dead-letter destination of
    /// `--on-error dead-letter`.
    #[must_use]
    pub fn with_dead_letters(
        policy: ErrorPolicy,
        metrics: &Metrics,
        clock: SharedClock,
        dead_letters: Option<Arc<dyn super::DeadLetterSink>>,
    ) -> Arc<Self> {
        let RejectMetrics(counter) = metrics.extension(RejectMetrics::register);
        Arc::new(Self {
            policy,
            dead_letters,
            counter,
            clock,
            inner: Mutex::new(Inner {
                limiter: Limiter::new(policy.limit),
                log: LogWindow {
                    started: None,
                    logged: 0,
                    suppressed: 0,
                },
            }),
        })
    }

    /// The configuration.
    #[must_use]
    pub fn policy(&self) -> &ErrorPolicy {
        &self.policy
    }

    /// The dead-letter destination, if one is configured.
    #[must_use]
    pub fn dead_letters(&self) -> Option<&Arc<dyn super::DeadLetterSink>> {
        self.dead_letters.as_ref()
    }

    /// A message without a value arrived: `true` if it is skipped (and
    /// counted with `reason="tombstone"`), `false` if it is an error to
    /// hand to [`reject`](Self::reject).
    pub fn tombstone(&self, topic: &str, partition: i32, offset: i64) -> bool {
        if self.policy.tombstones_are_errors {
            return false;
        }
        self.counter
            .with_label_values(&[topic, Stage::Decode.as_str(), "tombstone"])
            .inc();
        tracing::debug!(topic, partition, offset, "tombstone skipped");
        true
    }

    /// A message was rejected, after `accepted` messages the caller
    /// accepted since its previous call: count it, log it (rate-limited)
    /// and say what to do.
    ///
    /// # Errors
    /// The rejection limit tripped (never under `--on-error fail`, which
    /// stops at the first rejection anyway).
    pub fn reject(&self, r: &Rejection<'_>, accepted: u64) -> Result<Action, PolicyError> {
        self.counter
            .with_label_values(&[r.topic, r.stage.as_str(), r.reason])
            .inc();
        let action = match self.policy.on_error {
            OnError::Fail => return Ok(Action::Fail),
            OnError::Skip => Action::Skip,
            OnError::DeadLetter => Action::DeadLetter,
        };
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(tripped) = inner.limiter.reject(accepted) {
            return Err(PolicyError::Limit {
                tripped,
                at: format!(
                    "topic {} partition {} offset {}",
                    r.topic, r.partition, r.offset
                ),
                last: r.error.to_owned(),
            });
        }
        if inner.log.admit(self.clock.now()) {
            tracing::warn!(
                topic = r.topic,
                partition = r.partition,
                offset = r.offset,
                column = r.column.unwrap_or(""),
                stage = r.stage.as_str(),
                reason = r.reason,
                action = self.policy.on_error.as_str(),
                error = r.error,
                "message rejected"
            );
        }
        Ok(action)
    }
}

impl LogWindow {
    /// Whether a line may be logged now; logs the summary of the previous
    /// window's suppressed lines when a new window starts.
    fn admit(&mut self, now: Instant) -> bool {
        let expired = self
            .started
            .is_none_or(|s| now.saturating_duration_since(s) >= LOG_WINDOW);
        if expired {
            if self.suppressed > 0 {
                tracing::warn!(
                    suppressed = self.suppressed,
                    "more messages were rejected than logged in the last {}s",
                    LOG_WINDOW.as_secs()
                );
            }
            *self = LogWindow {
                started: Some(now),
                logged: 0,
                suppressed: 0,
            };
        }
        if self.logged < LOG_BURST {
            self.logged += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

/// The `reason` label of a decode failure, from the encoder's reason text:
/// `tombstone`, `invalid_json`, `out_of_range`, `unknown_enum`,
/// `wrong_type`, `null` or `invalid_value`.
#[must_use]
pub fn decode_reason(reason: &str) -> &'static str {
    const TABLE: &[(&str, &str)] = &[
        // A routed message's table (the binary's `routing`).
        ("not allowed by --allow-tables", "table_not_allowed"),
        ("no --create-table-like", "table_missing"),
        ("does not exist, and", "table_missing"),
        ("which is not [db.]table", "table_unresolved"),
        ("no table name", "table_unresolved"),
        ("tombstone", "tombstone"),
        ("invalid json", "invalid_json"),
        ("not valid utf-8", "invalid_json"),
        ("not a json object", "invalid_json"),
        ("out of range", "out_of_range"),
        (" range", "out_of_range"),
        ("does not fit", "out_of_range"),
        ("do not fit", "out_of_range"),
        ("not a name of enum", "unknown_enum"),
        ("is not a value of enum", "unknown_enum"),
        ("not an enum value", "unknown_enum"),
        ("null for non-nullable", "null"),
        ("cannot convert", "wrong_type"),
        ("expected an", "wrong_type"),
    ];
    let lower = reason.to_ascii_lowercase();
    TABLE
        .iter()
        .find(|(needle, _)| lower.contains(needle))
        .map_or("invalid_value", |(_, label)| label)
}

#[cfg(test)]
mod tests {
    use super::super::RejectLimit;
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn rejection(offset: i64) -> Rejection<'static> {
        Rejection {
            stage: Stage::Decode,
            topic: "t",
            partition: 0,
            offset,
            column: Some("n"),
            reason: "out_of_range",
            error: "300 is out of range for UInt8",
        }
    }

    fn policy(on_error: OnError) -> ErrorPolicy {
        ErrorPolicy {
            on_error,
            tombstones_are_errors: false,
            limit: RejectLimit {
                window: 100,
                max_ratio: 0.5,
                max_consecutive: 3,
            },
        }
    }

    fn count(m: &Metrics, stage: &str, reason: &str) -> u64 {
        let RejectMetrics(c) = m.extension(RejectMetrics::register);
        c.with_label_values(&["t", stage, reason]).get()
    }

    #[test]
    fn the_declared_names_are_the_registered_ones() {
        let m = Metrics::new();
        count(&m, "decode", "x");
        let text = m.encode_text();
        for name in METRIC_NAMES {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
    }

    #[test]
    fn actions_follow_the_policy_and_every_rejection_is_counted() {
        let m = Metrics::new();
        let clock = ManualClock::new();
        for (on_error, want) in [
            (OnError::Fail, Action::Fail),
            (OnError::Skip, Action::Skip),
            (OnError::DeadLetter, Action::DeadLetter),
        ] {
            let r = Rejections::new(policy(on_error), &m, clock.clone());
            assert_eq!(r.reject(&rejection(1), 5).unwrap(), want);
        }
        assert_eq!(count(&m, "decode", "out_of_range"), 3);
        assert!(m.encode_text().contains(
            "spate_messages_rejected_total{reason=\"out_of_range\",stage=\"decode\",topic=\"t\"} 3"
        ));
    }

    #[test]
    fn the_limit_trips_with_the_position_and_the_limit_named() {
        let m = Metrics::new();
        let r = Rejections::new(policy(OnError::Skip), &m, ManualClock::new());
        r.reject(&rejection(0), 0).unwrap();
        r.reject(&rejection(1), 0).unwrap();
        let e = r.reject(&rejection(2), 0).unwrap_err().to_string();
        assert!(e.contains("3 consecutive messages rejected"), "{e}");
        assert!(e.contains("topic t partition 0 offset 2"), "{e}");
        assert!(e.contains("out of range"), "{e}");
        // Under fail the first rejection stops the run: no limit applies.
        let r = Rejections::new(policy(OnError::Fail), &m, ManualClock::new());
        for i in 0..10 {
            assert_eq!(r.reject(&rejection(i), 0).unwrap(), Action::Fail);
        }
    }

    #[test]
    fn tombstones_are_skipped_and_counted_unless_they_are_errors() {
        let m = Metrics::new();
        let r = Rejections::new(policy(OnError::Fail), &m, ManualClock::new());
        assert!(r.tombstone("t", 0, 4));
        assert!(r.tombstone("t", 0, 5));
        assert_eq!(count(&m, "decode", "tombstone"), 2);
        let mut p = policy(OnError::Skip);
        p.tombstones_are_errors = true;
        let r = Rejections::new(p, &m, ManualClock::new());
        assert!(!r.tombstone("t", 0, 6));
        assert_eq!(count(&m, "decode", "tombstone"), 2);
    }

    #[test]
    fn the_log_is_rate_limited_per_window() {
        let clock = ManualClock::new();
        let mut w = LogWindow {
            started: None,
            logged: 0,
            suppressed: 0,
        };
        let admitted = (0..50).filter(|_| w.admit(clock.now())).count();
        assert_eq!(admitted, LOG_BURST as usize);
        assert_eq!(w.suppressed, 40);
        clock.advance(LOG_WINDOW);
        assert!(w.admit(clock.now()), "a new window logs again");
        assert_eq!(w.suppressed, 0);
    }

    /// The encoders' own reason texts map to the labels that
    /// docs/bad-messages.md lists.
    #[test]
    fn decode_reasons_from_the_encoder_texts() {
        let cases = [
            ("tombstone: the message has no payload", "tombstone"),
            ("invalid JSON at byte 3: expected a value", "invalid_json"),
            (
                "payload is not valid UTF-8: invalid utf-8 sequence",
                "invalid_json",
            ),
            ("not an integer in UInt8 range", "out_of_range"),
            ("300 is out of range for UInt8", "out_of_range"),
            ("12 bytes do not fit FixedString(4)", "out_of_range"),
            ("not a name of Enum8('a' = 1, 'b' = 2)", "unknown_enum"),
            ("7 is not a value of Enum8('a' = 1)", "unknown_enum"),
            ("cannot convert this JSON value to UInt64", "wrong_type"),
            ("null for non-Nullable type String", "null"),
            ("not a UUID (8-4-4-4-12 hex)", "invalid_value"),
            (
                "table db.audit (of topic audit) is not allowed by --allow-tables",
                "table_not_allowed",
            ),
            (
                "table db.x (of topic x) does not exist, and no --create-table-like is given",
                "table_missing",
            ),
            (
                "table db.x does not exist, and a bounded run (--until-end) does not start again to create it",
                "table_missing",
            ),
            (
                "topic a.b gives table name `db.a.b`, which is not [DB.]TABLE (map it with --table-map)",
                "table_unresolved",
            ),
            (
                "no table name: the message has no header tenant",
                "table_unresolved",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(decode_reason(text), want, "{text}");
        }
    }
}
