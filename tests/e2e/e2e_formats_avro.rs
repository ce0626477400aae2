//! End to end: `--format avro` (Confluent wire format) through the `spate`
//! binary, against the real broker, both ClickHouse servers and the test
//! schema registry ([`TestRegistry`], basic auth on).
//!
//! - 100 000 messages of two writer schema versions interleaved on one
//!   topic (v2 adds `region` with a default and removes `legacy`), every
//!   mapping spate has: primitives, ["null", T], date, timestamp-millis /
//!   -micros / local-timestamp-millis, decimal on bytes and on fixed, uuid,
//!   an enum into Enum8 and into String, arrays (also of ["null", long]),
//!   maps into Map (26.9; JSON text on 18.16) and into String, a nested
//!   optional record onto dotted columns. Every value read back equals the
//!   produced one; committed offsets equal the ends; each schema fetched at
//!   most once per driver.
//! - The registry down when a new schema id first appears: the run waits
//!   (nothing inserted or committed past the message) and completes once
//!   the registry is back.
//! - A wrong magic byte: a bad message (exit 1 naming topic, partition and
//!   offset; nothing committed past it).

#![allow(unknown_lints, clippy::manual_is_multiple_of)] // MSRV 1.86

use crate::support::*;
use spate_clickhouse::formats::{AvroWrite, SchemaType};
use spate_clickhouse::{RegistryConfig, SchemaRegistry};
use std::time::Duration;

const MESSAGES: usize = 100_000;
const PARTITIONS: i32 = 3;
const USER: &str = "reg-user";
const PASSWORD: &str = "reg-s3cret";

on_both_servers!(every_mapping_and_two_schema_versions_load_exactly);

/// The fields both versions share, then v1's `legacy` or v2's `region`.
fn schema(v2: bool) -> String {
    let last = if v2 {
        r#"{"name":"region","type":"string","default":"eu"}"#
    } else {
        r#"{"name":"legacy","type":"int"}"#
    };
    format!(
        r#"{{"type":"record","name":"Event","namespace":"spate.test","fields":[
  {{"name":"id","type":"long"}},
  {{"name":"name","type":"string"}},
  {{"name":"opt","type":["null","string"],"default":null}},
  {{"name":"score","type":"double"}},
  {{"name":"ok","type":"boolean"}},
  {{"name":"day","type":{{"type":"int","logicalType":"date"}}}},
  {{"name":"ts","type":{{"type":"long","logicalType":"timestamp-millis"}}}},
  {{"name":"ts_us","type":{{"type":"long","logicalType":"timestamp-micros"}}}},
  {{"name":"local_ts","type":{{"type":"long","logicalType":"local-timestamp-millis"}}}},
  {{"name":"amount","type":{{"type":"bytes","logicalType":"decimal","precision":12,"scale":3}}}},
  {{"name":"price","type":{{"type":"fixed","name":"Price","size":8,"logicalType":"decimal","precision":18,"scale":2}}}},
  {{"name":"uid","type":{{"type":"string","logicalType":"uuid"}}}},
  {{"name":"kind","type":{{"type":"enum","name":"Kind","symbols":["a","b","c"]}}}},
  {{"name":"kind_s","type":"Kind"}},
  {{"name":"tags","type":{{"type":"array","items":"string"}}}},
  {{"name":"nums","type":{{"type":"array","items":["null","long"]}}}},
  {{"name":"attrs","type":{{"type":"map","values":"long"}}}},
  {{"name":"attrs_json","type":{{"type":"map","values":"string"}}}},
  {{"name":"geo","type":["null",{{"type":"record","name":"Geo","fields":[
     {{"name":"lat","type":"double"}},
     {{"name":"city","type":{{"type":"record","name":"City","fields":[{{"name":"name","type":"string"}}]}}}}]}}]}},
  {last}
]}}"#
    )
}

/// The values of message `i`.
struct Event {
    id: u64,
    name: String,
    opt: Option<String>,
    score: f64,
    ok: bool,
    day: i32,
    ts_ms: i64,
    ts_us: i64,
    local_ms: i64,
    amount: i64,
    price: i64,
    uid: String,
    kind: usize,
    tags: Vec<String>,
    nums: Vec<Option<i64>>,
    geo: Option<(f64, String)>,
    v2: bool,
}

fn event(i: usize) -> Event {
    let n = i as i64;
    Event {
        id: i as u64,
        name: match i % 3 {
            0 => format!("n{i}"),
            1 => format!("quo\"te,\n\t{i} ✓"),
            _ => String::new(),
        },
        opt: (i % 4 != 0).then(|| format!("o{i}")),
        score: n as f64 * 0.25 - 1000.0,
        ok: i % 2 == 0,
        day: 19_000 + (i % 1000) as i32,
        ts_ms: 1_700_000_000_000 + n * 7,
        ts_us: 1_700_000_000_000_000 + n * 13,
        local_ms: 1_600_000_000_000 + n * 1000,
        amount: n * 37 - 1_000_000,
        price: n * 101 - 5000,
        uid: format!("{i:08x}-0000-4000-8000-{:012x}", i * 3),
        kind: i % 3,
        tags: (0..i % 4).map(|k| format!("t{i}_{k}")).collect(),
        nums: (0..i % 3)
            .map(|k| (k != 1).then_some(n * k as i64 - 3))
            .collect(),
        geo: (i % 5 != 0).then(|| (n as f64 / 1024.0, format!("c{}", i % 10))),
        v2: i % 2 == 1,
    }
}

/// Minimal big-endian two's complement, as Avro decimals are written.
fn be_twos(v: i64) -> Vec<u8> {
    let b = v.to_be_bytes();
    let fill = if v < 0 { 0xff } else { 0 };
    let mut start = 0;
    while start < 7 && b[start] == fill && (b[start + 1] & 0x80) == (fill & 0x80) {
        start += 1;
    }
    b[start..].to_vec()
}

fn encode(e: &Event, id: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(256);
    b.confluent_header(id);
    b.avro_long(e.id as i64).avro_bytes(e.name.as_bytes());
    match &e.opt {
        None => b.avro_long(0),
        Some(s) => b.avro_long(1).avro_bytes(s.as_bytes()),
    };
    b.avro_f64(e.score).avro_bool(e.ok).avro_long(e.day.into());
    b.avro_long(e.ts_ms)
        .avro_long(e.ts_us)
        .avro_long(e.local_ms);
    b.avro_bytes(&be_twos(e.amount));
    b.extend_from_slice(&e.price.to_be_bytes());
    b.avro_bytes(e.uid.as_bytes());
    b.avro_long(e.kind as i64).avro_long(e.kind as i64);
    if !e.tags.is_empty() {
        b.avro_long(e.tags.len() as i64);
        for t in &e.tags {
            b.avro_bytes(t.as_bytes());
        }
    }
    b.avro_long(0);
    if !e.nums.is_empty() {
        b.avro_long(e.nums.len() as i64);
        for x in &e.nums {
            match x {
                None => b.avro_long(0),
                Some(x) => b.avro_long(1).avro_long(*x),
            };
        }
    }
    b.avro_long(0);
    b.avro_long(2).avro_bytes(b"x").avro_long(e.id as i64);
    b.avro_bytes(b"y").avro_long(-(e.id as i64)).avro_long(0);
    b.avro_long(1).avro_bytes(b"k\"");
    b.avro_bytes(format!("v{}", e.id).as_bytes()).avro_long(0);
    match &e.geo {
        None => b.avro_long(0),
        Some((lat, city)) => b.avro_long(1).avro_f64(*lat).avro_bytes(city.as_bytes()),
    };
    if e.v2 {
        b.avro_bytes(format!("r{}", e.id % 7).as_bytes());
    } else {
        b.avro_long((e.id % 1000) as i64);
    }
    b
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02X}")).collect()
}

/// `v` (unscaled, `scale` digits) as ClickHouse prints it: both with and
/// without trailing zeros are accepted by [`same_decimal`].
fn same_decimal(text: &str, unscaled: i64, scale: u32) -> bool {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let frac = format!("{frac:0<width$}", width = scale as usize);
    let neg = int.starts_with('-');
    let digits = format!("{}{frac}", int.trim_start_matches('-'));
    digits
        .parse::<i64>()
        .is_ok_and(|d| if neg { -d } else { d } == unscaled)
}

fn table_ddl(table: &str, modern: bool) -> String {
    let (ts, ts_us, attrs) = if modern {
        ("DateTime64(3)", "DateTime64(6)", "Map(String, Int64)")
    } else {
        ("DateTime", "DateTime", "String")
    };
    format!(
        "CREATE TABLE {table} (id UInt64, name String, opt Nullable(String), score Float64, \
         ok UInt8, day Date, ts {ts}, ts_us {ts_us}, local_ts DateTime, amount Decimal(12, 3), \
         price Decimal(18, 2), uid UUID, kind Enum8('a' = 1, 'b' = 2, 'c' = 3), kind_s String, \
         tags Array(String), nums Array(Nullable(Int64)), attrs {attrs}, attrs_json String, \
         `geo.lat` Float64, `geo.city.name` String, legacy Int32, region String, \
         _partition UInt32, _offset UInt64) ENGINE = MergeTree() ORDER BY id"
    )
}

fn query(table: &str, modern: bool) -> String {
    // 18.16 cannot reinterpret floats: the values are exact multiples of
    // 1/4 and 1/1024, so scaled to integers they compare exactly too.
    let (ts, ts_us, attrs, score, lat) = if modern {
        (
            "toUnixTimestamp64Milli(ts)",
            "toUnixTimestamp64Micro(ts_us)",
            "toString(mapSort(attrs))",
            "reinterpretAsUInt64(score)",
            "reinterpretAsUInt64(`geo.lat`)",
        )
    } else {
        (
            "toUInt32(ts)",
            "toUInt32(ts_us)",
            "attrs",
            "toInt64(score * 4)",
            "toInt64(`geo.lat` * 1024)",
        )
    };
    format!(
        "SELECT id, hex(name), ifNull(opt, 'NULL!'), {score}, ok, toUInt16(day), \
         {ts}, {ts_us}, toUInt32(local_ts), toString(amount), toString(price), toString(uid), \
         toString(kind), kind_s, arrayStringConcat(tags, '|'), \
         arrayStringConcat(arrayMap(x -> ifNull(toString(x), 'null'), nums), '|'), {attrs}, \
         attrs_json, {lat}, `geo.city.name`, legacy, region \
         FROM {table} ORDER BY id"
    )
}

/// Check one row (TSV fields) against the event it came from.
fn check_row(f: &[&str], e: &Event, modern: bool) -> Result<(), String> {
    let ts = if modern {
        e.ts_ms
    } else {
        e.ts_ms.div_euclid(1000)
    };
    let ts_us = if modern {
        e.ts_us
    } else {
        e.ts_us.div_euclid(1_000_000)
    };
    let attrs = if modern {
        format!("{{'x':{},'y':{}}}", e.id, -(e.id as i64))
    } else {
        format!("{{\"x\":{},\"y\":{}}}", e.id, -(e.id as i64))
    };
    let kind = ["a", "b", "c"][e.kind];
    let nums: Vec<String> = e
        .nums
        .iter()
        .map(|x| x.map_or("null".into(), |v| v.to_string()))
        .collect();
    let (lat, city) = e.geo.clone().unwrap_or((0.0, String::new()));
    let want: Vec<String> = vec![
        e.id.to_string(),
        hex(e.name.as_bytes()),
        e.opt.clone().unwrap_or_else(|| "NULL!".into()),
        if modern {
            e.score.to_bits().to_string()
        } else {
            ((e.score * 4.0) as i64).to_string()
        },
        u8::from(e.ok).to_string(),
        e.day.to_string(),
        ts.to_string(),
        ts_us.to_string(),
        (e.local_ms / 1000).to_string(),
        String::new(),
        String::new(),
        e.uid.clone(),
        kind.into(),
        kind.into(),
        e.tags.join("|"),
        nums.join("|"),
        attrs,
        format!("{{\"k\\\"\":\"v{}\"}}", e.id),
        if modern {
            lat.to_bits().to_string()
        } else {
            ((lat * 1024.0) as i64).to_string()
        },
        city,
        if e.v2 {
            "0".into()
        } else {
            (e.id % 1000).to_string()
        },
        if e.v2 {
            format!("r{}", e.id % 7)
        } else {
            String::new()
        },
    ];
    if f.len() != want.len() {
        return Err(format!("{} fields, want {}", f.len(), want.len()));
    }
    for (k, (got, want)) in f.iter().zip(&want).enumerate() {
        let ok = match k {
            9 => same_decimal(got, e.amount, 3),
            10 => same_decimal(got, e.price, 2),
            _ => got == want,
        };
        if !ok {
            return Err(format!("field {k}: got {got:?}, want {want:?}"));
        }
    }
    Ok(())
}

fn client(reg: &TestRegistry) -> SchemaRegistry {
    SchemaRegistry::new(&RegistryConfig {
        url: reg.url(),
        user: Some(USER.into()),
        password: Some(PASSWORD.into()),
        ..RegistryConfig::default()
    })
    .expect("registry client")
}

fn avro_args(
    svc: &Services,
    reg: &TestRegistry,
    topic: &str,
    group: &str,
    table: &str,
) -> Vec<String> {
    let mut args = run_args(svc, topic, group, table);
    args.extend(
        [
            "--format",
            "avro",
            "--schema-registry",
            &reg.url(),
            "--schema-registry-user",
            USER,
            "--schema-registry-password",
            PASSWORD,
        ]
        .map(String::from),
    );
    args
}

fn every_mapping_and_two_schema_versions_load_exactly(svc: Services) {
    let _timer = Timer::start("e2e_formats_avro mappings");
    let _lock = ch_shared_lock();
    let modern = svc.is_modern();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_fmt_avro");
    let table = format!("{db}.t");
    ch.exec(&table_ddl(&table, modern));
    let reg = TestRegistry::start(Some((USER, PASSWORD)));
    let topic = unique("t_fmt_avro");
    let subject = format!("{topic}-value");
    // The producer registers through the registry's HTTP API.
    let c = client(&reg);
    let v1 = c
        .register(&subject, SchemaType::Avro, &schema(false))
        .expect("register v1");
    let v2 = c
        .register(&subject, SchemaType::Avro, &schema(true))
        .expect("register v2");
    assert_ne!(v1, v2);
    assert_eq!(
        c.register(&subject, SchemaType::Avro, &schema(false))
            .unwrap(),
        v1,
        "same schema, same id"
    );
    assert_eq!(c.version(&subject, "latest").unwrap().id, v2);
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let ends = produce_bytes(&svc.brokers, &topic, PARTITIONS, MESSAGES, |i| {
        let e = event(i);
        (
            (i % PARTITIONS as usize) as i32,
            encode(&e, if e.v2 { v2 } else { v1 }),
        )
    });

    let group = unique("g_fmt_avro");
    let mut args = avro_args(&svc, &reg, &topic, &group, &table);
    args.extend(["--until-end", "--drivers", "2"].map(String::from));
    let fin = run("fmt_avro", &args, Duration::from_secs(300));
    fin.assert_code(0);
    assert!(
        !fin.tail(200).contains(PASSWORD),
        "the registry password leaked into the log"
    );

    let got = ch.text(&query(&table, modern), "TabSeparatedRaw");
    let mut rows = 0;
    for (line, i) in got.lines().zip(0..) {
        let f: Vec<&str> = line.split('\t').collect();
        if let Err(why) = check_row(&f, &event(i), modern) {
            panic!(
                "row {i} (schema v{}): {why}\n{line}",
                1 + usize::from(event(i).v2)
            );
        }
        rows += 1;
    }
    assert_eq!(rows, MESSAGES, "every message exactly once");
    let want: Vec<Option<i64>> = ends.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        want,
        "committed = ends"
    );
    for id in [v1, v2] {
        let n = reg.fetches(id);
        assert!(
            (1..=2).contains(&n),
            "schema {id} fetched {n} times by 2 drivers"
        );
    }
}

#[test]
fn a_registry_outage_for_a_new_id_holds_the_run_until_it_is_back() {
    let Some(svc) = services() else { return };
    let _timer = Timer::start("e2e_formats_avro outage");
    let _lock = ch_shared_lock();
    let modern = svc.is_modern();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_fmt_avro_outage");
    let table = format!("{db}.t");
    ch.exec(&table_ddl(&table, modern));
    let mut reg = TestRegistry::start(Some((USER, PASSWORD)));
    let topic = unique("t_fmt_avro_outage");
    let c = client(&reg);
    let v1 = c
        .register(&format!("{topic}-value"), SchemaType::Avro, &schema(false))
        .unwrap();
    let v2 = c
        .register(&format!("{topic}-value"), SchemaType::Avro, &schema(true))
        .unwrap();
    create_topic(&svc.brokers, &topic, 1);
    const FIRST: usize = 2_000;
    produce_bytes(&svc.brokers, &topic, 1, FIRST, |i| {
        (0, encode(&event(i * 2), v1))
    });

    let group = unique("g_fmt_avro_outage");
    let mut args = avro_args(&svc, &reg, &topic, &group, &table);
    args.extend(["--commit-interval", "200ms", "--flush-interval", "200ms"].map(String::from));
    let spate = spawn("fmt_avro_outage", &args);
    let count = |ch: &Ch| ch.u64(&format!("SELECT count() FROM {table}"));
    wait_for(
        "the v1 messages inserted and committed",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let c = committed(&svc.brokers, &group, &topic, 1);
            (count(&ch) == FIRST as u64 && c == [Some(FIRST as i64)])
                .then_some(())
                .ok_or(format!("{c:?}"))
        },
    );

    reg.stop();
    const SECOND: usize = 1_000;
    // New messages under v2, an id spate has never seen: it must ask the
    // registry, which is down.
    let ends = produce_bytes_more(&svc.brokers, &topic, SECOND, |i| {
        encode(&event(FIRST * 2 + i * 2 + 1), v2)
    });
    wait_for(
        "spate to report the registry outage",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let log = spate.stderr_so_far();
            log.contains("schema registry unavailable")
                .then_some(())
                .ok_or_else(|| "no warning yet".into())
        },
    );
    // Retrying for a while: nothing of v2 is inserted or committed.
    wait_for(
        "a few retries",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let n = spate
                .stderr_so_far()
                .matches("schema registry unavailable")
                .count();
            (n >= 4).then_some(()).ok_or(format!("{n} warnings"))
        },
    );
    assert_eq!(
        count(&ch),
        FIRST as u64,
        "nothing past the unknown id inserted"
    );
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        [Some(FIRST as i64)],
        "nothing past it committed"
    );

    reg.restart();
    wait_for(
        "the v2 messages after the registry is back",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let c = committed(&svc.brokers, &group, &topic, 1);
            (count(&ch) == (FIRST + SECOND) as u64 && c == [Some(ends)])
                .then_some(())
                .ok_or(format!("{c:?}"))
        },
    );
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);
    let bad = ch.u64(&format!(
        "SELECT count() FROM {table} WHERE (region != '') != (id % 2 = 1) OR (id % 2 = 1 AND region != concat('r', toString(id % 7)))"
    ));
    assert_eq!(bad, 0, "v2 rows decoded with their schema");
}

/// Produce `n` more messages to partition 0 of a one-partition topic;
/// its new end offset.
fn produce_bytes_more(
    brokers: &str,
    topic: &str,
    n: usize,
    mut make: impl FnMut(usize) -> Vec<u8>,
) -> i64 {
    let before = end_offsets(brokers, topic, 1)[0];
    let producer: rdkafka::producer::BaseProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    use rdkafka::producer::Producer as _;
    for i in 0..n {
        let v = make(i);
        let rec: rdkafka::producer::BaseRecord<'_, (), [u8]> =
            rdkafka::producer::BaseRecord::to(topic)
                .partition(0)
                .payload(&v);
        producer.send(rec).map_err(|(e, _)| e).expect("send");
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    let end = end_offsets(brokers, topic, 1)[0];
    assert_eq!(end, before + n as i64);
    end
}

#[test]
fn a_wrong_magic_byte_is_a_bad_message() {
    let Some(svc) = services() else { return };
    let _timer = Timer::start("e2e_formats_avro magic");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_fmt_avro_magic");
    let table = format!("{db}.t");
    ch.exec(&table_ddl(&table, svc.is_modern()));
    let reg = TestRegistry::start(Some((USER, PASSWORD)));
    let topic = unique("t_fmt_avro_magic");
    let v1 = client(&reg)
        .register(&format!("{topic}-value"), SchemaType::Avro, &schema(false))
        .unwrap();
    create_topic(&svc.brokers, &topic, 1);
    const BAD_AT: usize = 500;
    produce_bytes(&svc.brokers, &topic, 1, 1_000, |i| {
        let mut b = encode(&event(i * 2), v1);
        if i == BAD_AT {
            b[0] = 1;
        }
        (0, b)
    });
    let group = unique("g_fmt_avro_magic");
    let mut args = avro_args(&svc, &reg, &topic, &group, &table);
    args.push("--until-end".into());
    let fin = run("fmt_avro_magic", &args, Duration::from_secs(120));
    fin.assert_code(1);
    let last = fin.last_line();
    for needle in [
        topic.as_str(),
        "partition 0",
        &format!("offset {BAD_AT}"),
        "magic byte 0x01",
    ] {
        assert!(last.contains(needle), "error line lacks {needle:?}: {last}");
    }
    let c = committed(&svc.brokers, &group, &topic, 1);
    assert!(
        c[0].unwrap_or(0) <= BAD_AT as i64,
        "committed past the bad message: {c:?}"
    );
    assert_committed_prefix_present(&ch, &table, &c, "magic");
}
