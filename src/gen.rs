//! `spate gen`: produce generated demo events, so the demo and the
//! benchmarks need no other Kafka tooling.
//!
//! Each event is one JSON object of the `--schema` chosen (see
//! [`crate::events`]): `small`, about 200 bytes
//! (`{"ts":…,"user_id":…,"event":"…","value":…,"tags":[…],…}`), or `wide`,
//! 50 columns in about 1 KB. Events are spread round-robin over the
//! topic's partitions. With `--format avro` or `--format protobuf` the
//! same events go out in the Confluent wire format ([`avro`],
//! [`protobuf`]), the schema registered first.

#[path = "gen_avro.rs"]
pub mod avro;
#[path = "gen_protobuf.rs"]
pub mod protobuf;

use crate::cli::{GenArgs, GenEnvelope, GenFormat};
use crate::exit::Exit;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::time::{Duration, Instant};

/// How events are written.
enum Encoding {
    Json,
    Avro(avro::AvroEvents),
    Protobuf(protobuf::ProtobufEvents),
}

pub fn run(args: GenArgs) -> Result<(), Exit> {
    if args.partitions < 1 {
        return Err(Exit::usage("--partitions must be at least 1"));
    }
    if args.envelope == GenEnvelope::Debezium && args.format != GenFormat::Json {
        return Err(Exit::usage("--envelope debezium writes JSON events"));
    }
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.brokers)
        // Throughput over latency: larger batches, a short linger.
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576");
    if args.rate.is_some() {
        // A live source: events leave within a few milliseconds of being
        // made (batched that long, as a producer's default linger does).
        config.set("linger.ms", "5");
    }
    for (k, v) in &args.properties {
        config.set(k, v);
    }
    if args.rate == Some(0) {
        return Err(Exit::usage("--rate must be at least 1 event per second"));
    }
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Exit::failed(format!("runtime: {e}")))?;
    io.block_on(ensure_topic(&config, &args.topic, args.partitions))?;
    let producer: BaseProducer = config
        .create()
        .map_err(|e| Exit::usage(format!("kafka producer configuration: {e}")))?;
    let partitions = topic_partitions(&producer, &args.topic).unwrap_or(args.partitions);
    let mut encoding = encoding(&args)?;
    let started = Instant::now();
    let mut payload = String::with_capacity(2048);
    let mut event = String::with_capacity(2048);
    let mut binary = Vec::with_capacity(2048);
    for i in 0..args.count {
        payload.clear();
        match args.envelope {
            GenEnvelope::None => args.schema.write(i, &mut payload),
            GenEnvelope::Debezium => {
                event.clear();
                args.schema.write(i, &mut event);
                debezium_create(i, &event, &mut payload);
            }
        }
        let bytes = match &mut encoding {
            Encoding::Avro(a) => {
                a.encode(&payload, &mut binary).map_err(Exit::failed)?;
                &binary[..]
            }
            Encoding::Protobuf(p) => {
                p.encode(&payload, &mut binary).map_err(Exit::failed)?;
                &binary[..]
            }
            Encoding::Json => payload.as_bytes(),
        };
        let partition = (i % partitions as u64) as i32;
        loop {
            let record = BaseRecord::<(), [u8]>::to(&args.topic)
                .payload(bytes)
                .partition(partition);
            match producer.send(record) {
                Ok(()) => break,
                Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(Exit::failed(format!("producing event {i}: {e}"))),
            }
        }
        if i % 1000 == 0 {
            producer.poll(Duration::ZERO);
        }
        if let Some(rate) = args.rate {
            // Paced by the clock, not by sleeps added up: event i leaves at
            // i / rate seconds (a late start or a slow send is caught up).
            let due = started + Duration::from_secs_f64((i + 1) as f64 / f64::from(rate));
            // Waits of a millisecond or more only (librdkafka's poll counts
            // whole milliseconds: a shorter one would spin): at high rates
            // events leave in bursts of under a millisecond's worth.
            loop {
                let ahead = due.saturating_duration_since(Instant::now());
                if ahead < Duration::from_millis(1) {
                    break;
                }
                // Serves delivery reports meanwhile; may return early.
                producer.poll(ahead);
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| Exit::failed(format!("flushing produced events: {e}")))?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "spate gen: produced {} {} {:?} events to {} ({} partitions) in {:.1}s ({:.0} events/s)",
        args.count,
        args.schema.name(),
        args.format,
        args.topic,
        partitions,
        secs,
        args.count as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// A Debezium create (PostgreSQL connector, JSON envelope without
/// schemas) whose `after` image is `row`.
fn debezium_create(i: u64, row: &str, out: &mut String) {
    use std::fmt::Write;
    let ts = 1_700_000_000_000 + i;
    let _ = write!(
        out,
        r#"{{"before":null,"after":{row},"source":{{"version":"2.7.0.Final","connector":"postgresql","name":"demo","ts_ms":{ts},"snapshot":"false","db":"demo","schema":"public","table":"events","txId":{i},"lsn":{i}}},"op":"c","ts_ms":{ts},"transaction":null}}"#
    );
}

/// The converter of `--format avro|protobuf` (its schema registered), or
/// JSON.
fn encoding(args: &GenArgs) -> Result<Encoding, Exit> {
    if args.format == GenFormat::Json {
        if args.schema_registry.is_some() {
            return Err(Exit::usage(
                "--schema-registry needs --format avro or --format protobuf",
            ));
        }
        return Ok(Encoding::Json);
    }
    let name = format!("{:?}", args.format).to_lowercase();
    let url = args
        .schema_registry
        .clone()
        .ok_or_else(|| Exit::usage(format!("--format {name} needs --schema-registry URL")))?;
    let registry = crate::settings::registry_config(
        url,
        args.schema_registry_user.clone(),
        args.schema_registry_password.as_ref(),
        &args.registry_files,
    )?;
    let subject = args
        .subject
        .clone()
        .unwrap_or_else(|| format!("{}-value", args.topic));
    Ok(match args.format {
        GenFormat::Protobuf => Encoding::Protobuf(protobuf::ProtobufEvents::register(
            args.schema,
            &registry,
            &subject,
        )?),
        _ => Encoding::Avro(avro::AvroEvents::register(
            args.schema,
            &registry,
            &subject,
        )?),
    })
}

async fn ensure_topic(config: &ClientConfig, topic: &str, partitions: i32) -> Result<(), Exit> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| Exit::usage(format!("kafka admin configuration: {e}")))?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    match admin.create_topics([&new], &opts).await {
        Ok(results) => {
            for r in results {
                match r {
                    Ok(_) => tracing::info!(topic, partitions, "topic created"),
                    Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((t, e)) => return Err(Exit::failed(format!("creating topic {t}: {e}"))),
                }
            }
            Ok(())
        }
        Err(e) => Err(Exit::failed(format!("creating topic {topic}: {e}"))),
    }
}

fn topic_partitions(producer: &BaseProducer, topic: &str) -> Option<i32> {
    let md = producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .ok()?;
    let n = md.topics().first()?.partitions().len() as i32;
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command, GenArgs};
    use crate::events::Schema;
    use clap::Parser;

    fn gen_args(extra: &[&str]) -> Result<GenArgs, clap::Error> {
        let mut argv = vec!["spate", "gen", "--brokers", "b:9092", "--topic", "t"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)?.command {
            Command::Gen(g) => Ok(g),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn payload(args: &GenArgs, i: u64) -> String {
        let mut s = String::new();
        args.schema.write(i, &mut s);
        s
    }

    #[test]
    fn default_events_are_the_demos_small_json() {
        let args = gen_args(&[]).unwrap();
        assert_eq!(args.schema, Schema::Small);
        let s = payload(&args, 123_457); // 123457 % 6 == 1
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["event"], "click");
        for demo_column in ["ts", "user_id", "event", "value", "tags"] {
            assert!(v.get(demo_column).is_some(), "{demo_column} missing: {s}");
        }
        assert!((150..260).contains(&s.len()), "{} bytes: {s}", s.len());
    }

    #[test]
    fn schema_flag_selects_wide_events() {
        let args = gen_args(&["--schema", "wide"]).unwrap();
        assert_eq!(args.schema, Schema::Wide);
        let s = payload(&args, 5);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v.as_object().map(|o| o.len()), Some(50), "{s}");
        assert!(gen_args(&["--schema", "medium"]).is_err());
    }

    #[test]
    fn rate_paces_and_refuses_zero() {
        assert_eq!(gen_args(&[]).unwrap().rate, None, "as fast as it can");
        assert_eq!(gen_args(&["--rate", "20000"]).unwrap().rate, Some(20_000));
        let zero = super::run(gen_args(&["--rate", "0"]).unwrap()).unwrap_err();
        assert_eq!(zero.code(), 2, "{zero:?}");
    }
}
