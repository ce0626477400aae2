//! End to end: topics whose producers compress with each codec librdkafka
//! knows (`compression.type` zstd, gzip, snappy, lz4) load completely through
//! the `spate` binary. One test, topic, group and table per codec; every
//! offset must arrive exactly once and the committed offsets equal the ends.
//!
//! A build of librdkafka without a codec fails here twice over: the producer
//! refuses `compression.type` at creation, and a consumer of such a topic
//! gets a fetch error for every batch, so a bounded run never ends.

use crate::support::*;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message as _};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::ClientContext;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MESSAGES: usize = 20_000;
const PARTITIONS: i32 = 2;

#[test]
fn zstd_topic_loads_completely() {
    codec_topic_loads_completely("zstd");
}

#[test]
fn gzip_topic_loads_completely() {
    codec_topic_loads_completely("gzip");
}

#[test]
fn snappy_topic_loads_completely() {
    codec_topic_loads_completely("snappy");
}

#[test]
fn lz4_topic_loads_completely() {
    codec_topic_loads_completely("lz4");
}

fn codec_topic_loads_completely(codec: &str) {
    let Some(svc) = services() else { return };
    let _timer = Timer::start("e2e_codecs");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db(&format!("e2e_codec_{codec}"));
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, s String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    let topic = unique(&format!("t_codec_{codec}"));
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let ends = produce_compressed(&svc.brokers, &topic, codec);

    let group = unique(&format!("g_codec_{codec}"));
    let mut args = run_args(&svc, &topic, &group, &table);
    args.push("--until-end".into());
    run(&format!("codec_{codec}"), &args, Duration::from_secs(180)).assert_code(0);

    for (p, &end) in ends.iter().enumerate() {
        let rows = ch.u64_rows(&format!(
            "SELECT count(), uniqExact(_offset), min(_offset), max(_offset), \
             countIf(n % {PARTITIONS} != {p}) FROM {table} WHERE _partition = {p}"
        ));
        let end = end as u64;
        assert_eq!(
            rows[0],
            vec![end, end, 0, end - 1, 0],
            "{codec}, partition {p}: [rows, distinct offsets, min, max, misplaced] \
             for offsets 0..{end} each exactly once"
        );
    }
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM {table} WHERE s != '{}'",
            filler(codec)
        )),
        0,
        "{codec}: payloads decompressed intact"
    );
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    let want: Vec<Option<i64>> = ends.iter().map(|&e| Some(e)).collect();
    assert_eq!(committed, want, "{codec}: committed = end offsets");
}

/// A compressible string, the same in every message of a codec's topic.
fn filler(codec: &str) -> String {
    format!("{codec}-compressed-").repeat(8)
}

/// Delivery reports: messages acknowledged per partition, and failures.
struct Deliveries {
    log: Mutex<(Vec<i64>, Vec<String>)>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let mut log = self.log.lock().expect("delivery log");
        match result {
            Ok(m) => log.0[m.partition() as usize] += 1,
            Err((e, _)) => log.1.push(e.to_string()),
        }
    }
}

/// Produce [`MESSAGES`] messages, `n` on partition `n % PARTITIONS`, with
/// `compression.type=codec`; returns each partition's end offset (the topic
/// is new, so the count acknowledged). Panics on any delivery failure.
fn produce_compressed(brokers: &str, topic: &str, codec: &str) -> Vec<i64> {
    let started = Instant::now();
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("compression.type", codec)
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("message.timeout.ms", "120000")
        .create_with_context(Deliveries {
            log: Mutex::new((vec![0; PARTITIONS as usize], Vec::new())),
        })
        .unwrap_or_else(|e| panic!("producer with compression.type={codec}: {e}"));
    let deadline = started + Duration::from_secs(180);
    let s = filler(codec);
    for n in 0..MESSAGES {
        let payload = format!(r#"{{"n":{n},"s":"{s}"}}"#);
        let mut rec: BaseRecord<str, str> = BaseRecord::to(topic)
            .partition(n as i32 % PARTITIONS)
            .payload(&payload);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    assert!(Instant::now() < deadline, "{codec}: producing timed out");
                    rec = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("{codec}: produce message {n}: {e}"),
            }
        }
    }
    producer
        .flush(deadline.saturating_duration_since(Instant::now()))
        .unwrap_or_else(|e| panic!("{codec}: flush: {e}"));
    let (counts, errors) = std::mem::take(&mut *producer.context().log.lock().expect("log"));
    assert!(
        errors.is_empty(),
        "{codec}: {} delivery failures, first {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(counts.iter().sum::<i64>(), MESSAGES as i64, "{codec}: acks");
    eprintln!(
        "[e2e_codecs] produced {MESSAGES} {codec} messages to {topic} in {:.1?}",
        started.elapsed()
    );
    counts
}
