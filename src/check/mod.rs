//! `spate check`: validate a configuration end to end without writing.
//!
//! Takes the flags of `spate run` and, in this order:
//!
//! 1. validates them as `run` would (usage errors exit 2 before anything is
//!    contacted);
//! 2. asks the brokers for each topic's metadata, with a consumer that
//!    never subscribes (so the group is not disturbed) and never commits;
//! 3. connects to every replica of every ClickHouse shard and reads the
//!    table's columns there;
//! 4. reads up to `--samples` messages per topic, from the group's committed
//!    offsets (or each partition's start), spread over its partitions
//!    ([`spread::Spread`]; a partition's end is its EOF, since tansu's
//!    ListOffsets answers are not reliable), and tries every column of
//!    every sampled message on its own (`RowEncoder::check_columns`).
//!
//! The report goes to stdout as it is made. Everything that would make
//! `run` fail is collected in a [`verdict::Verdict`]: exit 2 when the
//! configuration is at fault (unknown table or topic, a schema spate cannot
//! fill, bad flags), exit 1 when a service is unreachable or a sampled
//! message cannot be inserted, 0 otherwise.
//!
//! Threads: everything runs on the calling thread; ClickHouse requests run
//! on a current-thread tokio runtime, all replicas at once.
//!
//! - `flags`: the flags `run` would act on, validated as `run` does;
//! - `kafka`: the brokers, the topics' metadata, the committed offsets and
//!   the sampling consumer;
//! - `spread`: how one topic's sample is spread over its partitions;
//! - `schema`: every replica's table columns and the encoder `run` would
//!   build (with check's own copy of topology discovery);
//! - `report`: the per-topic tallies and the text tables printed;
//! - `verdict`: the problems found, and the exit they make.

mod flags;
mod kafka;
mod report;
mod schema;
mod spread;
mod verdict;

use crate::cli::CheckArgs;
use crate::exit::Exit;
use flags::Flags;
use kafka::Kafka;
use schema::Schema;
use std::time::{Duration, Instant};
use verdict::Verdict;

/// Budget for reading the samples of all topics together.
const SAMPLE_BUDGET: Duration = Duration::from_secs(20);

/// Check one pipeline's flags against the brokers and ClickHouse.
pub fn check(args: CheckArgs) -> Result<(), Exit> {
    let flags = Flags::parse(&args.run)?;
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Exit::failed(format!("starting the I/O runtime: {e}")))?;
    let mut verdict = Verdict::default();
    println!("spate check: nothing is written to ClickHouse and no offset is committed\n");
    let kafka = Kafka::connect(&flags.kafka, &mut verdict);
    let mut schema = io.block_on(Schema::read(&flags, &mut verdict));
    if let Some(schema) = &schema {
        print!("{}", report::render_schema(schema));
    }
    let mut tallies = Vec::new();
    if let (Some(kafka), Some(schema)) = (&kafka, &mut schema) {
        let deadline = Instant::now() + SAMPLE_BUDGET;
        for (i, topic) in kafka.topics.iter().enumerate() {
            // Each topic gets an equal share of what is left.
            let left = deadline.saturating_duration_since(Instant::now());
            let until = Instant::now() + left / (kafka.topics.len() - i) as u32;
            let tally = kafka.sample(topic, args.samples, until, schema, &mut verdict);
            print!("{}", tally.render(schema));
            tallies.push(tally);
        }
    }
    if let Some(schema) = &schema {
        report::judge(&tallies, schema, &mut verdict);
    }
    verdict.finish()
}
