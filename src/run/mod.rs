//! `spate run`: process assembly. Builds the Kafka source and the
//! ClickHouse sink from the connectors, hands them to a `Pipeline`, runs
//! the `PipelineRuntime` until SIGTERM/SIGINT (or the end of input with
//! `--until-end`), and maps the `ExitReport` to the exit code.
//!
//! The main thread assembles and then blocks in the runtime; the runtime
//! owns the driver threads (which build their chains with
//! [`chains::factory`]), the controller, and the I/O runtime's threads on
//! which the insert workers and the stats reporter run.
//!
//! - `assemble`: the steps, from validated flags to the exit code;
//! - `sinks`: one ClickHouse sink per pipeline, its start-up retry, and
//!   the memory budget's split over batches and shard queues;
//! - `chains`: the per-driver chain factory over every pipeline;
//! - `signals`: the shutdown signal, watched once per process (first signal
//!   drains, second exits).

mod assemble;
mod chains;
mod signals;
mod sinks;

pub use assemble::run;
