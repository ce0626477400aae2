//! The flags `spate check` acts on: those of `spate run`, validated as
//! `run` validates them (`settings::validate`), with the Kafka prefetch
//! shrunk to what a sample needs and the ClickHouse client options of a
//! check (requests bounded by [`REQUEST_TIMEOUT`]).
//!
//! Built once on the calling thread, then only read.

use crate::cli::{Compression, RunArgs};
use crate::exit::Exit;
use crate::settings::{validate, Validated};
use spate_clickhouse::{ChClientOptions, TableRef, TopologySource};
use spate_kafka::KafkaSourceConfig;
use std::time::Duration;

/// Bound on each metadata, offset and ClickHouse request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The flags `run` would act on, validated as `run` validates them.
pub(super) struct Flags<'a> {
    pub args: &'a RunArgs,
    pub table: TableRef,
    pub kafka: KafkaSourceConfig,
    pub topology: TopologySource,
}

impl<'a> Flags<'a> {
    pub fn parse(args: &'a RunArgs) -> Result<Self, Exit> {
        let Validated {
            table,
            mut kafka,
            topology,
        } = validate(args)?;
        // Only a sample is read: the smallest prefetch will do.
        kafka.prefetch_kbytes = 1024;
        Ok(Self {
            args,
            table,
            kafka,
            topology,
        })
    }

    pub fn client_options(&self) -> ChClientOptions {
        ChClientOptions {
            connect_timeout: REQUEST_TIMEOUT,
            insert_timeout: self.args.insert_timeout,
            lz4: self.args.compression == Compression::Lz4,
        }
    }
}
