//! Kafka helpers: create a topic, produce quickly (or paced over a while, in
//! a thread) with delivery reports, read a group's committed offsets and the
//! partitions' end offsets.

use super::env::{block_on, wait_for, SESSION_TIMEOUT_MS};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message as _};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A broker and the client properties that reach it (TLS, SASL).
#[derive(Clone, Debug)]
pub struct KafkaEndpoint {
    /// `host:port[,…]`.
    pub brokers: String,
    /// librdkafka properties every client of this broker sets (also
    /// spate's `-X`).
    pub properties: Vec<(String, String)>,
}

impl KafkaEndpoint {
    /// A PLAINTEXT broker.
    pub fn plain(brokers: &str) -> Self {
        Self {
            brokers: brokers.to_owned(),
            properties: Vec::new(),
        }
    }

    /// A client configuration for it.
    pub fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    /// The properties as spate's `-X KEY=VALUE` arguments.
    pub fn x_args(&self) -> Vec<String> {
        self.properties
            .iter()
            .flat_map(|(k, v)| ["-X".to_owned(), format!("{k}={v}")])
            .collect()
    }
}

/// Create `topic` with `partitions` partitions and wait until the broker's
/// metadata shows all of them.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    create_topic_at(&KafkaEndpoint::plain(brokers), topic, partitions);
}

/// Delete `topic` (on the plain broker).
pub fn delete_topic(brokers: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = KafkaEndpoint::plain(brokers)
        .config()
        .create()
        .expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let res = block_on(admin.delete_topics(&[topic], &opts)).expect("DeleteTopics request");
    for r in res {
        if let Err((name, code)) = r {
            panic!("DeleteTopics {name}: {code:?}");
        }
    }
}

/// [`create_topic`] on a broker that may need TLS or SASL.
pub fn create_topic_at(endpoint: &KafkaEndpoint, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        endpoint.config().create().expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let res = block_on(admin.create_topics([&new], &opts)).expect("CreateTopics request");
    for r in res {
        if let Err((name, code)) = r {
            panic!("CreateTopics {name}: {code:?}");
        }
    }
    let consumer: BaseConsumer = endpoint
        .config()
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("metadata client");
    wait_for(
        "the new topic in the metadata",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let md = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .map_err(|e| e.to_string())?;
            let n = md
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .map(|t| t.partitions().len())
                .unwrap_or(0);
            if n == partitions as usize {
                Ok(())
            } else {
                Err(format!("{n} partitions"))
            }
        },
    );
}

/// A [`Msg::payload`] that produces a message without a value (a
/// tombstone, a delete on a compacted topic).
pub const TOMBSTONE: &str = "\u{0}tombstone";

/// One message to produce.
pub struct Msg {
    pub partition: i32,
    pub key: Option<String>,
    pub payload: String,
    /// CreateTime in milliseconds; `None` lets the producer stamp it.
    pub timestamp_ms: Option<i64>,
}

/// The suite's plain numbered messages: message `i` is `{"n":i,"s":"row i"}`
/// (for a table `(n UInt64, s String, ...)`), round-robin over `partitions`,
/// no key, stamped by the producer.
pub fn numbered(partitions: i32) -> impl Fn(usize) -> Msg + Send + Clone + 'static {
    move |i| Msg {
        partition: (i % partitions as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"row {i}"}}"#),
        timestamp_ms: None,
    }
}

/// Where each produced message landed.
#[derive(Debug)]
pub struct Produced {
    /// `(partition, offset)` per message index.
    pub placement: Vec<(i32, i64)>,
    /// Messages per partition, which is the end offset (offsets are checked
    /// to be exactly `0..count`).
    pub counts: Vec<i64>,
}

impl Produced {
    /// Total messages.
    pub fn total(&self) -> i64 {
        self.counts.iter().sum()
    }

    /// `index_at[partition][offset]` = message index.
    pub fn index_at(&self) -> Vec<Vec<usize>> {
        let mut v: Vec<Vec<usize>> = self
            .counts
            .iter()
            .map(|&c| vec![usize::MAX; c as usize])
            .collect();
        for (i, &(p, o)) in self.placement.iter().enumerate() {
            v[p as usize][o as usize] = i;
        }
        v
    }
}

#[derive(Default)]
struct DeliveryLog {
    ok: Vec<(usize, i32, i64)>,
    errors: Vec<(usize, String)>,
}

struct Recorder {
    log: Mutex<DeliveryLog>,
}

impl ClientContext for Recorder {}

impl ProducerContext for Recorder {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let mut log = self.log.lock().expect("delivery log");
        match result {
            Ok(m) => log.ok.push((index, m.partition(), m.offset())),
            Err((e, _)) => log.errors.push((index, e.to_string())),
        }
    }
}

/// Produce `count` messages built by `make(index)` to `topic` (which has
/// `partitions` partitions) without waiting for each, then flush with a
/// deadline. Panics unless every message was acknowledged and each
/// partition's offsets are exactly `0..count`.
pub fn produce(
    brokers: &str,
    topic: &str,
    partitions: i32,
    count: usize,
    make: impl FnMut(usize) -> Msg,
) -> Produced {
    produce_at(
        &KafkaEndpoint::plain(brokers),
        topic,
        partitions,
        count,
        make,
    )
}

/// [`produce`] to a broker that may need TLS or SASL.
pub fn produce_at(
    endpoint: &KafkaEndpoint,
    topic: &str,
    partitions: i32,
    count: usize,
    make: impl FnMut(usize) -> Msg,
) -> Produced {
    produce_with(endpoint, topic, partitions, count, &[], make)
}

/// [`produce_at`] with these producer settings on top of the defaults
/// (e.g. `batch.size`, which bounds the record batches a consumer is sent
/// whole).
pub fn produce_with(
    endpoint: &KafkaEndpoint,
    topic: &str,
    partitions: i32,
    count: usize,
    settings: &[(&str, &str)],
    mut make: impl FnMut(usize) -> Msg,
) -> Produced {
    let started = Instant::now();
    let mut config = endpoint.config();
    config
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", "120000");
    for (k, v) in settings {
        config.set(*k, *v);
    }
    let producer: BaseProducer<Recorder> = config
        .create_with_context(Recorder {
            log: Mutex::new(DeliveryLog::default()),
        })
        .expect("producer");
    let deadline = started + Duration::from_secs(180);
    for i in 0..count {
        let m = make(i);
        assert!(
            m.partition < partitions,
            "message {i}: partition out of range"
        );
        let mut rec = BaseRecord::with_opaque_to(topic, i).partition(m.partition);
        if m.payload != TOMBSTONE {
            rec = rec.payload(&m.payload);
        }
        if let Some(k) = &m.key {
            rec = rec.key(k);
        }
        if let Some(ts) = m.timestamp_ms {
            rec = rec.timestamp(ts);
        }
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    assert!(
                        Instant::now() < deadline,
                        "producing timed out (queue full)"
                    );
                    rec = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce message {i}: {e}"),
            }
        }
        if i % 1000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    let left = deadline.saturating_duration_since(Instant::now());
    producer
        .flush(left)
        .unwrap_or_else(|e| panic!("flush of {count} messages to {topic}: {e}"));
    let log = std::mem::take(&mut *producer.context().log.lock().expect("log"));
    assert!(
        log.errors.is_empty(),
        "{} messages failed, first: {:?}",
        log.errors.len(),
        &log.errors[..log.errors.len().min(5)]
    );
    assert_eq!(log.ok.len(), count, "delivery reports");
    let mut placement = vec![(-1, -1); count];
    let mut counts = vec![0i64; partitions as usize];
    for &(i, p, o) in &log.ok {
        placement[i] = (p, o);
        counts[p as usize] += 1;
    }
    // Offsets must be exactly 0..count per partition.
    let mut seen: Vec<Vec<bool>> = counts.iter().map(|&c| vec![false; c as usize]).collect();
    for &(p, o) in &placement {
        let slot = seen[p as usize].get_mut(o as usize).unwrap_or_else(|| {
            panic!(
                "partition {p}: offset {o} outside 0..{}",
                counts[p as usize]
            )
        });
        assert!(!*slot, "partition {p}: offset {o} delivered twice");
        *slot = true;
    }
    eprintln!(
        "[support] produced {count} messages to {topic} in {:.1?} (per partition {counts:?})",
        started.elapsed()
    );
    Produced { placement, counts }
}

/// The group's committed offset per partition `0..partitions` (`None`: no
/// commit). Reads with a group-less BaseConsumer that never subscribes.
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    committed_at(&KafkaEndpoint::plain(brokers), group, topic, partitions)
}

/// Assert that `group` committed every partition `0..partitions` of
/// `topic` at its end offset (`what` names the check in the failure).
pub fn assert_committed_to_end(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
    what: &str,
) {
    let ends: Vec<Option<i64>> = (end_offsets(brokers, topic, partitions).into_iter())
        .map(Some)
        .collect();
    assert_eq!(
        committed(brokers, group, topic, partitions),
        ends,
        "{what}: committed to the end"
    );
}

/// [`committed`] on a broker that may need TLS or SASL.
pub fn committed_at(
    endpoint: &KafkaEndpoint,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<Option<i64>> {
    let consumer: BaseConsumer = endpoint
        .config()
        .set("group.id", group)
        .set("session.timeout.ms", SESSION_TIMEOUT_MS)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = wait_for(
        "committed offsets",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            consumer
                .committed_offsets(tpl.clone(), Duration::from_secs(10))
                .map_err(|e| e.to_string())
        },
    );
    (0..partitions)
        .map(|p| {
            let e = got
                .find_partition(topic, p)
                .unwrap_or_else(|| panic!("no committed entry for partition {p}"));
            match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            }
        })
        .collect()
}

/// The first `count` records of partition `partition` of `topic`, read
/// from the beginning by a fresh, non-committing consumer; panics after
/// 30 s with fewer.
pub fn read_partition(
    brokers: &str,
    topic: &str,
    partition: i32,
    count: usize,
) -> Vec<rdkafka::message::OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", super::env::unique("g_read_partition"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        assert!(
            Instant::now() < deadline,
            "read {} of {count} records of {topic}/{partition}",
            out.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            out.push(m.expect("a record").detach());
        }
    }
    out
}

/// The end offset (high watermark) of each partition `0..partitions`, from
/// ListOffsets(latest); retried until the broker answers, bounded.
pub fn end_offsets(brokers: &str, topic: &str, partitions: i32) -> Vec<i64> {
    end_offsets_at(&KafkaEndpoint::plain(brokers), topic, partitions)
}

/// [`end_offsets`] on a broker that may need TLS or SASL.
pub fn end_offsets_at(endpoint: &KafkaEndpoint, topic: &str, partitions: i32) -> Vec<i64> {
    let consumer: BaseConsumer = endpoint
        .config()
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("metadata client");
    (0..partitions)
        .map(|p| {
            wait_for(
                "the end offset of a partition",
                Duration::from_secs(30),
                Duration::from_millis(200),
                || {
                    consumer
                        .fetch_watermarks(topic, p, Duration::from_secs(5))
                        .map(|(_, high)| high)
                        .map_err(|e| format!("partition {p}: {e}"))
                },
            )
        })
        .collect()
}

/// What a [`produce_paced`] thread delivered.
#[derive(Debug, Default)]
pub struct Delivered {
    /// Indexes of the messages the broker acknowledged.
    pub acked: Vec<usize>,
    /// `(index, error)` of the messages that failed for good.
    pub errors: Vec<(usize, String)>,
}

/// A producer thread started by [`produce_paced`].
pub struct Paced {
    handle: std::thread::JoinHandle<Delivered>,
    done: Arc<AtomicBool>,
}

impl Paced {
    /// `true` once every message was handed to the broker and the flush
    /// returned.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Wait for the thread; its delivery reports.
    pub fn join(self) -> Delivered {
        self.handle.join().expect("producer thread panicked")
    }
}

/// Produce `count` messages built by `make(index)` to `topic` in a thread,
/// message `i` due at `i / count` of `over`, so that data keeps arriving
/// while a test does something to the services. Delivery failures are
/// recorded (librdkafka retries for `message.timeout.ms`, 120 s, so a broker
/// restart shorter than that loses nothing).
pub fn produce_paced(
    brokers: &str,
    topic: &str,
    count: usize,
    over: Duration,
    make: impl Fn(usize) -> Msg + Send + 'static,
) -> Paced {
    produce_paced_at(&KafkaEndpoint::plain(brokers), topic, count, over, make)
}

/// [`produce_paced`] on a broker that may need TLS or SASL.
pub fn produce_paced_at(
    endpoint: &KafkaEndpoint,
    topic: &str,
    count: usize,
    over: Duration,
    make: impl Fn(usize) -> Msg + Send + 'static,
) -> Paced {
    let done = Arc::new(AtomicBool::new(false));
    let (config, topic, flag) = (endpoint.config(), topic.to_owned(), done.clone());
    let handle = std::thread::spawn(move || {
        let producer: BaseProducer<Recorder> = config
            .clone()
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "1000000")
            .set("message.timeout.ms", "120000")
            .create_with_context(Recorder {
                log: Mutex::new(DeliveryLog::default()),
            })
            .expect("producer");
        let started = Instant::now();
        for i in 0..count {
            let due = started + over.mul_f64(i as f64 / count as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                producer.poll(wait);
            }
            let m = make(i);
            let mut rec = BaseRecord::with_opaque_to(&topic, i)
                .payload(&m.payload)
                .partition(m.partition);
            if let Some(k) = &m.key {
                rec = rec.key(k);
            }
            if let Some(ts) = m.timestamp_ms {
                rec = rec.timestamp(ts);
            }
            loop {
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        rec = r;
                        producer.poll(Duration::from_millis(5));
                    }
                }
            }
        }
        // message.timeout.ms bounds every message, so this flush ends.
        let flushed = producer.flush(Duration::from_secs(150));
        let log = std::mem::take(&mut *producer.context().log.lock().expect("log"));
        flag.store(true, Ordering::Release);
        eprintln!(
            "[support] paced: {count} messages to {topic} in {:.1?}: {} acknowledged, {} failed, flush {flushed:?}",
            started.elapsed(),
            log.ok.len(),
            log.errors.len()
        );
        Delivered {
            acked: log.ok.iter().map(|&(i, _, _)| i).collect(),
            errors: log.errors,
        }
    });
    Paced { handle, done }
}

/// Messages `range` to `topic`: message `i` on partition `i % 2`, payload
/// `{"n":i,"tenant":T}` and header `tenant: T`, neither when `tenant(i)`
/// is `None`.
pub fn produce_tenants(
    brokers: &str,
    topic: &str,
    range: std::ops::Range<usize>,
    tenant: impl Fn(usize) -> Option<&'static str>,
) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for i in range {
        let t = tenant(i);
        let payload = match t {
            Some(t) => format!(r#"{{"n":{i},"tenant":"{t}"}}"#),
            None => format!(r#"{{"n":{i}}}"#),
        };
        let mut rec = rdkafka::producer::BaseRecord::<(), _>::to(topic)
            .partition((i % 2) as i32)
            .payload(&payload);
        if let Some(t) = t {
            rec = rec.headers(rdkafka::message::OwnedHeaders::new().insert(
                rdkafka::message::Header {
                    key: "tenant",
                    value: Some(t),
                },
            ));
        }
        let mut rec = rec;
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("flush the produced messages");
}
