//! The consume ceiling of `make bench`: a bare rdkafka consumer that reads
//! every partition of a topic from the beginning to partition EOF and
//! discards the messages. Nothing else runs, so its rate is the most any
//! connector built on this client could consume from this broker.
//!
//! ```text
//! consume_ceiling BROKERS TOPIC [-X key=value ...]
//! ```
//!
//! It prints one JSON line: messages, payload bytes, the seconds from the
//! first message to the last, and the steady rate between 10% and 90% of
//! the messages (the same window `make bench` uses for spate). CPU and peak
//! RSS are measured by the caller (wait4), like spate's.
//!
//! It uses `assign`, not a consumer group: no join delay, no commits, and the
//! group of the connector under test is left alone.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Give up when nothing arrives for this long: the topic is not there or the
/// broker stopped answering.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("consume_ceiling: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (Some(brokers), Some(topic)) = (args.next(), args.next()) else {
        return Err("usage: consume_ceiling BROKERS TOPIC [-X key=value ...]".into());
    };
    let consumer = consumer(&brokers, args)?;
    let partitions = assign_all(&consumer, &topic)?;
    let tally = consume_to_eof(&consumer, partitions)?;
    let first = tally.first.ok_or("the topic is empty")?;
    let (messages, bytes) = (tally.messages, tally.bytes);
    let secs = tally.last.duration_since(first).as_secs_f64();
    let steady = window_rate(&tally.marks, messages).unwrap_or(messages as f64 / secs.max(1e-9));
    println!(
        "{{\"messages\":{messages},\"bytes\":{bytes},\"secs\":{secs:.4},\"rows_per_s\":{steady:.0}}}"
    );
    Ok(())
}

/// A consumer with spate's fetch-relevant defaults and the `-X` overrides.
fn consumer(brokers: &str, mut args: impl Iterator<Item = String>) -> Result<BaseConsumer, String> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", "spate-consume-ceiling")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    while let Some(flag) = args.next() {
        let kv = match flag.as_str() {
            "-X" => args.next().ok_or("-X needs key=value")?,
            other => return Err(format!("unknown argument {other}")),
        };
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("-X {kv}: not key=value"))?;
        config.set(k, v);
    }
    config.create().map_err(|e| e.to_string())
}

/// Assign every partition of `topic` from the beginning; their number.
fn assign_all(consumer: &BaseConsumer, topic: &str) -> Result<usize, String> {
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("metadata of {topic}: {e}"))?;
    let partitions: Vec<i32> = md
        .topics()
        .first()
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if partitions.is_empty() {
        return Err(format!("topic {topic} has no partitions"));
    }
    let mut tpl = TopicPartitionList::new();
    for &p in &partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    Ok(partitions.len())
}

/// What was consumed, and when.
struct Tally {
    messages: u64,
    bytes: u64,
    /// Arrival time of every 1024th message, for the 10%..90% window.
    marks: Vec<(u64, Instant)>,
    first: Option<Instant>,
    last: Instant,
}

/// Poll until every one of `partitions` reached EOF (with nothing after).
fn consume_to_eof(consumer: &BaseConsumer, partitions: usize) -> Result<Tally, String> {
    let mut at_eof: HashSet<i32> = HashSet::new();
    let mut t = Tally {
        messages: 0,
        bytes: 0,
        marks: Vec::with_capacity(4096),
        first: None,
        last: Instant::now(),
    };
    let mut idle_since = Instant::now();
    while at_eof.len() < partitions {
        match consumer.poll(Duration::from_millis(100)) {
            None => {
                if idle_since.elapsed() > IDLE_LIMIT {
                    let n = t.messages;
                    return Err(format!(
                        "no message or EOF for {IDLE_LIMIT:?} after {n} messages"
                    ));
                }
            }
            Some(Ok(m)) => {
                idle_since = Instant::now();
                t.last = idle_since;
                t.first.get_or_insert(t.last);
                at_eof.remove(&m.partition());
                t.messages += 1;
                t.bytes += m.payload_len() as u64;
                if t.messages.is_multiple_of(1024) {
                    t.marks.push((t.messages, t.last));
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                idle_since = Instant::now();
                at_eof.insert(p);
            }
            Some(Err(e)) => return Err(format!("consume: {e}")),
        }
    }
    Ok(t)
}

/// Messages per second between the marks at 10% and 90% of `total`.
fn window_rate(marks: &[(u64, Instant)], total: u64) -> Option<f64> {
    let lo = marks.iter().find(|(n, _)| *n * 10 >= total)?;
    let hi = marks.iter().find(|(n, _)| *n * 10 >= total * 9)?;
    let secs = hi.1.duration_since(lo.1).as_secs_f64();
    (secs > 0.0).then(|| (hi.0 - lo.0) as f64 / secs)
}
