//! spate's runtime: it knows nothing about Kafka or ClickHouse. It defines
//! the contracts a source ([`source`]) and a sink ([`sink`]) must meet, and
//! runs them ([`pipeline`]).
//!
//! Layout:
//! - [`pipeline`]: controller and pinned driver threads, process assembly,
//!   the shutdown sequence and the [`ExitReport`](pipeline::ExitReport).
//!   One file per job: `builder` (assembling a `Pipeline`), `chain` (the
//!   hot path from message to shard chunk, on each driver thread),
//!   `control` (controller ↔ driver messages), `controller` (the thread
//!   owning the source and the checkpointer), `driver` (the threads owning
//!   lanes and a chain), `runtime` (starting threads, main's shutdown
//!   sequence), `exit` (the report of a run).
//! - [`source`]: `Source` (controller side), `Lane` (driver side), the
//!   drain barrier.
//! - [`sink`]: shard queues, chunks, the chain's terminal stage, the
//!   acknowledgement channel, drain and probe hooks.
//! - [`checkpoint`]: acknowledged watermarks and the pending gate.
//! - [`record`]: messages and typed offsets.
//! - [`clock`]: injected time for the std threads (real and manual clocks).
//! - [`error`]: the error types of this layer, classified by fault.
//! - [`health`]: thread heartbeats (`/healthz`) and the source's readiness
//!   flags (`/readyz`).
//! - [`metrics`] and `admin`: Prometheus registry and the admin server.
//!
//! Under `--cfg loom` only the concurrency primitives and their
//! dependencies are built, for `make loom`.

#[cfg(not(loom))]
pub mod admin;
pub mod checkpoint;
pub mod clock;
pub mod error;
#[cfg(not(loom))]
pub mod health;
pub mod metrics;
#[cfg(not(loom))]
pub mod pipeline;
#[cfg(not(loom))]
pub mod policy;
pub mod record;
pub mod sink;
pub mod source;
mod sync;
