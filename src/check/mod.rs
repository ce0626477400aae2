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
//! A routing pipeline (`crate::routing`) is expanded as `run` expands it:
//! its topics without a table are listed with the reason, and each table
//! is checked as a pipeline of its own (a table `run` would create from
//! `--create-table-like`, against the template).
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

/// Check one pipeline's flags against the brokers and ClickHouse; a
/// routing pipeline (docs/routing.md) table by table, as `run` expands it.
pub fn check(args: CheckArgs) -> Result<(), Exit> {
    if !crate::routing::routes(&args.run) {
        return check_one(&args.run, args.samples, None);
    }
    let cluster = crate::routing::Cluster {
        topics: &crate::routing::list_topics,
        tables: &crate::routing::list_tables,
        wanted: &std::collections::BTreeSet::new(),
    };
    let plan = crate::routing::expand_on(&[("check".to_owned(), args.run.clone())], &cluster)?;
    // Tables missing everywhere: run creates them from the template, or
    // refuses their topics.
    let mut refused: Vec<(String, String)> = (plan.refused.iter())
        .map(|r| (r.topic.clone(), r.why.clone()))
        .collect();
    let given = [("check".to_owned(), args.run.clone())];
    // A table a message names that is not there: run would make it.
    let wanted = crate::routing::message::Wanted {
        tables: Default::default(),
        restart: Default::default(),
    };
    let routers = plan.routers(&given, Some(&wanted), &Default::default())?;
    let mut tables = Vec::new();
    for (i, (_, a)) in plan.pipelines.iter().enumerate() {
        let router = match routers[i].clone() {
            Some(spec) => match spec.tables.get(&a.table) {
                Some(&index) => Some((spec, index)),
                // --create-table-like's template: no message's table.
                None => continue,
            },
            None => None,
        };
        match missing(a)? {
            None => tables.push((a.clone(), None, router)),
            Some(_) if a.create_table_like.is_some() => {
                tables.push((a.clone(), a.create_table_like.clone(), router))
            }
            Some(why) => refused.extend(a.topics.iter().map(|t| (t.clone(), why.clone()))),
        }
    }
    println!(
        "spate check: routing: {} table(s), {} topic(s) without one\n",
        tables.len(),
        refused.len()
    );
    for (topic, why) in &refused {
        println!("  topic {topic}: {why}: its messages are bad messages under --on-error");
    }
    // The worst exit of the tables' checks (2, the configuration's fault,
    // over 1, a service's). Under --on-error fail, a topic without a
    // table stops `run` at its first message; exactly-once and a plan
    // without a table do not start: the configuration's fault.
    let mut worst: Result<(), Exit> = match refused.first() {
        _ if tables.is_empty() => Err(Exit::usage("no table to write: run does not start")),
        Some((topic, why)) if args.run.on_error == spate_core::policy::OnError::Fail => {
            Err(Exit::usage(format!(
                "topic {topic}: {why} (under --on-error fail, run stops at its first message)"
            )))
        }
        Some((topic, why)) if args.run.delivery == crate::cli::Delivery::ExactlyOnce => {
            Err(Exit::usage(format!(
                "topic {topic}: {why} (exactly-once does not start with a topic it cannot write)"
            )))
        }
        _ => Ok(()),
    };
    for (mut a, template, router) in tables {
        println!("\n== table {} (topics {})\n", a.table, a.topics.join(", "));
        if let Some(template) = template {
            println!(
                "{} does not exist: run creates it as {template}; checked against {template}\n",
                a.table
            );
            a.table = template;
        }
        if let Err(e) = check_one(&a, args.samples, router) {
            if worst.as_ref().err().is_none_or(|w| e.code() > w.code()) {
                worst = Err(e);
            }
        }
    }
    worst
}

/// Why `a`'s table cannot be written, when no replica that answered has
/// it (as `run` judges it at start).
fn missing(a: &crate::cli::RunArgs) -> Result<Option<String>, Exit> {
    let v = crate::settings::validate(a)?;
    let spec = crate::settings::sink_spec(a, &v);
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Exit::failed(format!("starting the I/O runtime: {e}")))?;
    Ok(
        match io.block_on(spate_clickhouse::ensure_table(&spec, None)) {
            Ok(spate_clickhouse::Presence::Missing { .. }) => Some(format!(
                "table {} (of topic {}) does not exist, and no --create-table-like is given",
                spec.table,
                a.topics.join(", ")
            )),
            _ => None,
        },
    )
}

/// The router of a pipeline whose messages name their table, and the
/// index of the table checked: only the sampled messages it routes there
/// are checked against the table.
type Routing = (std::sync::Arc<crate::routing::message::RouterSpec>, usize);

/// Check one table's pipeline.
fn check_one(
    run: &crate::cli::RunArgs,
    samples: usize,
    routing: Option<Routing>,
) -> Result<(), Exit> {
    let flags = Flags::parse(run)?;
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
            let mut router = routing.as_ref().map(|(spec, index)| {
                (
                    crate::routing::message::MessageRouter::new(spec.clone(), &flags.sink.format),
                    *index,
                )
            });
            let fail = (run.on_error == spate_core::policy::OnError::Fail)
                .then_some("give --on-error skip or dead-letter to go past them");
            let routed = router.as_mut().map(|(router, table)| kafka::SampleRouting {
                router,
                table: *table,
                fail,
            });
            let tally = kafka.sample(topic, samples, until, schema, routed, &mut verdict);
            print!("{}", tally.render(schema));
            tallies.push(tally);
        }
    }
    if let Some(schema) = &schema {
        report::judge(&tallies, schema, &mut verdict);
    }
    verdict.finish()
}
