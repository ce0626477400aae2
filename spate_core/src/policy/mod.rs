//! The error policy: one object decides what happens to a message that
//! cannot become a row, whether it failed to decode (the chain, on a
//! driver thread) or the server rejected its row (an insert worker, on the
//! sink's I/O runtime).
//!
//! ```text
//! chain (driver k) ── decode failure / tombstone ──▶ Rejections::reject ──▶ Action
//! insert worker    ── rows isolated by bisection ──▶ Rejections::reject ──▶ Action
//!                                                     │ counts spate_messages_rejected_total
//!                                                     │ logs (rate-limited)
//!                                                     └ RejectLimit: too many → PolicyError
//! ```
//!
//! - [`ErrorPolicy`]: the configuration (`--on-error`, tombstones, the
//!   limit), one per pipeline.
//! - [`Rejections`]: the shared runtime object (`Arc`, internally locked
//!   only on the rare rejection path), built once per pipeline and handed
//!   to that pipeline's chains and sink.
//! - [`RejectLimit`]/[`Limiter`]: Sentry Arroyo's DLQ limit (a ratio over a
//!   window of messages and a consecutive count).
//!
//! What an [`Action`] means for offsets is the caller's job: `Skip` makes
//! the writer cover the offset with the lane's current segment
//! ([`ShardWriter::skip`](crate::sink::ShardWriter::skip)), so it is
//! committed only once everything before it is acknowledged; `Fail` stops
//! the pipeline before anything at or after the message is committed.

mod dead_letter;
mod limit;
mod rejections;

pub use dead_letter::{cut, Abandoned, AllOf, DeadLetter, DeadLetterSink, StoreError};
pub use limit::{LimitTripped, Limiter, RejectLimit};
pub use rejections::METRIC_NAMES as POLICY_METRIC_NAMES;
pub use rejections::{decode_reason, Action, Rejection, Rejections, Stage};

use std::fmt;
use std::str::FromStr;

/// What to do with a message that cannot become a row (`--on-error`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnError {
    /// Stop the pipeline (exit 1) naming the message; nothing at or after
    /// it is committed.
    #[default]
    Fail,
    /// Count it, log it (rate-limited) and go on; its offset is committed
    /// once everything before it is acknowledged.
    Skip,
    /// Send the original message to the dead-letter destination; it counts
    /// as acknowledged once the destination acknowledged it.
    DeadLetter,
}

impl OnError {
    /// The flag's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Fail => "fail",
            OnError::Skip => "skip",
            OnError::DeadLetter => "dead-letter",
        }
    }
}

impl fmt::Display for OnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnError {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(OnError::Fail),
            "skip" => Ok(OnError::Skip),
            "dead-letter" | "dead_letter" => Ok(OnError::DeadLetter),
            other => Err(format!(
                "unknown --on-error value {other:?} (fail, skip or dead-letter)"
            )),
        }
    }
}

/// The error policy of one pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ErrorPolicy {
    /// What happens to a bad message.
    pub on_error: OnError,
    /// Whether a message without a value (a tombstone: a delete on a
    /// compacted topic) is an error (`true`) or skipped and counted with
    /// `reason="tombstone"` (`false`, the default).
    pub tombstones_are_errors: bool,
    /// When rejections stop being tolerated.
    pub limit: RejectLimit,
}

/// The policy refused to go on: the rejection limit tripped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// Too many messages were rejected.
    #[error("{tripped}; the last was at {at}: {last}")]
    Limit {
        /// Which limit.
        tripped: LimitTripped,
        /// Where the last rejected message sits (`topic … partition …
        /// offset …`).
        at: String,
        /// Why it was rejected.
        last: String,
    },
}
