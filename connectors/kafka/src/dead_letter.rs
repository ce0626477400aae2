//! The dead-letter topic (`--dead-letter-topic`): a [`DeadLetterSink`]
//! over an rdkafka producer on the source's brokers, with `acks=all` and
//! idempotence, so a stored letter survives a broker failure and is never
//! written twice by the producer's own retries.
//!
//! [`KafkaDeadLetters::store`] is called from driver threads (decode
//! rejections) and from blocking tasks of the sink's runtime (rows the
//! server rejected). It queues the record and blocks until librdkafka's
//! background thread reports its delivery through the context's callback
//! (a one-shot std channel per record). A failed delivery is sent again
//! after a pause, forever, unless the error says it can never succeed: an
//! unavailable topic applies backpressure to the caller and nothing is
//! dropped. A fatal error of the producer (an idempotent producer's
//! sequence lost with the broker) leaves it unusable for good: a new
//! producer takes its place, and the letter is sent again through it.

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use spate_core::health::TransientStalls;
use spate_core::policy::{Abandoned, DeadLetter, DeadLetterSink, StoreError};
use std::sync::mpsc;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// Pause before sending a letter again after a failed delivery.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Delivery results, back to the waiting `store`.
struct Deliveries;

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<mpsc::SyncSender<Result<(), KafkaError>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, done: Self::DeliveryOpaque) {
        let _ = done.send(result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone()));
    }
}

type Producer = ThreadedProducer<Deliveries>;

/// The producer of a dead-letter topic, replaced after a fatal error;
/// shared by the [`KafkaDeadLetters::sibling`]s.
struct Shared {
    current: RwLock<Arc<Producer>>,
    config: ClientConfig,
}

impl Shared {
    fn get(&self) -> Arc<Producer> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replace `failed` (fatally failed) with a new producer, unless a
    /// sibling did already.
    fn replace(&self, failed: &Arc<Producer>, topic: &str) -> Result<(), KafkaError> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if Arc::ptr_eq(&current, failed) {
            let reason = rdkafka::producer::Producer::client(&**failed).fatal_error();
            *current = Arc::new(self.config.create_with_context(Deliveries)?);
            tracing::warn!(%topic, ?reason, "the dead-letter producer failed for good; a new one takes its place");
        }
        Ok(())
    }
}

/// The dead-letter topic's producer.
pub struct KafkaDeadLetters {
    producer: Arc<Shared>,
    topic: String,
    /// Where a letter waiting out an outage is reported (`/readyz`).
    stalls: Option<Arc<TransientStalls>>,
    /// Set at the shutdown deadline: stop waiting.
    abandoned: Abandoned,
}

impl KafkaDeadLetters {
    /// A producer of `topic` on `brokers`, with the user's librdkafka
    /// `properties` (the source's `-X`, for security settings) applied
    /// before the settings a dead letter needs.
    ///
    /// # Errors
    /// librdkafka refused the configuration.
    pub fn new(
        brokers: &str,
        topic: &str,
        properties: &[(String, String)],
    ) -> Result<Self, KafkaError> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", brokers);
        for (k, v) in properties.iter().filter(|(k, _)| is_shared(k)) {
            c.set(k, v);
        }
        // A dead letter counts as acknowledged once stored: every in-sync
        // replica must have it, and the producer's retries must not
        // duplicate it.
        c.set("acks", "all")
            .set("enable.idempotence", "true")
            // One letter at a time per caller: no batching delay.
            .set("linger.ms", "0")
            .set("message.timeout.ms", "30000")
            .set("client.id", "spate-dead-letters");
        let producer = Arc::new(Shared {
            current: RwLock::new(Arc::new(c.create_with_context(Deliveries)?)),
            config: c,
        });
        Ok(Self {
            producer,
            topic: topic.to_owned(),
            stalls: None,
            abandoned: Abandoned::default(),
        })
    }

    /// The producer's SASL credentials, to replace while it runs.
    #[must_use]
    pub fn credentials(&self) -> crate::SaslCredentials {
        let client: Arc<dyn crate::credentials::NativeClient> = self.producer.get();
        crate::SaslCredentials::of(&client, "dead-letter producer")
    }

    /// The same topic through the same producer, for another pipeline
    /// (routed pipelines share their configured pipeline's destination):
    /// its stalls and abandonment are its own.
    #[must_use]
    pub fn sibling(&self) -> Self {
        Self {
            producer: self.producer.clone(),
            topic: self.topic.clone(),
            stalls: None,
            abandoned: Abandoned::default(),
        }
    }

    /// Report a letter that keeps failing to `stalls`, so `/readyz` turns
    /// 503 naming this destination once it has not cleared for
    /// `--stall-timeout` (the pipeline waits for it meanwhile).
    #[must_use]
    pub fn with_stalls(mut self, stalls: Arc<TransientStalls>) -> Self {
        self.stalls = Some(stalls);
        self
    }

    fn send_once(&self, producer: &Producer, letter: &DeadLetter) -> Result<(), KafkaError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let extra = letter.headers();
        let original = &letter.original_headers;
        let mut headers = OwnedHeaders::new_with_capacity(original.len() + extra.len());
        // The original's headers first (a name that is not UTF-8 is kept
        // as its lossy text: Kafka header names are strings), then spate's.
        for (key, value) in original {
            headers = headers.insert(Header {
                key: &String::from_utf8_lossy(key),
                value: value.as_deref(),
            });
        }
        for (key, value) in &extra {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        let mut record = BaseRecord::with_opaque_to(&self.topic, Box::new(tx)).headers(headers);
        if let Some(k) = &letter.key {
            record = record.key(k);
        }
        if let Some(v) = &letter.value {
            record = record.payload(v);
        }
        if let Some(ts) = letter.timestamp_ms {
            record = record.timestamp(ts);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(e),
            }
        }
        rx.recv().unwrap_or_else(|_| {
            Err(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageTimedOut,
            ))
        })
    }
}

impl DeadLetterSink for KafkaDeadLetters {
    fn store(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let who = format!("dead-letter {}", self.describe());
        let mut attempt = 0u32;
        let done = loop {
            if self.abandoned.is_set() {
                break Err(StoreError::Abandoned);
            }
            attempt += 1;
            let producer = self.producer.get();
            match self.send_once(&producer, letter) {
                Ok(()) => break Ok(()),
                Err(e) if is_permanent(&e) => break Err(StoreError::refused(e)),
                Err(e) => {
                    if is_fatal(&e, &producer) {
                        if let Err(made) = self.producer.replace(&producer, &self.topic) {
                            break Err(StoreError::refused(made));
                        }
                    }
                    tracing::warn!(topic = %self.topic, attempt, error = %e, "dead letter not stored yet; retrying");
                    if let Some(s) = &self.stalls {
                        s.failing(&who, &e.to_string());
                    }
                    if !self.abandoned.pause(RETRY_PAUSE) {
                        break Err(StoreError::Abandoned);
                    }
                }
            }
        };
        if let Some(s) = &self.stalls {
            s.cleared(&who);
        }
        done
    }

    fn describe(&self) -> String {
        format!("topic {}", self.topic)
    }

    fn abandon(&self) {
        self.abandoned.set();
    }
}

/// The producer failed for good (librdkafka's fatal error): only a new
/// one can send.
fn is_fatal(e: &KafkaError, producer: &Producer) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal)
        || rdkafka::producer::Producer::client(producer)
            .fatal_error()
            .is_some()
}

/// Errors a retry cannot fix: the topic is missing or may not be written,
/// the record is too large.
fn is_permanent(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidRecord
        )
    )
}

/// Whether a user property applies to a producer too (connection and
/// security settings), not only to the consumer.
fn is_shared(key: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "security.",
        "ssl.",
        "sasl.",
        "socket.",
        "broker.",
        "client.dns",
        "api.version",
        "enable.ssl",
    ];
    PREFIXES.iter().any(|p| key.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fatal error (forced with librdkafka's test hook) is seen, and the
    /// producer is replaced once, for every sibling, by one without it.
    #[test]
    fn a_producer_failed_for_good_is_replaced_once_for_all_siblings() {
        let letters = KafkaDeadLetters::new("127.0.0.1:1", "dlq", &[]).unwrap();
        let sibling = letters.sibling();
        let failed = letters.producer.get();
        let client = rdkafka::producer::Producer::client(&*failed);
        assert!(!is_fatal(&KafkaError::Canceled, &failed));
        let reason = std::ffi::CString::new("test: sequence lost").unwrap();
        // SAFETY: a live client handle; the hook only sets its fatal error.
        let err = unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                client.native_ptr(),
                rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            )
        };
        assert_eq!(
            err,
            rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        );
        assert!(
            is_fatal(&KafkaError::Canceled, &failed),
            "the client says so"
        );
        letters.producer.replace(&failed, "dlq").unwrap();
        let fresh = sibling.producer.get();
        assert!(
            !Arc::ptr_eq(&fresh, &failed),
            "the sibling sees the new one"
        );
        assert!(!is_fatal(&KafkaError::Canceled, &fresh));
        // A sibling that saw the same failure replaces nothing more.
        sibling.producer.replace(&failed, "dlq").unwrap();
        assert!(Arc::ptr_eq(&letters.producer.get(), &fresh));
    }

    #[test]
    fn only_connection_settings_reach_the_producer() {
        for k in [
            "security.protocol",
            "sasl.mechanism",
            "ssl.ca.location",
            "socket.timeout.ms",
        ] {
            assert!(is_shared(k), "{k}");
        }
        for k in [
            "session.timeout.ms",
            "group.id",
            "auto.offset.reset",
            "enable.auto.commit",
        ] {
            assert!(!is_shared(k), "{k}");
        }
    }

    #[test]
    fn a_missing_topic_is_permanent_a_timeout_is_not() {
        assert!(is_permanent(&KafkaError::MessageProduction(
            RDKafkaErrorCode::UnknownTopicOrPartition
        )));
        assert!(!is_permanent(&KafkaError::MessageProduction(
            RDKafkaErrorCode::MessageTimedOut
        )));
    }
}
