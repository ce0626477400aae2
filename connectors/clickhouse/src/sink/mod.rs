//! The ClickHouse sink: [`SinkPool`] builds the shard queues and their
//! insert workers, and hands the runtime its [`SinkRuntime`] half (queues,
//! drain hook, probe).
//!
//! ```text
//! chains (driver threads) ──Chunk──▶ ShardQueues[shard] ──▶ worker 0..W (tokio tasks)
//!                                                              │ INSERT … FORMAT RowBinary/Native
//!                                                              │ retry: capped exponential backoff + jitter
//! controller ◀── AckEvent::{Acked, Abandoned, Fatal} ◀─────────┘
//! ```
//!
//! One job per file, imports only downwards (`pool` → `worker` →
//! `retry`/`events`/`target` → `shard` → `spec`/`error`):
//! - [`spec`]: what the user asks for ([`TableRef`], [`SinkSpec`]).
//! - [`error`]: [`SinkError`], why the sink could not start.
//! - [`topology`]: shards, replicas and weights (`--shard`, `--cluster`),
//!   and the slot table a sharding hash is mapped through.
//! - [`discover`]: the one topology resolver, shared by `run` and `check`:
//!   the shards and every replica's version and columns.
//! - [`settings`]: the insert settings spate relies on, per server version.
//! - [`shard`]: the state workers share (shards, replicas, counters).
//! - [`target`]: the HTTP attempt behind a trait (insert bytes, ping).
//! - [`retry`]: the backoff policy and the pure retry/failover decision.
//! - [`events`]: what an insert logs and counts, one struct per event.
//! - [`worker`]: one insert worker: take a chunk, insert it until it is in
//!   or the error is not retriable, acknowledge; a batch the server rejects
//!   for its rows is bisected ([`isolate`]) and the isolated rows go to the
//!   pipeline's error policy (skip, dead letter, fail); a transient error
//!   is reported in the stall table `/readyz` reads.
//! - [`isolate`]: the pure bisection plan of a rejected batch.
//! - [`probe`]: the readiness probe.
//! - [`encoder`]: the encoder adapter for the driver threads.
//! - [`live`]: tables that change while spate runs: schema versions, the
//!   periodic re-read, encoders that follow it.
//! - [`recode`]: a chunk's insert bytes for its version, or re-encoded for
//!   the table as it is now; [`guard`]: the per-insert check of the sent
//!   columns' types on servers that would store a batch of old types
//!   misread.
//! - [`intent`]: exactly-once state (`<db>.spate_intents`) and the
//!   preflight; [`fencing`]: the pure decisions that keep an old owner of
//!   a partition from breaking the new owner's blocks.
//! - [`pool`]: lifecycle: prepare, spawn, drain, hand over the runtime half.
//!
//! Each shard has its own queue (with an equal share of the queue budget)
//! and its own workers; a worker fails over across its shard's replicas.
//!
//! [`SinkRuntime`]: spate_core::pipeline::SinkRuntime

mod discover;
mod encoder;
mod error;
mod events;
mod fault;
mod fencing;
mod guard;
mod intent;
mod isolate;
mod live;
mod pool;
mod probe;
mod recode;
mod retry;
mod settings;
mod shard;
mod spec;
mod state_home;
mod target;
mod topology;
mod worker;

pub use discover::{discover, Discovery, ReplicaAnswer, ReplicaSchema};
pub use encoder::{ChRowEncoder, EncoderFactory};
pub use error::SinkError;
pub use intent::{IntentLog, STATE_TABLE};
pub use live::{LiveRowEncoder, LiveSchema, SCHEMA_REFRESH};
pub use pool::{PreparedSink, SinkPool};
pub use retry::RetryPolicy;
pub use spec::{SinkSpec, TableRef};
pub use topology::{ShardSpec, Topology, TopologySource};
pub use worker::IN_FLIGHT_COPIES;

/// The settings every insert of the sink sends, for the dead-letter
/// table's inserts on `client`'s server.
pub(crate) fn dead_letter_insert_settings(
    client: &crate::client::ChClient,
) -> Vec<(String, String)> {
    settings::insert_settings(client.features(), settings::Delivery::AtLeastOnce)
}
