//! Kafka source for spate: a consumer group's partitions become lanes.
//!
//! Threads: the [`KafkaSource`] (and so the rdkafka consumer) lives on the
//! controller thread; its rebalance callbacks run inside the consumer poll,
//! which `poll_events` runs on a short-lived `spate-kafka-poll` thread
//! while the controller serves their revocation requests; each [`KafkaLane`]
//! wraps the partition's own librdkafka queue (`split_partition_queue`)
//! and is polled on a driver thread. Messages never pass through the
//! controller.
//!
//! - [`config`]: typed settings and the librdkafka properties spate sets
//!   (each with the reason), user pass-through applied last.
//! - [`connect`]: broker connection failures in one line (endpoint and
//!   step: TCP, TLS handshake, certificate verification, SASL), and the
//!   startup probe that fails on those that cannot clear.
//! - [`context`]: the consumer context's state shared by the callbacks and
//!   the source, and the revocation rendezvous.
//! - [`rebalance`]: the callbacks (split queues before assigning, explicit
//!   resume, revocation signalled to the controller, which answers through
//!   the runtime's `Revoker`; commit before giving partitions up).
//! - [`lane`]: the driver-side lane.
//! - [`fetch_error`]: which fetch errors cannot clear (table-tested), and
//!   when a transient one has persisted long enough to fail the lane.
//! - [`rendezvous`]: a question asked from inside a blocking call and
//!   answered by the calling thread (how a revocation reaches the
//!   controller).
//! - [`source`]: the controller-side `Source` implementation.
//! - [`credentials`]: SASL credentials replaced while the clients run.

pub mod config;
pub mod connect;
mod context;
pub mod credentials;
mod dead_letter;
mod fault;
mod fence;
mod fetch_error;
mod lane;
mod rebalance;
mod rendezvous;
mod source;

pub use config::{ConfigError, KafkaSourceConfig, DEFAULTS, REFUSED};
pub use credentials::SaslCredentials;
pub use dead_letter::KafkaDeadLetters;
pub use lane::KafkaLane;
pub use source::{list_topics, partition_count, KafkaSource};
