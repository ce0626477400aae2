//! The assembly of one `spate run` process, step by step: validate every
//! pipeline, start the I/O runtime, prepare and spawn the sinks, build
//! the Kafka source (one consumer group over every pipeline's topics) and
//! the chain factory, start the [`PipelineRuntime`] with the options the
//! flags give, run it until the signal (or the end of input), and map its
//! [`ExitReport`] to the exit code.
//!
//! Runs on the main thread, which blocks in `PipelineRuntime::run` until
//! the process ends; the runtime owns the driver, controller and insert
//! threads it starts.

use super::{chains, signals, sinks};
use crate::cli::RunArgs;
use crate::exit::Exit;
use crate::print_config::effective_config;
use crate::routing::{self, Plan};
use crate::settings::{process, validate_pipelines, Process, Validated};
use spate_clickhouse::Presence;
use spate_core::error::Recovery;
use spate_core::metrics::Metrics;
use spate_core::pipeline::{
    ExitReport, ExitState, Pipeline, PipelineRuntime, RuntimeOptions, SinkOptions,
};
use spate_core::sink::ack_channel;
use spate_kafka::{KafkaSource, KafkaSourceConfig};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Run one or more pipelines (from `--config`, or the one the flags
/// describe) in one process: one consumer group for all their topics,
/// shared drivers and memory budget, each pipeline's own table, shards and
/// batching. Process-wide settings come from the first pipeline's
/// arguments (they are the same in all of them).
pub fn run(given: Vec<(String, RunArgs)>) -> Result<(), Exit> {
    let args = &given
        .first()
        .ok_or_else(|| Exit::usage("no pipeline configured"))?
        .1;
    let mut baseline = crate::rotate::Baseline::of(&given);
    let process = process(args, &validate_pipelines(&given)?[0]);
    if args.print_config {
        print!("{}", effective_config(&given, &process));
        return Ok(());
    }
    let shutdown = signals::watch();
    let reloads = crate::rotate::ReloadTotals::default();
    let mut replays = Vec::<Instant>::new();
    // One set of metrics for the process: a start again of the pipelines
    // (a topic matched or gone, a rotated secret, a table change) must not
    // send the counters back to 0.
    let metrics = Arc::new(Metrics::new());
    // Tables messages asked for (`routing::message::Wanted`), made at the
    // next start.
    let asked = Arc::new(Mutex::new(BTreeSet::new()));
    // Tables messages asked for whose making failed, and why: their
    // messages are bad messages from then on, not a start again each.
    let mut unmade: HashMap<String, String> = HashMap::new();
    loop {
        // The routing pipelines expanded into one per table, from the
        // topics there are now (`crate::routing`).
        let (plan, validated, created) = plan_pipelines(&given, &process, &asked, &mut unmade)?;
        // Made, or there already: asked for again if a message still needs
        // one.
        asked.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let run = Run {
            asked: &asked,
            unmade: &unmade,
            given: &given,
            plan: &plan,
            pipelines: &plan.pipelines,
            validated: &validated,
            created: &created,
            process: &process,
            shutdown: &shutdown,
            baseline: &baseline,
            reloads: &reloads,
            metrics: &metrics,
        };
        let exit = match run_once(&run) {
            Ok(()) => return Ok(()),
            Err(Ended::Exit(exit)) => return Err(exit),
            // A signal while the pipelines stopped: they were drained and
            // committed, so this is the end.
            Err(Ended::NewClients) if *shutdown.requested.borrow() => return Ok(()),
            Err(Ended::NewClients) => None,
            Err(Ended::StartAgain(exit)) if *shutdown.requested.borrow() => return Err(exit),
            Err(Ended::StartAgain(exit)) => Some(exit),
        };
        if let Some(exit) = exit {
            // A table change spate could not convert encoded batches for:
            // the run failed without committing them; start again, so
            // their messages are read and encoded for the new columns
            // (docs/rows.md). Bounded, in case the change keeps failing
            // batches.
            replays.retain(|at| at.elapsed() < REPLAY_WINDOW);
            if replays.len() >= MAX_REPLAYS {
                tracing::error!(
                    replays = replays.len(),
                    "the table keeps changing under spate; giving up"
                );
                return Err(exit);
            }
            replays.push(Instant::now());
            tracing::warn!(
                cause = %exit.message(),
                "starting the pipeline again: batches encoded before the table changed are read from Kafka again and encoded for its new columns"
            );
        }
        // Every secret read again, as at a start (the files seen first, so
        // a change after this reading is applied by the next run's watch).
        baseline = crate::rotate::Baseline::of(&given);
    }
}

/// The pipelines to run now: the given ones with the routing ones
/// expanded, validated, their tables settled (with the tables created).
/// While no table can be written (the patterns match nothing, or only
/// topics without a table), look again every `--topic-refresh`: a
/// restart for a topic change must not end the process. A bounded run has
/// nothing to read, and ends. A failed listing of the topics is tried
/// again for about [`LISTING_PATIENCE`].
fn plan_pipelines(
    given: &[(String, RunArgs)],
    process: &Process,
    wanted: &Mutex<BTreeSet<String>>,
    unmade: &mut HashMap<String, String>,
) -> Result<(Plan, Vec<Validated>, Vec<String>), Exit> {
    let refresh = given[0].1.topic_refresh;
    let mut listing_since: Option<Instant> = None;
    loop {
        let mut asked = wanted.lock().unwrap_or_else(|p| p.into_inner()).clone();
        asked.retain(|t| !unmade.contains_key(t));
        let cluster = routing::Cluster {
            topics: &routing::list_topics,
            tables: &routing::list_tables,
            wanted: &asked,
        };
        let expanded = routing::expand_on(given, &cluster);
        let mut plan = match expanded {
            Ok(plan) => plan,
            // The listing failed (usage errors are code 2).
            Err(e) if e.code() == 1 => {
                let since = *listing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= LISTING_PATIENCE {
                    return Err(e);
                }
                tracing::warn!(error = %e.message(), "listing the topics or tables failed; trying again");
                std::thread::sleep(refresh.min(Duration::from_secs(5)));
                continue;
            }
            Err(e) => return Err(e),
        };
        listing_since = None;
        let mut validated = crate::settings::validate_each(&plan.pipelines)?;
        let created = settle_tables(&mut plan, &mut validated, &asked, unmade)?;
        if !plan.pipelines.is_empty() {
            return Ok((plan, validated, created));
        }
        let why = if plan.refused.is_empty() {
            "no topic matches the --topic patterns".to_owned()
        } else {
            format!("no table to write: {}", refusals(plan.refused.iter()))
        };
        if plan.watch.is_empty() || process.until_end {
            return Err(Exit::usage(why));
        }
        tracing::warn!(refresh_s = refresh.as_secs(), "{why}; looking again");
        // A signal before the pipelines run exits at once (signals.rs).
        std::thread::sleep(refresh);
    }
}

/// How long a failing topic listing is tried again before the start fails.
const LISTING_PATIENCE: Duration = Duration::from_secs(30);

fn refusals<'r>(refused: impl Iterator<Item = &'r routing::Refused>) -> String {
    refused
        .map(|r| r.why.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// How many routed tables [`settle_tables`] checks at once.
const TABLE_CHECKS_AT_ONCE: usize = 16;

/// Each routed table there, created from `--create-table-like` where it
/// is not, or its topics refused (their messages are bad messages).
/// Returns the tables created. Exactly-once does not read refused topics:
/// its blocks are the table's, and a refused message has none.
fn settle_tables(
    plan: &mut Plan,
    validated: &mut Vec<Validated>,
    asked: &BTreeSet<String>,
    unmade: &mut HashMap<String, String>,
) -> Result<Vec<String>, Exit> {
    let mut created = Vec::new();
    if plan.routed.iter().any(|&r| r) {
        let io = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Exit::failed(format!("starting a runtime: {e}")))?;
        // Every routed table at once (a few at a time): hundreds of
        // tables are checked in about the time of one round trip each.
        let mut checks = Vec::new();
        for (i, (_, a)) in plan.pipelines.iter().enumerate() {
            if !plan.routed[i] {
                continue;
            }
            let spec = crate::settings::sink_spec(a, &validated[i]);
            let like = (a.create_table_like.as_deref())
                .map(spate_clickhouse::TableRef::parse)
                .transpose()
                .map_err(|e| Exit::usage(e.to_string()))?;
            checks.push((i, spec, like));
        }
        let mut answers = io.block_on(async {
            let limit = Arc::new(tokio::sync::Semaphore::new(TABLE_CHECKS_AT_ONCE));
            let mut set = tokio::task::JoinSet::new();
            for (i, spec, like) in checks {
                let limit = limit.clone();
                set.spawn(async move {
                    let _permit = limit.acquire_owned().await;
                    let answer = spate_clickhouse::ensure_table(&spec, like.as_ref()).await;
                    (i, spec.table.to_string(), answer)
                });
            }
            let mut out = Vec::new();
            while let Some(joined) = set.join_next().await {
                // A panicked check leaves the table to the sink's start.
                out.extend(joined.ok());
            }
            out
        });
        // From the last, so removing a pipeline keeps the others' indices.
        answers.sort_by_key(|(i, _, _)| std::cmp::Reverse(*i));
        for (i, table, answer) in answers {
            match answer {
                Ok(Presence::Present) => {}
                Ok(Presence::Created { .. }) => created.push(table),
                Ok(Presence::Missing { url }) => {
                    let why = format!(
                        "table {table} (of topic {}) does not exist, and no --create-table-like is given",
                        plan.pipelines[i].1.topics.join(", ")
                    );
                    tracing::warn!(%url, "{why}: its messages are bad messages");
                    plan.refuse_pipeline(i, &why);
                    validated.remove(i);
                }
                // A table a message asked for (the producer chose its
                // name) that cannot be made: its messages are bad
                // messages, the pipelines go on.
                Err(e) if e.is_config() && asked.contains(&table) => {
                    let why = format!("table {table} does not exist, and making it failed: {e}");
                    tracing::warn!("{why}: its messages are bad messages");
                    unmade.insert(table, why.clone());
                    plan.refuse_pipeline(i, &why);
                    validated.remove(i);
                }
                Err(e) if e.is_config() => return Err(Exit::usage(e.to_string())),
                // Not reachable now: the sink's start waits for it.
                Err(e) => {
                    tracing::warn!(%table, error = %e, "could not check the routed table is there")
                }
            }
        }
    }
    for (i, (name, a)) in plan.pipelines.iter().enumerate() {
        let refused = plan.refused_with(i);
        if !refused.is_empty() && a.delivery == crate::cli::Delivery::ExactlyOnce {
            return Err(Exit::usage(format!(
                "pipeline {name}: {}; exactly-once writes only topics whose table it can write: give --allow-tables, --table-map or --create-table-like so each has one",
                refusals(refused.iter())
            )));
        }
    }
    let unread = plan.unread();
    if !unread.is_empty() {
        tracing::warn!(
            "not reading these topics, as no table of theirs can be written: {}",
            refusals(unread.into_iter())
        );
    }
    one_reader_per_topic(plan)?;
    Ok(created)
}

/// One reader per topic, refused topics included: a topic one pipeline
/// writes and another refuses would go to whichever chain came last.
fn one_reader_per_topic(plan: &Plan) -> Result<(), Exit> {
    let mut owner: std::collections::HashMap<String, (&str, Option<usize>)> =
        std::collections::HashMap::new();
    for (i, (name, a)) in plan.pipelines.iter().enumerate() {
        let refused = plan.refused_with(i).into_iter().map(|r| r.topic);
        // The tables of a pipeline whose messages name theirs share its
        // topics (one chain reads them).
        let group = plan.by_message[i];
        for topic in a.topics.iter().cloned().chain(refused) {
            let previous = owner.insert(topic.clone(), (name, group));
            if let Some((other, other_group)) = previous {
                if group.is_some() && other_group == group {
                    continue;
                }
                return Err(Exit::usage(format!(
                    "topic {topic} is read by pipelines {other} and {name}; a topic feeds one pipeline"
                )));
            }
        }
    }
    Ok(())
}

/// What one run of the pipelines is given.
struct Run<'a> {
    /// The tables messages asked for, made at the next start.
    asked: &'a Arc<Mutex<BTreeSet<String>>>,
    /// Tables messages asked for that could not be made, and why.
    unmade: &'a HashMap<String, String>,
    /// The pipelines as configured.
    given: &'a [(String, RunArgs)],
    /// Their routing, resolved for this run.
    plan: &'a Plan,
    /// The pipelines run: `plan.pipelines`.
    pipelines: &'a [(String, RunArgs)],
    /// The routed tables created from their template at this start.
    created: &'a [String],
    validated: &'a [Validated],
    process: &'a Process,
    /// SIGTERM/SIGINT, watched once for the process.
    shutdown: &'a signals::Shutdown,
    /// The secret files as they were when `validated` read them.
    baseline: &'a crate::rotate::Baseline,
    /// `spate_secret_reloads_total` so far, carried into this run's
    /// registry.
    reloads: &'a crate::rotate::ReloadTotals,
    /// The process's metrics, kept across starts.
    metrics: &'a Arc<Metrics>,
}

/// How a run that did not complete ended.
enum Ended {
    /// The process exits.
    Exit(Exit),
    /// The failure's report asks for a start again
    /// ([`Recovery::StartAgain`]); the exit, should starts run out.
    StartAgain(Exit),
    /// Stopped cleanly because a secret file that only a new client reads
    /// changed (`crate::rotate`): start again with new clients.
    NewClients,
}

impl From<Exit> for Ended {
    fn from(exit: Exit) -> Self {
        Ended::Exit(exit)
    }
}

/// At most this many starts again for table changes within
/// [`REPLAY_WINDOW`].
const MAX_REPLAYS: usize = 3;
const REPLAY_WINDOW: Duration = Duration::from_secs(300);

/// One run of the pipelines, from building the sinks to the exit report.
fn run_once(run: &Run<'_>) -> Result<(), Ended> {
    let Run {
        pipelines,
        validated,
        process,
        ..
    } = *run;
    let refused: Vec<sinks::Refused> = (0..pipelines.len())
        .map(|i| {
            (run.plan.refused_with(i).into_iter())
                .map(|r| (r.topic, r.why))
                .collect()
        })
        .collect();
    let mut kafka = source_config(validated, pipelines);
    kafka
        .topics
        .extend(refused.iter().flat_map(|r| r.keys().cloned()));
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("spate-io")
        .enable_all()
        .build()
        .map_err(|e| Exit::failed(format!("starting the I/O runtime: {e}")))?;
    let metrics = run.metrics.clone();
    for table in run.created {
        metrics.tables_created.with_label_values(&[table]).inc();
    }
    let acks = ack_channel();
    let prepared = sinks::prepare_all(&io, pipelines, validated, &metrics)?;
    let sinks = sinks::spawn_all(
        prepared.into_iter().zip(refused).collect(),
        pipelines,
        validated,
        process,
        &io,
        &acks.0,
        &metrics,
    )?;
    let sink_options = SinkOptions {
        limits: sinks.routes[0].limits,
    };
    // A bounded run (`--until-end`) ends on its own: no start again.
    let restart = (!process.until_end).then(|| Arc::new(Notify::new()));
    let wanted = restart.as_ref().map(|r| routing::message::Wanted {
        tables: run.asked.clone(),
        restart: r.clone(),
    });
    let mut routes = sinks.routes;
    for (route, router) in
        routes
            .iter_mut()
            .zip(run.plan.routers(run.given, wanted.as_ref(), run.unmade)?)
    {
        route.router = router;
    }
    // The drivers' dead-letter destinations, to stop their waits once the
    // run ended (a driver abandoned at the shutdown deadline must not keep
    // sending a letter forever).
    let letters: Vec<_> = (routes.iter())
        .flat_map(|r| [&r.rejections, &r.refused_rejections])
        .filter_map(|r| r.dead_letters().cloned())
        .collect();
    let chains = chains::factory(routes);
    let source = KafkaSource::new(&kafka).map_err(|e| Exit::usage(e.to_string()))?;
    let mut kafka_clients = sinks.credentials;
    kafka_clients.push(source.credentials());
    let watches = crate::rotate::watches(
        pipelines,
        validated,
        &kafka,
        kafka_clients,
        restart.as_ref(),
        run.baseline,
    );
    let pipeline = Pipeline::new(source, chains, sinks.runtime, acks, sink_options)
        .map_err(|e| Exit::failed(e.to_string()))?;
    let mut options = RuntimeOptions::new(io.handle().clone());
    set_runtime_options(&mut options, pipelines, process);
    options.metrics = metrics.clone();
    let runtime =
        PipelineRuntime::start(pipeline, options).map_err(|e| Exit::failed(e.to_string()))?;
    let progress = process.until_end && crate::stats::stderr_is_terminal();
    crate::rotate::spawn(io.handle(), watches, &metrics, run.reloads);
    if let Some(restart) = &restart {
        watch_topics(io.handle(), run, &kafka, restart.clone());
    }
    crate::stats::spawn(
        io.handle(),
        metrics.clone(),
        process.stats_interval,
        progress,
    );
    if let Some(addr) = runtime.admin_addr() {
        tracing::info!(%addr, "admin server listening (/metrics, /healthz, /readyz)");
    }
    let started = Instant::now();
    let new_clients = Arc::new(AtomicBool::new(false));
    let flag = new_clients.clone();
    let mut signalled = run.shutdown.requested.clone();
    // From here a signal drains the pipelines (before, it exits at once).
    run.shutdown.running.store(true, Ordering::SeqCst);
    let report = runtime.run(async move {
        let restart = async {
            match restart {
                Some(r) => r.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = signalled.wait_for(|s| *s) => {}
            () = restart => {
                flag.store(true, Ordering::SeqCst);
                tracing::info!("stopping the pipelines to start them again");
            }
        }
    });
    run.shutdown.running.store(false, Ordering::SeqCst);
    letters.iter().for_each(|l| l.abandon());
    let exit = if new_clients.load(Ordering::SeqCst) && report.state == ExitState::Completed {
        tracing::info!("pipelines stopped, drained and committed; starting them again");
        Err(Ended::NewClients)
    } else {
        conclude(report, started.elapsed())
    };
    // Dropping the runtime would wait for every blocking task, and one can
    // be waiting on a destination that never answers (a dead letter's
    // store after the drain gave up on it): the process must exit within
    // the shutdown deadline whatever is down, so wait a moment only.
    io.shutdown_timeout(IO_SHUTDOWN_GRACE);
    exit
}

/// Match the topic patterns against the cluster's topics every
/// `--topic-refresh`, and list the tables of the pipelines whose messages
/// name theirs; when another set matches, or a table they may write
/// appears, start the pipelines again (drained and committed) over it. A
/// listing that fails is logged and tried again at the next refresh: the
/// pipelines keep running meanwhile.
fn watch_topics(
    io: &tokio::runtime::Handle,
    run: &Run<'_>,
    kafka: &KafkaSourceConfig,
    restart: Arc<Notify>,
) {
    if run.plan.watch.is_empty() {
        return;
    }
    let given = run.given.to_vec();
    let watch = run.plan.watch.clone();
    let owners = watch.table_owners();
    let watches_topics = watch.matches_topics();
    let kafka = kafka.clone();
    let refresh = given[0].1.topic_refresh;
    io.spawn(async move {
        loop {
            tokio::time::sleep(refresh).await;
            if !owners.is_empty() {
                // The tables of the pipelines whose messages name theirs:
                // a new one that may be written starts them again with it.
                let (of, owners) = (given.clone(), owners.clone());
                let list = move || {
                    (owners.iter())
                        .map(|&i| crate::routing::list_tables(&of[i].1))
                        .collect::<Result<Vec<_>, String>>()
                };
                let changes = |tables: &Vec<Vec<String>>| watch.table_changes(&given, tables);
                match look("the routed tables", list, changes).await {
                    Look::Same => {}
                    Look::Restart => return restart.notify_one(),
                    Look::Stop => return,
                }
            }
            if !watches_topics {
                continue;
            }
            let k = kafka.clone();
            let list = move || spate_kafka::list_topics(&k);
            let changes = |topics: &Vec<String>| watch.changes(&given, topics);
            match look("the topics of the --topic patterns", list, changes).await {
                Look::Same => {}
                Look::Restart => return restart.notify_one(),
                Look::Stop => return,
            }
        }
    });
}

/// What one look of [`watch_topics`] at a listing found.
enum Look {
    /// Nothing changed, or the listing failed (tried again next time).
    Same,
    /// Start the pipelines again.
    Restart,
    /// The listing cannot be matched: stop watching.
    Stop,
}

/// `list` (off the runtime), compared with the plan by `changes`.
async fn look<T: Send + 'static>(
    what: &'static str,
    list: impl FnOnce() -> Result<T, String> + Send + 'static,
    changes: impl FnOnce(&T) -> Result<Option<String>, Exit>,
) -> Look {
    let listed = match tokio::task::spawn_blocking(list).await {
        Ok(Ok(listed)) => listed,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "listing {what} failed; trying again");
            return Look::Same;
        }
        Err(_) => return Look::Same,
    };
    match changes(&listed) {
        Ok(None) => Look::Same,
        Ok(Some(changed)) => {
            tracing::info!(changes = %changed, "{what} changed");
            Look::Restart
        }
        Err(e) => {
            tracing::warn!(error = %e.message(), "{what} cannot be matched");
            Look::Stop
        }
    }
}

/// How long the I/O runtime's blocking tasks may still run once the
/// pipeline ended (their work was abandoned; nothing of theirs commits).
const IO_SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The one Kafka source of the process: the first pipeline's settings
/// (process-wide), over every pipeline's topics.
fn source_config(validated: &[Validated], pipelines: &[(String, RunArgs)]) -> KafkaSourceConfig {
    let mut kafka = validated[0].kafka.clone();
    // The tables of a pipeline whose messages name theirs read the same
    // topics: each once.
    let topics: BTreeSet<String> = pipelines
        .iter()
        .flat_map(|(_, a)| a.topics.clone())
        .collect();
    kafka.topics = topics.into_iter().collect();
    kafka
}

/// The runtime's settings from the process-wide ones, and the pending
/// ceiling from the largest batch.
fn set_runtime_options(
    options: &mut RuntimeOptions,
    pipelines: &[(String, RunArgs)],
    process: &Process,
) {
    options.drivers = process.drivers.value;
    options.commit_interval = process.commit_interval;
    options.shutdown_timeout = process.shutdown_timeout;
    options.revoke_timeout = process.revoke_timeout.value;
    options.admin_addr = process.admin_addr;
    options.probe_interval = process.probe_interval;
    options.stall_timeout = process.stall_timeout;
    // A bounded run whose member holds no partition for one session
    // timeout after joining (a standby member) ends: see --until-end.
    options.idle_exit = process.idle_exit;
    // A lane may have at most this many rows dispatched and unacknowledged:
    // a few batches' worth, so one partition cannot hog the budget.
    let batch_rows = pipelines
        .iter()
        .map(|(_, a)| super::sinks::row_cap(a))
        .max()
        .unwrap_or(1);
    options.pending_ceiling = (batch_rows.saturating_mul(4)).min(i64::MAX as u64) as i64;
}

/// The exit of a finished run: on completion, the committed watermarks on
/// stderr; on failure, its cause (exit 1).
fn conclude(report: ExitReport, elapsed: Duration) -> Result<(), Ended> {
    match report.state {
        ExitState::Completed => {
            let rows = report.sink_drain.as_ref().map_or(0, |d| d.flushed_rows);
            tracing::debug!(rows, ?elapsed, "run complete");
            eprintln!(
                "spate: completed in {:.1}s; committed {}",
                elapsed.as_secs_f64(),
                report
                    .final_watermarks
                    .iter()
                    .map(|(p, w)| format!("{p}@{w}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            Ok(())
        }
        ExitState::Failed(f) if f.recovery == Recovery::StartAgain => {
            Err(Ended::StartAgain(Exit::failed(f.to_string())))
        }
        ExitState::Failed(f) => Err(Exit::failed(f.to_string()).into()),
        _ => Err(Exit::failed("pipeline ended in an unknown state").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::tests::args;

    #[test]
    fn a_topic_refused_by_one_pipeline_and_written_by_another_is_refused() {
        let given = vec![
            (
                "a".to_owned(),
                args(&["--topic", "ev_b", "--table", "db.b"]),
            ),
            (
                "b".to_owned(),
                args(&[
                    "--topic",
                    "^ev_",
                    "--table",
                    "db.{topic}",
                    "--allow-tables",
                    r"db\.ev_a",
                ]),
            ),
        ];
        let topics = || Ok(vec!["ev_a".to_owned(), "ev_b".to_owned()]);
        let plan = routing::expand(&given, &|_| topics()).unwrap();
        let e = one_reader_per_topic(&plan).unwrap_err();
        assert!(
            e.message()
                .contains("topic ev_b is read by pipelines a and b/db.ev_a"),
            "{}",
            e.message()
        );
        let alone = routing::expand(&given[1..], &|_| topics()).unwrap();
        assert!(one_reader_per_topic(&alone).is_ok());
    }
}
