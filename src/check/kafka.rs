//! The Kafka half of `spate check`: a consumer that never subscribes (so
//! the group is not disturbed), never commits and creates no topic; the
//! brokers' and topics' metadata; the group's committed offsets; and the
//! sampling of each topic from where `run` would start, spread over its
//! partitions by [`Spread`], each sampled message tried column by column
//! into a [`TopicTally`].
//!
//! Brokers first: each bootstrap broker, then each broker the metadata
//! names, gets a client of its own that asks it for metadata
//! ([`connect::probe`]); a broker that fails gets one line naming its
//! endpoint and the step that failed (TCP, TLS handshake, certificate
//! verification, SASL) instead of librdkafka's repeated log lines. A TLS
//! or SASL failure is the configuration's fault (exit 2), a broker that
//! cannot be reached a service's (exit 1).
//!
//! Everything runs on the calling thread (blocking librdkafka calls, each
//! bounded by [`REQUEST_TIMEOUT`] or by the sampling deadline); problems
//! go to the [`Verdict`], the lines of the report to stdout.

use super::flags::REQUEST_TIMEOUT;
use super::report::TopicTally;
use super::schema::Schema;
use super::spread::Spread;
use super::verdict::Verdict;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use spate_core::record::Message;
use spate_kafka::connect::{self, Diagnosed, FailureLog, Probe};
use spate_kafka::KafkaSourceConfig;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One poll of the sampling consumer, so the deadline is checked often.
const POLL: Duration = Duration::from_millis(100);

/// The brokers, answering, and the topics that exist.
pub(super) struct Kafka {
    consumer: BaseConsumer<Quiet>,
    group: String,
    pub topics: Vec<Topic>,
}

/// Logs librdkafka's errors, except the partition ends `check` waits for,
/// and records broker connection failures (which the report states once
/// per broker, so they are only logged at debug level).
#[derive(Default)]
struct Quiet {
    failures: Mutex<FailureLog>,
}

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if fac == "FAIL" {
            let mut log = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
            if log.record(None, log_message, Instant::now()).is_some() {
                tracing::debug!(target: "librdkafka", fac, "{log_message}");
                return;
            }
        }
        match level {
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{log_message}"),
            RDKafkaLogLevel::Info | RDKafkaLogLevel::Notice => {
                tracing::info!(target: "librdkafka", fac, "{log_message}")
            }
            _ => tracing::warn!(target: "librdkafka", fac, "{log_message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        let mut log = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if code == Some(RDKafkaErrorCode::PartitionEOF)
            || code == Some(RDKafkaErrorCode::AllBrokersDown)
            || log.record(code, reason, Instant::now()).is_some()
        {
            tracing::debug!(target: "librdkafka", error = %error, "{reason}");
        } else {
            tracing::warn!(target: "librdkafka", error = %error, "{reason}");
        }
    }
}

impl ConsumerContext for Quiet {}

impl Diagnosed for Quiet {
    fn failure_log(&self) -> &Mutex<FailureLog> {
        &self.failures
    }
}

/// The librdkafka configuration of `check`'s clients: `run`'s, then
/// check's own settings, set after the user's -X properties: check
/// commits nothing (not even with auto-commit asked for) and creates no
/// topic, and it stops reading a partition at its end.
fn check_config(kafka: &KafkaSourceConfig) -> ClientConfig {
    let mut config = kafka.client_config();
    config
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("allow.auto.create.topics", "false")
        .set("enable.partition.eof", "true");
    config
}

/// Ask one broker (`address`, alone in `bootstrap.servers`) for metadata;
/// prints its line. Returns the brokers it named, or `None` after
/// recording why it failed.
fn probe_broker(
    config: &ClientConfig,
    address: &str,
    verdict: &mut Verdict,
) -> Option<Vec<(i32, String)>> {
    let mut config = config.clone();
    config.set("bootstrap.servers", address);
    let consumer: BaseConsumer<Quiet> = match config.create_with_context(Quiet::default()) {
        Ok(c) => c,
        Err(e) => {
            verdict.config(format!("kafka client configuration rejected: {e}"));
            return None;
        }
    };
    match connect::probe(&consumer, REQUEST_TIMEOUT, |_| true) {
        Probe::Answered(brokers) => {
            println!("  OK: broker {address} answers");
            Some(brokers)
        }
        Probe::Failed(f) if f.step.is_configuration() => {
            verdict.config(f.to_string());
            None
        }
        Probe::Failed(f) => {
            verdict.failed(f.to_string());
            None
        }
        Probe::NoAnswer(last, _) => {
            verdict.failed(format!(
                "Kafka broker {address}: no answer within {}s: {last}",
                REQUEST_TIMEOUT.as_secs()
            ));
            None
        }
    }
}

/// Probe each bootstrap broker, then each other broker the metadata
/// names; `false` if none answered.
fn probe_brokers(kafka: &KafkaSourceConfig, verdict: &mut Verdict) -> bool {
    let config = check_config(kafka);
    let bootstrap: Vec<&str> = kafka
        .brokers
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .collect();
    let mut named = None;
    for address in &bootstrap {
        if let Some(brokers) = probe_broker(&config, address, verdict) {
            named.get_or_insert(brokers);
        }
    }
    let Some(named) = named else {
        return false;
    };
    let list: Vec<String> = named
        .iter()
        .map(|(id, a)| format!("{a} (id {id})"))
        .collect();
    println!(
        "  OK: the cluster has {} broker(s): {}",
        named.len(),
        list.join(", ")
    );
    for (_, address) in named
        .iter()
        .filter(|(_, a)| !bootstrap.contains(&a.as_str()))
    {
        probe_broker(&config, address, verdict);
    }
    true
}

pub(super) struct Topic {
    name: String,
    partitions: Vec<i32>,
}

impl Kafka {
    /// Create the consumer and read each topic's metadata; `None` if the
    /// brokers do not answer.
    pub fn connect(kafka: &KafkaSourceConfig, verdict: &mut Verdict) -> Option<Self> {
        println!("Kafka brokers {}:", kafka.brokers);
        if !probe_brokers(kafka, verdict) {
            return None;
        }
        let consumer: BaseConsumer<Quiet> =
            match check_config(kafka).create_with_context(Quiet::default()) {
                Ok(c) => c,
                Err(e) => {
                    verdict.config(format!("kafka client configuration rejected: {e}"));
                    return None;
                }
            };
        let mut topics = Vec::new();
        for name in &kafka.topics {
            let md = match consumer.fetch_metadata(Some(name), REQUEST_TIMEOUT) {
                Ok(md) => md,
                Err(e) => {
                    verdict.failed(format!("Kafka brokers {} unreachable: {e}", kafka.brokers));
                    return None;
                }
            };
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
            group: kafka.group.clone(),
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
    pub fn sample(
        &self,
        topic: &Topic,
        samples: usize,
        until: Instant,
        schema: &mut Schema,
        mut routing: Option<SampleRouting<'_>>,
        verdict: &mut Verdict,
    ) -> TopicTally {
        let committed = self.committed(topic, verdict);
        // Routing by the message: where the sampled messages go, when not
        // to the table checked.
        let mut elsewhere = 0u64;
        let mut nothing = 0u64;
        let mut refused: std::collections::BTreeMap<String, u64> = Default::default();
        // Tables `run` would make for them (`--create-table-like`).
        let mut made: std::collections::BTreeMap<String, u64> = Default::default();
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
                if let Some(r) = routing.as_mut() {
                    use spate_core::pipeline::{Routed, Router as _};
                    match r.router.route(msg) {
                        Routed::Table(t) if t == r.table => {}
                        Routed::Table(_) => {
                            elsewhere += 1;
                            return;
                        }
                        Routed::Refused(why) => {
                            *refused.entry(why).or_default() += 1;
                            return;
                        }
                        Routed::Wait(table) => {
                            *made.entry(table).or_default() += 1;
                            return;
                        }
                        Routed::Nothing(_) => {
                            nothing += 1;
                            return;
                        }
                    }
                }
                let outcome = schema.try_message(msg, &mut results);
                tally.add(msg, outcome.map(|()| results.as_slice()));
                if let Some((op, row)) = schema.last_change.take() {
                    tally.add_change(op, row);
                }
            });
            let _ = self.consumer.unassign();
            if let Some(r) = &routing {
                println!(
                    "topic {}: {} sampled message(s) name this table, {elsewhere} another one it routes to",
                    topic.name, tally.seen()
                );
                if nothing > 0 {
                    println!("  {nothing}: tombstones, which owe no row and need no table");
                }
                for (table, n) in &made {
                    println!("  {n}: table {table} does not exist: run creates it from --create-table-like, then writes them");
                }
                for (why, n) in &refused {
                    println!(
                        "  {n} name no table it can write: {why} (a bad message under --on-error)"
                    );
                    if let Some(fail) = r.fail {
                        verdict.failed(format!(
                            "topic {}: {n} sampled message(s): {why} (under --on-error fail, run stops at the first; {fail})",
                            topic.name
                        ));
                    }
                }
            }
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
                    let headers = m.headers().map(SampledHeaders);
                    each(&Message {
                        topic: &topic.name,
                        partition: m.partition(),
                        offset: m.offset(),
                        timestamp_ms: m.timestamp().to_millis(),
                        key: m.key(),
                        payload: m.payload(),
                        headers: headers
                            .as_ref()
                            .map(|h| h as &dyn spate_core::record::Headers),
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

/// A pipeline whose messages name their table: the sample is resolved
/// message by message, and only those naming the table checked are
/// checked against it.
pub(super) struct SampleRouting<'r> {
    pub router: &'r mut crate::routing::message::MessageRouter,
    /// The index of the table checked, among the router's.
    pub table: usize,
    /// Under `--on-error fail`: a message that names no table it can
    /// write fails the check, with this advice.
    pub fail: Option<&'static str>,
}

/// A sampled message's headers, as `run`'s chains read them (a table
/// named by `{header:NAME}`, `_headers` columns).
struct SampledHeaders<'m>(&'m rdkafka::message::BorrowedHeaders);

impl std::fmt::Debug for SampledHeaders<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use spate_core::record::Headers as _;
        write!(f, "SampledHeaders({})", self.count())
    }
}

impl spate_core::record::Headers for SampledHeaders<'_> {
    fn count(&self) -> usize {
        rdkafka::message::Headers::count(self.0)
    }

    fn get(&self, index: usize) -> Option<(&[u8], Option<&[u8]>)> {
        let h = rdkafka::message::Headers::try_get(self.0, index)?;
        Some((h.key.as_bytes(), h.value))
    }
}
