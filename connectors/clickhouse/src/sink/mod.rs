//! The ClickHouse sink: [`SinkPool`] builds the shard queues and their
//! insert workers, and hands the runtime its [`SinkRuntime`] half (queues,
//! drain hook, probe).
//!
//! ```text
//! chains (driver threads) ──Chunk──▶ ShardQueues[shard] ──▶ worker 0..W (tokio tasks)
//!                                                              │ INSERT … FORMAT RowBinary/Native
//!                                                              │ retry: capped exponential backoff + jitter
//! controller ◀── AckEvent::{Acked, Abandoned, Rewind, Fatal} ◀─┘
//! ```
//!
//! By feature, imports only downwards (`pool` → `worker` → `shared`,
//! `exactly_once`, `schema_change` → `start` → `insert`):
//! - [`start`]: what a sink starts from: the spec, why it could not start,
//!   the topology and its discovery, the encoder factory.
//! - [`insert`]: what one insert is made of: the HTTP attempt behind a
//!   trait, the retry policy and decision, the settings per server
//!   version, events, fault points, the bisection plan, the shard's
//!   replicas, the insert's bytes and outcome, how a worker waits.
//! - [`schema_change`]: tables that change while spate runs: versions, the
//!   re-read, encoders that follow it, the recode, the type guard.
//! - [`exactly_once`]: the intent log, fencing, the state table's home,
//!   the preflight, and the insert stage before a block is first sent.
//! - [`shared`]: the state a sink's workers share with the drain hook.
//! - [`worker`]: one insert worker: take a chunk, insert it until it is in
//!   or the error is not retriable, acknowledge; a batch the server rejects
//!   for its rows is bisected and the isolated rows go to the pipeline's
//!   error policy (skip, dead letter, fail); a transient error is reported
//!   in the stall table `/readyz` reads.
//! - [`probe`]: the readiness probe.
//! - [`pool`]: lifecycle: prepare, spawn, drain, hand over the runtime half.
//!
//! Each shard has its own queue (with an equal share of the queue budget)
//! and its own workers; a worker fails over across its shard's replicas.
//!
//! [`SinkRuntime`]: spate_core::pipeline::SinkRuntime

pub(crate) mod exactly_once;
pub(crate) mod insert;
mod pool;
mod probe;
pub(crate) mod schema_change;
mod shared;
pub(crate) mod start;
mod worker;

pub use exactly_once::window::Takeover;
pub use exactly_once::{IntentLog, STATE_TABLE};
pub use insert::retry::RetryPolicy;
pub use pool::{PreparedSink, SinkPool};
pub use schema_change::{Encoders, LiveRowEncoder, LiveSchema, SCHEMA_REFRESH};
pub use start::change::change_plan_for;
pub use start::create::{ensure_table, list_tables, Presence};
pub use start::discover::{discover, Discovery, ReplicaAnswer, ReplicaSchema};
pub use start::encoder::{ChRowEncoder, EncoderFactory};
pub use start::error::SinkError;
pub use start::spec::{SinkSpec, TableRef};
pub use start::topology::{ShardSpec, Topology, TopologySource};
pub use worker::{StreamBounds, IN_FLIGHT_COPIES};

/// The settings every insert of the sink sends, for the dead-letter
/// table's inserts on `client`'s server.
pub(crate) fn dead_letter_insert_settings(
    client: &crate::client::ChClient,
) -> Vec<(String, String)> {
    use insert::settings::{insert_settings, Delivery};
    insert_settings(client.features(), Delivery::AtLeastOnce)
}
