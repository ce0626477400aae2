//! The flags `spate check` acts on: those of `spate run`, validated as
//! `run` validates them (`settings::validate`), with the Kafka prefetch
//! shrunk to what a sample needs and the ClickHouse client options of a
//! check (requests bounded by [`REQUEST_TIMEOUT`]).
//!
//! Built once on the calling thread, then only read.

use crate::cli::{Compression, RunArgs};
use crate::exit::Exit;
use crate::settings::{sink_spec, validate, Validated};
use spate_clickhouse::{ChClientOptions, SinkSpec, TableRef};
use spate_kafka::KafkaSourceConfig;
use std::time::Duration;

/// Bound on each metadata, offset and ClickHouse request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The flags `run` would act on, validated as `run` validates them.
pub(super) struct Flags<'a> {
    pub args: &'a RunArgs,
    pub table: TableRef,
    pub kafka: KafkaSourceConfig,
    /// What `run` would start its sink with; discovery reads it.
    pub sink: SinkSpec,
}

impl<'a> Flags<'a> {
    pub fn parse(args: &'a RunArgs) -> Result<Self, Exit> {
        let validated = validate(args)?;
        let mut sink = sink_spec(args, &validated);
        sink.client = client_options(args);
        let Validated {
            table, mut kafka, ..
        } = validated;
        // Only a sample is read: the smallest prefetch will do.
        kafka.prefetch_kbytes = 1024;
        Ok(Self {
            args,
            table,
            kafka,
            sink,
        })
    }
}

/// The ClickHouse client options of a check: every request bounded by
/// [`REQUEST_TIMEOUT`].
fn client_options(args: &RunArgs) -> ChClientOptions {
    ChClientOptions {
        connect_timeout: REQUEST_TIMEOUT,
        insert_timeout: args.insert_timeout,
        lz4: args.compression == Compression::Lz4,
    }
}
