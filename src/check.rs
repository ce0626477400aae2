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
//!    ([`Spread`]; a partition's end is its EOF, since tansu's ListOffsets
//!    answers are not reliable), and tries every column of every sampled
//!    message on its own ([`RowEncoder::check_columns`]).
//!
//! The report goes to stdout as it is made. Everything that would make
//! `run` fail is collected in a [`Verdict`]: exit 2 when the configuration
//! is at fault (unknown table or topic, a schema spate cannot fill, bad
//! flags), exit 1 when a service is unreachable or a sampled message
//! cannot be inserted, 0 otherwise.
//!
//! Threads: everything runs on the calling thread; ClickHouse requests run
//! on a current-thread tokio runtime, all replicas at once.

use crate::cli::{CheckArgs, Compression, RunArgs};
use crate::run::{validate, Validated};
use crate::Exit;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use spate_clickhouse::{
    ChClient, ChClientOptions, ClientError, Column, EncoderOptions, RowEncoder, RowError,
    SinkError, TableRef, Topology, TopologySource,
};
use spate_core::error::MessagePosition;
use spate_core::record::Message;
use spate_kafka::KafkaSourceConfig;
use std::time::{Duration, Instant};

/// Bound on each metadata, offset and ClickHouse request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Budget for reading the samples of all topics together.
const SAMPLE_BUDGET: Duration = Duration::from_secs(20);
/// One poll of the sampling consumer, so the deadline is checked often.
const POLL: Duration = Duration::from_millis(100);

pub fn check(args: CheckArgs) -> Result<(), Exit> {
    let flags = Flags::parse(&args.run)?;
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Exit::failed(format!("starting the I/O runtime: {e}")))?;
    let mut verdict = Verdict::default();
    println!("spate check: nothing is written to ClickHouse and no offset is committed\n");
    let kafka = Kafka::connect(&flags, &mut verdict);
    let mut schema = io.block_on(Schema::read(&flags, &mut verdict));
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
        judge(&tallies, schema, &mut verdict);
    }
    verdict.finish()
}

/// The flags `run` would act on, validated as `run` validates them.
struct Flags<'a> {
    args: &'a RunArgs,
    table: TableRef,
    kafka: KafkaSourceConfig,
    topology: TopologySource,
}

impl<'a> Flags<'a> {
    fn parse(args: &'a RunArgs) -> Result<Self, Exit> {
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

    fn client_options(&self) -> ChClientOptions {
        ChClientOptions {
            connect_timeout: REQUEST_TIMEOUT,
            insert_timeout: self.args.insert_timeout,
            lz4: self.args.compression == Compression::Lz4,
        }
    }
}

/// What would make `run` fail, in the order found.
#[derive(Default)]
struct Verdict {
    /// The configuration is at fault (exit 2).
    config: Vec<String>,
    /// A service or the data is at fault (exit 1).
    failed: Vec<String>,
}

impl Verdict {
    fn config(&mut self, problem: String) {
        println!("  FAIL: {problem}");
        if !self.config.contains(&problem) {
            self.config.push(problem);
        }
    }

    fn failed(&mut self, problem: String) {
        println!("  FAIL: {problem}");
        self.failed.push(problem);
    }

    fn finish(self) -> Result<(), Exit> {
        let problems: Vec<&String> = self.config.iter().chain(&self.failed).collect();
        let Some(first) = problems.first() else {
            println!(
                "\nOK: `spate run` with these flags would start and insert the sampled messages"
            );
            return Ok(());
        };
        println!("\nFAILED: {} problem(s):", problems.len());
        for p in &problems {
            println!("  - {p}");
        }
        let message = match problems.len() {
            1 => (*first).clone(),
            n => format!("{first} (and {} more problem(s), see the report)", n - 1),
        };
        Err(if self.config.is_empty() {
            Exit::failed(message)
        } else {
            Exit::usage(message)
        })
    }
}

/// The brokers, answering, and the topics that exist.
struct Kafka {
    consumer: BaseConsumer<Quiet>,
    group: String,
    topics: Vec<Topic>,
}

/// Logs librdkafka's errors, except the partition ends `check` waits for.
struct Quiet;

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::debug!(target: "librdkafka", "{reason}");
        } else {
            tracing::warn!(target: "librdkafka", error = %error, "{reason}");
        }
    }
}

impl ConsumerContext for Quiet {}

struct Topic {
    name: String,
    partitions: Vec<i32>,
}

impl Kafka {
    /// Create the consumer and read each topic's metadata; `None` if the
    /// brokers do not answer.
    fn connect(flags: &Flags<'_>, verdict: &mut Verdict) -> Option<Self> {
        println!("Kafka brokers {}:", flags.kafka.brokers);
        let mut config = flags.kafka.client_config();
        // Set after the user's -X properties: check commits nothing (not
        // even with auto-commit asked for) and creates no topic, and it
        // stops reading a partition at its end.
        config
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("allow.auto.create.topics", "false")
            .set("enable.partition.eof", "true");
        let consumer: BaseConsumer<Quiet> = match config.create_with_context(Quiet) {
            Ok(c) => c,
            Err(e) => {
                verdict.config(format!("kafka client configuration rejected: {e}"));
                return None;
            }
        };
        let mut topics = Vec::new();
        for (i, name) in flags.kafka.topics.iter().enumerate() {
            let md = match consumer.fetch_metadata(Some(name), REQUEST_TIMEOUT) {
                Ok(md) => md,
                Err(e) => {
                    verdict.failed(format!(
                        "Kafka brokers {} unreachable: {e}",
                        flags.kafka.brokers
                    ));
                    return None;
                }
            };
            if i == 0 {
                let brokers: Vec<String> = md
                    .brokers()
                    .iter()
                    .map(|b| format!("{}:{}", b.host(), b.port()))
                    .collect();
                println!("  OK: {} broker(s): {}", brokers.len(), brokers.join(", "));
            }
            let found = md.topics().iter().find(|t| t.name() == name.as_str());
            match found.map(|t| (t.error().map(RDKafkaErrorCode::from), t.partitions())) {
                Some((None, parts)) if !parts.is_empty() => topics.push(Topic {
                    name: name.clone(),
                    partitions: parts.iter().map(|p| p.id()).collect(),
                }),
                None | Some((None | Some(RDKafkaErrorCode::UnknownTopicOrPartition), _)) => {
                    verdict.config(format!("topic `{name}` does not exist"));
                }
                Some((Some(e), _)) => verdict.failed(format!("topic `{name}`: metadata: {e}")),
            }
        }
        for t in &topics {
            println!("  OK: topic {} ({} partitions)", t.name, t.partitions.len());
        }
        Some(Self {
            consumer,
            group: flags.kafka.group.clone(),
            topics,
        })
    }

    /// Where `run` would start reading each partition: the group's
    /// committed offset, if any.
    fn committed(&self, topic: &Topic, verdict: &mut Verdict) -> Vec<Option<i64>> {
        let mut tpl = TopicPartitionList::new();
        for &p in &topic.partitions {
            tpl.add_partition(&topic.name, p);
        }
        let committed = match self.consumer.committed_offsets(tpl, REQUEST_TIMEOUT) {
            Ok(c) => c,
            Err(e) => {
                verdict.failed(format!(
                    "reading the committed offsets of group `{}` on topic {}: {e}",
                    self.group, topic.name
                ));
                return vec![None; topic.partitions.len()];
            }
        };
        let offset_of = |p: i32| match committed.find_partition(&topic.name, p)?.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        topic.partitions.iter().map(|&p| offset_of(p)).collect()
    }

    /// Read up to `samples` messages of `topic` by `until`, from where
    /// `run` would start, and try each one column by column.
    fn sample(
        &self,
        topic: &Topic,
        samples: usize,
        until: Instant,
        schema: &mut Schema,
        verdict: &mut Verdict,
    ) -> TopicTally {
        let committed = self.committed(topic, verdict);
        let mut tally = TopicTally::new(&topic.name, schema.encoder.insert_columns().len());
        let mut spread = Spread::new(samples, topic.partitions.len());
        let mut tpl = TopicPartitionList::new();
        for (&p, c) in topic.partitions.iter().zip(&committed) {
            let start = c.map_or(Offset::Beginning, Offset::Offset);
            // Infallible: a fresh list with each partition once.
            let _ = tpl.add_partition_offset(&topic.name, p, start);
        }
        if samples > 0 {
            if let Err(e) = self.consumer.assign(&tpl) {
                verdict.failed(format!(
                    "topic {}: assigning its partitions: {e}",
                    topic.name
                ));
                return tally;
            }
            let mut results = Vec::new();
            let fetch_error = self.read(topic, &mut spread, until, |msg| {
                let outcome = schema.encoder.check_columns(msg, &mut results);
                tally.add(msg, outcome.map(|()| results.as_slice()));
            });
            let _ = self.consumer.unassign();
            let short = spread.short();
            if short > 0 {
                verdict.failed(format!(
                    "topic {}: {short} more message(s) wanted, but none arrived within the deadline and the end was not reached{}",
                    topic.name,
                    fetch_error.map(|e| format!(" (last fetch error: {e})")).unwrap_or_default()
                ));
            }
        }
        tally.partitions = (0..committed.len())
            .map(|i| spread.describe(topic.partitions[i], committed[i], i))
            .collect();
        tally
    }

    /// Poll the assigned partitions of `topic` until `spread` wants no
    /// more or `until`, handing each wanted message to `each`. Returns the
    /// last fetch error, if any.
    fn read(
        &self,
        topic: &Topic,
        spread: &mut Spread,
        until: Instant,
        mut each: impl FnMut(&Message<'_>),
    ) -> Option<String> {
        let index = |p: i32| topic.partitions.iter().position(|&q| q == p);
        let mut paused = vec![false; topic.partitions.len()];
        let mut fetch_error = None;
        loop {
            let wants = spread.wants();
            self.pace(topic, &wants, &mut paused);
            if !wants.contains(&true) || Instant::now() >= until {
                return fetch_error;
            }
            match self.consumer.poll(POLL) {
                None => {}
                Some(Ok(m)) => {
                    let Some(i) = index(m.partition()).filter(|&i| wants[i]) else {
                        continue;
                    };
                    each(&Message {
                        topic: &topic.name,
                        partition: m.partition(),
                        offset: m.offset(),
                        timestamp_ms: m.timestamp().to_millis(),
                        key: m.key(),
                        payload: m.payload(),
                    });
                    spread.read[i] += 1;
                }
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    if let Some(i) = index(p) {
                        spread.ended[i] = true;
                    }
                }
                Some(Err(e)) => fetch_error = Some(e.to_string()),
            }
        }
    }

    /// Pause the partitions that have their share, resume those that need
    /// more (a resumed partition continues after its last message).
    fn pace(&self, topic: &Topic, wants: &[bool], paused: &mut [bool]) {
        for (i, (&want, was_paused)) in wants.iter().zip(paused.iter_mut()).enumerate() {
            if want != *was_paused {
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&topic.name, topic.partitions[i]);
            let done = if want {
                self.consumer.resume(&tpl)
            } else {
                self.consumer.pause(&tpl)
            };
            match done {
                Ok(()) => *was_paused = !want,
                Err(e) => tracing::debug!(topic = %topic.name, error = %e, "pause/resume"),
            }
        }
    }
}

/// Spreads one topic's sample over its partitions: equal shares, and what
/// a partition that reached its end could not give goes to the others.
struct Spread {
    total: usize,
    read: Vec<usize>,
    /// The partition's end was reached (partition EOF).
    ended: Vec<bool>,
}

impl Spread {
    fn new(total: usize, partitions: usize) -> Self {
        Self {
            total,
            read: vec![0; partitions],
            ended: vec![false; partitions],
        }
    }

    /// Per partition, whether it should give more messages.
    fn wants(&self) -> Vec<bool> {
        let fixed: usize = (0..self.read.len())
            .filter(|&i| self.ended[i])
            .map(|i| self.read[i])
            .sum();
        let open: Vec<usize> = (0..self.read.len()).filter(|&i| !self.ended[i]).collect();
        let mut left = self.total.saturating_sub(fixed);
        let mut wants = vec![false; self.read.len()];
        for (k, &i) in open.iter().enumerate() {
            let share = left.div_ceil(open.len() - k);
            wants[i] = self.read[i] < share;
            left -= share;
        }
        wants
    }

    /// Messages still wanted from partitions whose end was not reached.
    fn short(&self) -> usize {
        let read: usize = self.read.iter().sum();
        if self.wants().contains(&true) {
            self.total.saturating_sub(read)
        } else {
            0
        }
    }

    fn describe(&self, partition: i32, committed: Option<i64>, i: usize) -> String {
        let from = match committed {
            Some(o) => format!("from the committed offset {o}"),
            None => "from the start (nothing committed)".to_owned(),
        };
        let end = if self.ended[i] { ", end reached" } else { "" };
        format!(
            "partition {partition} {from}: {} sampled{end}",
            self.read[i]
        )
    }
}

/// The target table, read from every replica.
struct Schema {
    columns: Vec<Column>,
    encoder: RowEncoder,
}

/// One replica's answer: its version and the table's columns.
type Answer = Result<(String, Vec<Column>), ClientError>;

impl Schema {
    /// Connect to every replica of every shard and read the columns.
    /// `None` if no replica answered or the schema is unusable.
    async fn read(flags: &Flags<'_>, verdict: &mut Verdict) -> Option<Self> {
        println!("\nClickHouse, table {}:", flags.table);
        let topology = match resolve(flags).await {
            Ok(t) => t,
            Err(e) => {
                if e.is_config() {
                    verdict.config(e.to_string());
                } else {
                    verdict.failed(e.to_string());
                }
                return None;
            }
        };
        let answers = describe_all(flags, &topology).await;
        let mut columns: Option<(String, Vec<Column>)> = None;
        for (s, r, url, answer) in answers {
            let label = format!("shard {} replica {} {url}", s + 1, r + 1);
            match answer {
                Ok((version, cols)) => match &columns {
                    Some((first, c)) if *c != cols => verdict.config(format!(
                        "table {} on {url} has other columns than on {first}; every shard and replica must have the same schema",
                        flags.table
                    )),
                    _ => {
                        println!("  OK: {label} (ClickHouse {version})");
                        columns.get_or_insert((url, cols));
                    }
                },
                Err(e @ (ClientError::UnknownTable { .. } | ClientError::ColumnType { .. })) => {
                    verdict.config(format!("clickhouse at {url}: {e}"));
                }
                Err(e) => verdict.failed(format!("ClickHouse {label} unreachable: {e}")),
            }
        }
        let (_, columns) = columns?;
        Self::plan(flags, columns, verdict)
    }

    /// The encoder `run` would build, and the column list.
    fn plan(flags: &Flags<'_>, columns: Vec<Column>, verdict: &mut Verdict) -> Option<Self> {
        let options = EncoderOptions {
            strict: flags.args.strict,
            with_defaults: false,
        };
        let built = RowEncoder::new(&columns, options).and_then(|mut e| {
            if !flags.args.shard_key.is_empty() {
                e.set_shard_key(&flags.args.shard_key)?;
            }
            Ok(e)
        });
        let encoder = match built {
            Ok(e) => e,
            Err(e) => {
                verdict.config(format!("table {}: {e}", flags.table));
                return None;
            }
        };
        let schema = Self { columns, encoder };
        print!("{}", schema.render());
        Some(schema)
    }

    fn column_type(&self, name: &str) -> String {
        (self.columns.iter())
            .find(|c| c.name == name)
            .map_or_else(String::new, |c| c.ty.to_string())
    }

    fn render(&self) -> String {
        let mut rows = vec![cells(["column", "type", "filled from"])];
        for (i, name) in self.encoder.insert_columns().iter().enumerate() {
            let from = if self.encoder.is_metadata_column(i) {
                "Kafka message metadata"
            } else {
                "JSON key of the same name"
            };
            rows.push(cells([name, &self.column_type(name), from]));
        }
        for c in self
            .columns
            .iter()
            .filter(|c| !c.default_kind.is_insertable())
        {
            let kind = format!("not inserted ({:?})", c.default_kind).to_uppercase();
            rows.push(cells([&c.name, &c.ty.to_string(), &kind]));
        }
        format!(
            "  {} of {} columns are inserted:\n{}",
            self.encoder.insert_columns().len(),
            self.columns.len(),
            table(&rows, "    ")
        )
    }
}

/// Every replica's answer, at once, in shard and replica order (0-based).
async fn describe_all(
    flags: &Flags<'_>,
    topology: &Topology,
) -> Vec<(usize, usize, String, Answer)> {
    let mut set = tokio::task::JoinSet::new();
    for (s, shard) in topology.shards.iter().enumerate() {
        for (r, url) in shard.replicas.iter().enumerate() {
            let (url, table, options) = (url.clone(), flags.table.clone(), flags.client_options());
            let (user, password) = (flags.args.user.clone(), flags.args.password.clone());
            set.spawn(async move {
                let answer: Answer = async {
                    let c =
                        ChClient::connect_with(&url, user.as_deref(), password.as_deref(), options)
                            .await?;
                    let columns = c.describe(&table.db, &table.table).await?;
                    Ok((c.version().to_owned(), columns))
                }
                .await;
                (s, r, url, answer)
            });
        }
    }
    let mut answers = Vec::new();
    while let Some(joined) = set.join_next().await {
        answers.extend(joined.ok());
    }
    answers.sort_by_key(|(s, r, _, _)| (*s, *r));
    answers
}

/// The shards and replicas, as `run` would find them.
async fn resolve(flags: &Flags<'_>) -> Result<Topology, SinkError> {
    match &flags.topology {
        TopologySource::Single(url) => Ok(Topology::single(url)),
        TopologySource::Shards(t) => Ok(t.clone()),
        TopologySource::Cluster { url, name } => {
            let (user, password) = (flags.args.user.as_deref(), flags.args.password.as_deref());
            let seed = ChClient::connect_with(url, user, password, flags.client_options())
                .await
                .map_err(|source| SinkError::Connect {
                    url: url.clone(),
                    source,
                })?;
            let t = Topology::from_cluster(&seed, url, name).await?;
            println!(
                "  OK: cluster {name} read from {url}: {} shard(s)",
                t.shards.len()
            );
            Ok(t)
        }
    }
}

/// A value that failed, and where.
#[derive(Clone, Debug)]
struct Failure {
    at: MessagePosition,
    value: String,
    reason: String,
}

impl Failure {
    fn new(msg: &Message<'_>, e: &RowError) -> Self {
        Self {
            at: MessagePosition::of(msg),
            value: e.value.clone(),
            reason: e.reason.clone(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.value.is_empty() {
            write!(f, "value {} ", self.value)?;
        }
        write!(f, "at {}: {}", self.at, self.reason)
    }
}

/// Decoded and failed counts of one column (or of whole messages).
#[derive(Default)]
struct Count {
    decoded: usize,
    failed: usize,
    first: Option<Failure>,
}

impl Count {
    fn add(&mut self, failure: Option<Failure>) {
        match failure {
            None => self.decoded += 1,
            Some(f) => {
                self.failed += 1;
                self.first.get_or_insert(f);
            }
        }
    }
}

/// The sample of one topic, tried column by column.
#[derive(Default)]
struct TopicTally {
    topic: String,
    sampled: usize,
    /// Messages with at least one failure.
    bad: usize,
    /// Whole messages that cannot be read (not JSON, not an object, ...).
    whole: Count,
    /// Per insert column; a message that fails as a whole fails in each.
    columns: Vec<Count>,
    /// The first bad message: the column `run` would name, and why.
    first_bad: Option<(Option<String>, Failure)>,
    /// One line per partition: start, end, messages read.
    partitions: Vec<String>,
}

impl TopicTally {
    fn new(topic: &str, columns: usize) -> Self {
        Self {
            topic: topic.to_owned(),
            columns: (0..columns).map(|_| Count::default()).collect(),
            ..Self::default()
        }
    }

    fn add(&mut self, msg: &Message<'_>, outcome: Result<&[Result<(), RowError>], RowError>) {
        self.sampled += 1;
        let first = match outcome {
            Err(e) => {
                let failure = Failure::new(msg, &e);
                self.whole.add(Some(failure.clone()));
                self.columns.iter_mut().for_each(|c| c.failed += 1);
                Some((None, failure))
            }
            Ok(results) => {
                self.whole.add(None);
                for (count, r) in self.columns.iter_mut().zip(results) {
                    count.add(r.as_ref().err().map(|e| Failure::new(msg, e)));
                }
                let e = results.iter().find_map(|r| r.as_ref().err());
                e.map(|e| (e.column.clone(), Failure::new(msg, e)))
            }
        };
        if let Some(first) = first {
            self.bad += 1;
            self.first_bad.get_or_insert(first);
        }
    }

    fn render(&self, schema: &Schema) -> String {
        let mut out = format!(
            "\nTopic {}: {} message(s) sampled\n",
            self.topic, self.sampled
        );
        for p in &self.partitions {
            out.push_str(&format!("  {p}\n"));
        }
        if self.sampled == 0 {
            return out;
        }
        let count_cells = |c: &Count| [c.decoded.to_string(), c.failed.to_string()];
        let first = |c: &Count, fallback: &str| match (&c.first, c.failed) {
            (Some(f), _) => f.to_string(),
            (None, 0) => String::new(),
            (None, _) => fallback.to_owned(),
        };
        let head = ["column", "type", "decoded", "failed", "first failure"];
        let mut rows = vec![cells(head)];
        let ([d, f], whole) = (count_cells(&self.whole), first(&self.whole, ""));
        rows.push(cells(["(whole message)", "JSON object", &d, &f, &whole]));
        for (name, c) in schema.encoder.insert_columns().iter().zip(&self.columns) {
            let [d, f] = count_cells(c);
            let ty = schema.column_type(name);
            rows.push(cells([name, &ty, &d, &f, &first(c, "(whole message)")]));
        }
        out.push_str(&table(&rows, "  "));
        out
    }
}

/// One problem naming the first bad message's column, value, topic,
/// partition and offset, and how many of all sampled messages are bad.
fn judge(tallies: &[TopicTally], schema: &Schema, verdict: &mut Verdict) {
    let Some((column, failure)) = tallies.iter().find_map(|t| t.first_bad.as_ref()) else {
        return;
    };
    let column = (column.as_ref())
        .map(|c| format!("column `{c}` ({}): ", schema.column_type(c)))
        .unwrap_or_default();
    let bad: usize = tallies.iter().map(|t| t.bad).sum();
    let sampled: usize = tallies.iter().map(|t| t.sampled).sum();
    verdict.failed.push(format!(
        "{bad} of {sampled} sampled messages cannot be inserted: {column}{failure}"
    ));
}

fn cells<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Rows as aligned text columns, each line indented by `indent`.
fn table(rows: &[Vec<String>], indent: &str) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| {
        (rows.iter())
            .filter_map(|r| r.get(c))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns).map(width).collect();
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_owned();
        for (cell, w) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_spread_over_partitions_and_refill_ended_ones() {
        let mut s = Spread::new(10, 3);
        assert_eq!(s.wants(), [true, true, true]);
        s.read = vec![4, 3, 2];
        assert_eq!(s.wants(), [false, false, true]);
        // Partition 2 ended after 2: its share goes to the others.
        s.ended[2] = true;
        assert_eq!(s.wants(), [false, true, false]);
        s.read[1] = 4;
        assert_eq!(s.wants(), [false, false, false]);
        assert_eq!(s.short(), 0);
        let mut s = Spread::new(10, 2);
        s.read = vec![3, 0];
        s.ended[1] = true;
        assert_eq!((s.wants(), s.short()), (vec![true, false], 7));
        assert_eq!(Spread::new(0, 2).wants(), [false, false]);
    }

    #[test]
    fn whole_message_failures_count_in_every_column() {
        let columns = vec![Column {
            name: "n".into(),
            ty: spate_clickhouse::parse_type("UInt64").unwrap(),
            default_kind: spate_clickhouse::DefaultKind::None,
        }];
        let encoder = RowEncoder::new(&columns, EncoderOptions::default()).unwrap();
        let mut schema = Schema { columns, encoder };
        let mut tally = TopicTally::new("t", 1);
        let mut results = Vec::new();
        for (offset, payload) in [(0, r#"{"n": 1}"#), (1, "{oops"), (2, r#"{"n": "x"}"#)] {
            let msg = Message {
                topic: "t",
                partition: 0,
                offset,
                timestamp_ms: None,
                key: None,
                payload: Some(payload.as_bytes()),
            };
            let outcome = schema.encoder.check_columns(&msg, &mut results);
            tally.add(&msg, outcome.map(|()| results.as_slice()));
        }
        let text = tally.render(&schema);
        let row = |name: &str| {
            let line = text.lines().find(|l| l.trim_start().starts_with(name));
            line.unwrap_or_else(|| panic!("{name}: {text}")).to_owned()
        };
        let whole = row("(whole message)");
        assert!(
            whole.contains(" 2  ") && whole.contains("offset 1: invalid JSON"),
            "{whole}"
        );
        let n = row("n ");
        assert!(
            n.contains(" 1  ") && n.contains(r#"value "x" at topic t partition 0 offset 2"#),
            "{n}"
        );
        let mut verdict = Verdict::default();
        judge(&[tally], &schema, &mut verdict);
        assert!(verdict.config.is_empty());
        assert!(
            verdict.failed[0].starts_with("2 of 3 sampled messages cannot be inserted: value {oops at topic t partition 0 offset 1: invalid JSON"),
            "{:?}",
            verdict.failed
        );
    }

    #[test]
    fn tables_align() {
        let rows = vec![cells(["a", "bb"]), cells(["ccc", "d"])];
        assert_eq!(table(&rows, "  "), "  a    bb\n  ccc  d\n");
    }
}
