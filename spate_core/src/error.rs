//! Errors of the runtime layer.
//!
//! Every error answers two questions in code: whose fault it is
//! ([`Fault`]) and whether retrying can help. A [`FatalError`] is what stops
//! a pipeline; it becomes the [`FatalErrorReport`](crate::pipeline::FatalErrorReport)
//! in the [`ExitReport`](crate::pipeline::ExitReport).

use crate::record::Message;
use std::fmt;

/// Whose fault an error is. Drives retries, the future dead-letter path and
/// the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The user's data or configuration (bad message, unknown table).
    User,
    /// An external system (broker, ClickHouse) failed or is unreachable.
    External,
    /// A bug in spate.
    Internal,
}

/// What can get a pipeline past its fatal error without a person's help.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recovery {
    /// Nothing: the process exits with the error.
    #[default]
    None,
    /// Starting the pipeline again: nothing past the failure was
    /// committed, and a fresh start reads those messages again and encodes
    /// them anew (a table change only a fresh start can encode for).
    StartAgain,
}

/// The error that stops a pipeline: which component failed and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{component}: {reason}")]
pub struct FatalError {
    /// Component that failed (`driver-0`, `sink shard 0`, `kafka source`, ...).
    pub component: String,
    /// Human-readable cause, complete enough to act on.
    pub reason: String,
    /// Whose fault it is.
    pub fault: Fault,
    /// What can get past it; travels to the exit report
    /// ([`FatalErrorReport::recovery`](crate::pipeline::FatalErrorReport)).
    pub recovery: Recovery,
}

impl FatalError {
    /// Build a fatal error.
    pub fn new(component: impl Into<String>, reason: impl Into<String>, fault: Fault) -> Self {
        Self {
            component: component.into(),
            reason: reason.into(),
            fault,
            recovery: Recovery::None,
        }
    }

    /// The same error, recovered from by starting the pipeline again.
    #[must_use]
    pub fn start_again(self) -> Self {
        Self {
            recovery: Recovery::StartAgain,
            ..self
        }
    }
}

/// Where a bad message sits: topic, partition and offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagePosition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Offset of the bad message.
    pub offset: i64,
}

impl MessagePosition {
    /// The position of `msg`.
    #[must_use]
    pub fn of(msg: &Message<'_>) -> Self {
        Self {
            topic: msg.topic.to_owned(),
            partition: msg.partition,
            offset: msg.offset,
        }
    }
}

impl fmt::Display for MessagePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topic {} partition {} offset {}",
            self.topic, self.partition, self.offset
        )
    }
}

/// A message the chain could not turn into a row.
///
/// Carries the position and, where there is one, the column and the
/// offending value (already cut short by the encoder).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct DecodeError {
    /// Where the message sits.
    pub position: MessagePosition,
    /// The column being filled, if the failure is about one column.
    pub column: Option<String>,
    /// The offending value, cut short.
    pub value: Option<String>,
    /// Why it failed.
    pub reason: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad message at {}", self.position)?;
        if let Some(column) = &self.column {
            write!(f, ", column `{column}`")?;
        }
        if let Some(value) = &self.value {
            // The encoder hands the value as its JSON text, already cut short.
            write!(f, ", value {value}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Errors of a chain (decode → route → shard queue).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// A message could not be decoded into a row (user data).
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The shard queues are closed: the sink is gone.
    #[error("shard queue {shard} is closed: the sink stopped")]
    QueueClosed {
        /// Shard index.
        shard: usize,
    },
    /// Exactly-once: the blocks earlier owners cut in a partition could not
    /// be read, so its replay cannot be cut at the same offsets.
    #[error("exactly-once: reading the recorded blocks of {partition} failed: {reason}")]
    BlockPlan {
        /// `topic/partition`.
        partition: String,
        /// Why.
        reason: String,
    },
    /// A message that acts on the target in order with its lane's rows
    /// (a truncate under `--on-truncate delete-all`) could not: the rows
    /// before it were not acknowledged in time, or the act failed. The
    /// message is not covered, so a replay does it again.
    #[error("{position}: {reason}")]
    Barrier {
        /// The message.
        position: MessagePosition,
        /// Why.
        reason: String,
    },
}

impl ChainError {
    /// Whose fault this is.
    #[must_use]
    pub fn fault(&self) -> Fault {
        match self {
            ChainError::Decode(_) => Fault::User,
            ChainError::QueueClosed { .. } => Fault::Internal,
            ChainError::BlockPlan { .. } | ChainError::Barrier { .. } => Fault::External,
        }
    }
}

/// Errors a source reports (from the controller's calls or a lane's poll).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The source client failed in a way retrying will not fix.
    #[error("source failed: {0}")]
    Fatal(String),
    /// A transient failure; the caller may retry.
    #[error("source error (retriable): {0}")]
    Transient(String),
}

impl SourceError {
    /// Whether retrying the call can help.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        matches!(self, SourceError::Transient(_))
    }
}

/// Convenience alias.
pub type Result<T, E = FatalError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_error_names_position_column_and_value() {
        let e = DecodeError {
            position: MessagePosition {
                topic: "events".into(),
                partition: 3,
                offset: 42,
            },
            column: Some("user_id".into()),
            value: Some("\"abc\"".into()),
            reason: "not an integer".into(),
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "bad message at topic events partition 3 offset 42, column `user_id`, value \"abc\": not an integer"
        );
    }
}
