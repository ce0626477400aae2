//! The ClickHouse sink: [`SinkPool`] builds the shard queues and their
//! insert workers, and hands the runtime its [`SinkRuntime`] half (queues,
//! drain hook, probe).
//!
//! ```text
//! chains (driver threads) ──Chunk──▶ ShardQueues[shard] ──▶ worker 0..W (tokio tasks)
//!                                                              │ INSERT … FORMAT RowBinary
//!                                                              │ retry: capped exponential backoff + jitter
//! controller ◀── AckEvent::{Acked, Abandoned, Fatal} ◀─────────┘
//! ```
//!
//! - [`retry`]: the backoff policy.
//! - [`worker`]: one insert worker: take a chunk, insert it until it is in
//!   or the error is not retriable, acknowledge.
//! - [`pool`]: connect, read the schema, spawn workers, drain and probe.
//! - [`topology`]: shards, replicas and weights (`--shard`, `--cluster`),
//!   and the slot table a sharding hash is mapped through.
//!
//! Each shard has its own queue (with an equal share of the queue budget)
//! and its own workers; a worker fails over across its shard's replicas.

mod pool;
mod retry;
mod topology;
mod worker;

pub use pool::{
    ChRowEncoder, EncoderFactory, PreparedSink, SinkError, SinkPool, SinkSpec, TableRef,
};
pub use retry::RetryPolicy;
pub use topology::{ShardSpec, Topology, TopologySource};
