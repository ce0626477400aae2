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

mod pool;
mod retry;
mod worker;

pub use pool::{ChRowEncoder, SinkError, SinkPool, SinkSpec, TableRef};
pub use retry::RetryPolicy;
