//! What a lane does with an error librdkafka puts on its partition's queue
//! instead of a message: [`disposition`] decides per rdkafka error code
//! whether it can clear by itself, and [`FetchErrors`] turns a transient
//! one that keeps coming into a failure once it has persisted for
//! [`FETCH_ERROR_PERSIST`] with no message delivered in between.
//!
//! Permanent errors (an unsupported codec or message format, an
//! authorization refusal, `auto.offset.reset=error` at an offset out of
//! range, librdkafka's fatal error) fail the lane at once: retrying them
//! logs a warning forever, commits nothing past the partition's position
//! and a bounded run never ends. Owned by the lane, on its driver thread.

use rdkafka::types::RDKafkaErrorCode;
use std::time::{Duration, Instant};

/// How long a transient fetch error may keep coming, with no message in
/// between, before the lane fails: long enough for a partition leader
/// election or a broker restart, short enough that a partition that stays
/// unreadable fails the pipeline instead of lagging silently.
pub(crate) const FETCH_ERROR_PERSIST: Duration = Duration::from_secs(120);

/// What a fetch error means for the lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// Retrying cannot help: fail now, saying why.
    Permanent(&'static str),
    /// librdkafka retries; fail only if it persists.
    Transient,
}

/// The disposition of a fetch error with this code.
pub(crate) fn disposition(code: RDKafkaErrorCode) -> Disposition {
    use Disposition::{Permanent, Transient};
    use RDKafkaErrorCode as C;
    match code {
        C::NotImplemented => Permanent(
            "librdkafka cannot read this message (an unsupported compression codec or message format)",
        ),
        C::UnsupportedCompressionType => Permanent("the broker refuses the compression codec"),
        C::UnsupportedVersion | C::UnsupportedForMessageFormat => {
            Permanent("the broker does not support this request or message format")
        }
        C::TopicAuthorizationFailed => {
            Permanent("the broker does not authorize this user to read the topic (ACL)")
        }
        C::GroupAuthorizationFailed => {
            Permanent("the broker does not authorize this user for the consumer group (ACL)")
        }
        C::ClusterAuthorizationFailed => {
            Permanent("the broker does not authorize this user for the cluster (ACL)")
        }
        C::SaslAuthenticationFailed | C::Authentication => {
            Permanent("authentication failed; check sasl.username and sasl.password")
        }
        C::AutoOffsetReset => Permanent(
            "there is no valid position to read from (no committed offset, or one out of range) and auto.offset.reset=error forbids resetting it",
        ),
        C::InvalidRecord => Permanent("the broker holds a record it calls invalid"),
        C::Fatal => Permanent("librdkafka raised a fatal error"),
        C::InvalidArgument | C::Conflict | C::Inconsistent => {
            Permanent("librdkafka refused the consumer's own request")
        }
        // Leader changes, broker restarts, timeouts, a topic just created
        // or deleted, a corrupt fetch response: retried, until they persist.
        _ => Transient,
    }
}

/// The transient errors of one lane since its last delivered message.
#[derive(Debug, Default)]
pub(crate) struct FetchErrors {
    /// The first error since the last message (or since the errors
    /// stopped for longer than the persistence window).
    first: Option<Instant>,
    last: Option<Instant>,
    /// Errors counted since `first`.
    count: u64,
}

impl FetchErrors {
    /// A transient error at `now`; `Some(how long)` once errors have kept
    /// coming for at least `persist` with no message delivered in between.
    pub(crate) fn on_error(&mut self, now: Instant, persist: Duration) -> Option<Duration> {
        let stale = self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) > persist);
        if stale || self.first.is_none() {
            self.first = Some(now);
            self.count = 0;
        }
        self.last = Some(now);
        self.count += 1;
        let lasted = now.saturating_duration_since(self.first.unwrap_or(now));
        (lasted >= persist).then_some(lasted)
    }

    /// Errors counted in the current series.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// A message was delivered: the errors cleared.
    pub(crate) fn on_message(&mut self) {
        if self.first.is_some() {
            *self = Self::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    #[test]
    fn errors_that_cannot_clear_are_permanent_and_the_others_transient() {
        let permanent = [
            C::NotImplemented,
            C::UnsupportedCompressionType,
            C::UnsupportedVersion,
            C::UnsupportedForMessageFormat,
            C::TopicAuthorizationFailed,
            C::GroupAuthorizationFailed,
            C::ClusterAuthorizationFailed,
            C::SaslAuthenticationFailed,
            C::Authentication,
            C::AutoOffsetReset,
            C::InvalidRecord,
            C::Fatal,
            C::InvalidArgument,
        ];
        for code in permanent {
            assert!(
                matches!(disposition(code), Disposition::Permanent(why) if !why.is_empty()),
                "{code:?} should be permanent"
            );
        }
        let transient = [
            C::NotLeaderForPartition,
            C::LeaderNotAvailable,
            C::UnknownTopicOrPartition,
            C::BrokerTransportFailure,
            C::AllBrokersDown,
            C::RequestTimedOut,
            C::OperationTimedOut,
            C::NetworkException,
            C::BrokerNotAvailable,
            C::KafkaStorageError,
            C::FencedLeaderEpoch,
            C::UnknownLeaderEpoch,
            C::OffsetNotAvailable,
            C::OffsetOutOfRange,
            C::BadMessage,
            C::InvalidMessage,
            C::NotCoordinator,
            C::CoordinatorLoadInProgress,
        ];
        for code in transient {
            assert_eq!(disposition(code), Disposition::Transient, "{code:?}");
        }
    }

    #[test]
    fn a_transient_error_fails_only_after_persisting_without_a_message() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let persist = Duration::from_secs(120);
        let mut e = FetchErrors::default();
        assert_eq!(e.on_error(at(0), persist), None);
        assert_eq!(e.on_error(at(60), persist), None);
        // A message clears the series.
        e.on_message();
        assert_eq!(e.on_error(at(100), persist), None);
        assert_eq!(e.on_error(at(200), persist), None, "100 s < 120 s");
        assert_eq!(e.on_error(at(220), persist), Some(Duration::from_secs(120)));
        assert_eq!(e.count(), 3);
        // Errors further apart than the window start a new series.
        let mut sparse = FetchErrors::default();
        for s in [0, 121, 242, 363] {
            assert_eq!(sparse.on_error(at(s), persist), None, "at {s}s");
        }
    }
}
