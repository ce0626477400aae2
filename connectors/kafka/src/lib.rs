//! Kafka source for spate: a consumer group's partitions become lanes.
//!
//! Threads: the [`KafkaSource`] (and so the rdkafka consumer and its
//! rebalance callbacks) lives on the controller thread; each [`KafkaLane`]
//! wraps the partition's own librdkafka queue (`split_partition_queue`)
//! and is polled on a driver thread. Messages never pass through the
//! controller.
//!
//! - [`config`]: typed settings and the librdkafka properties spate sets
//!   (each with the reason), user pass-through applied last.
//! - [`context`]: the consumer context: rebalance handling (split queues
//!   before assigning, explicit resume, synchronous revoke through the
//!   runtime's `Revoker`, commit before giving partitions up).
//! - [`lane`]: the driver-side lane.
//! - [`source`]: the controller-side `Source` implementation.

pub mod config;
mod context;
mod lane;
mod source;

pub use config::{ConfigError, KafkaSourceConfig};
pub use lane::KafkaLane;
pub use source::KafkaSource;
