//! End to end: change data capture (issue 31) against the real broker and
//! both ClickHouse servers.
//!
//! A model source table (`shop.users`: `id`, `name`, `qty`) goes through a
//! snapshot, creates, updates, deletes (each followed by Debezium's
//! tombstone) and primary-key changes (a delete of the old key, its
//! tombstone, a create of the new one); every change is produced keyed by
//! `{"id": N}` to partition `id % 3`, as Debezium keys a table's topic.
//! Per Debezium shape (in JSON: the envelope, the same inside
//! `schema`/`payload`, flattened by `ExtractNewRecordState`; the envelope
//! in Avro through the test schema registry) and for an upsert topic of
//! the same changes (JSON, and Avro keys and values):
//!
//! 1. spate loads the stream and is killed (`kill -9`) a third of the way;
//! 2. a second run with `--until-end` finishes it: exit 0, committed
//!    offsets equal the end offsets;
//! 3. the table's current state (`FINAL`; on 18.16 `FINAL WHERE _deleted =
//!    0`) equals the model's final state row for row, `_source_lsn` and
//!    `_op` of the last change included;
//! 4. the whole stream is loaded again by a new group (every change
//!    replayed over the loaded table): the state does not move.
//!
//! On 26.9 the table is `ReplacingMergeTree(ver, is_deleted)`; on 18.16
//! (no `is_deleted` before 23.2) `ReplacingMergeTree(ver)` with a
//! `_deleted UInt8` column, the documented delete handling.
//!
//! Under `--delivery exactly-once` the same stream goes into a
//! `CollapsingMergeTree` and a `VersionedCollapsingMergeTree` (cancel and
//! state rows), on both servers.
//!
//! The refusals: each table spate cannot keep current, and each flag that
//! does not go with `--envelope`, stops the start with its reason; a
//! truncate stops the run naming topic, partition and offset (or is skipped
//! under `--on-truncate skip`).

use crate::support::*;
use std::collections::BTreeMap;
use std::time::Duration;

const PARTITIONS: i32 = 3;

/// A row of the model source table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    id: u64,
    name: String,
    qty: i64,
}

impl Row {
    fn json(&self) -> String {
        format!(
            r#"{{"id":{},"name":"{}","qty":{}}}"#,
            self.id, self.name, self.qty
        )
    }
}

/// One message of the change stream.
#[derive(Clone, Debug)]
enum Event {
    Change {
        op: char,
        before: Option<Row>,
        after: Option<Row>,
        lsn: u64,
    },
    /// Debezium's null value after a delete of `id`.
    Tombstone { id: u64 },
}

impl Event {
    fn id(&self) -> u64 {
        match self {
            Event::Change { before, after, .. } => {
                after.as_ref().or(before.as_ref()).map_or(0, |r| r.id)
            }
            Event::Tombstone { id } => *id,
        }
    }
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The change stream of the model table and its final state (id → row,
/// lsn of its last change, op of its last change).
struct Stream {
    events: Vec<Event>,
    state: BTreeMap<u64, (Row, u64, char)>,
}

fn stream(steps: usize) -> Stream {
    stream_with(steps, None)
}

/// [`stream`], with a truncate of the source table before step
/// `truncate_at` (the state empties; the keys after it are new).
fn stream_with(steps: usize, truncate_at: Option<usize>) -> Stream {
    let mut seed = 31;
    let mut lsn = 1000;
    let mut state: BTreeMap<u64, (Row, u64, char)> = BTreeMap::new();
    let mut events = Vec::new();
    let mut next_id = 0;
    let mut emit = |events: &mut Vec<Event>,
                    state: &mut BTreeMap<u64, (Row, u64, char)>,
                    op: char,
                    before: Option<Row>,
                    after: Option<Row>| {
        lsn += 8;
        match (&after, &before) {
            (Some(a), _) => {
                state.insert(a.id, (a.clone(), lsn, op));
            }
            (None, Some(b)) => {
                state.remove(&b.id);
            }
            (None, None) => {
                assert_eq!(op, 't', "only a truncate has no image");
                state.clear();
            }
        }
        let id = after
            .as_ref()
            .or(before.as_ref())
            .map(|r| r.id)
            .unwrap_or(0);
        events.push(Event::Change {
            op,
            before,
            after,
            lsn,
        });
        if op == 'd' {
            events.push(Event::Tombstone { id });
        }
    };
    for _ in 0..120 {
        let row = Row {
            id: next_id,
            name: format!("user {next_id}"),
            qty: 0,
        };
        next_id += 1;
        emit(&mut events, &mut state, 'r', None, Some(row));
    }
    for step in 0..steps {
        if truncate_at == Some(step) {
            emit(&mut events, &mut state, 't', None, None);
        }
        let r = splitmix(&mut seed) % 100;
        let ids: Vec<u64> = state.keys().copied().collect();
        let pick = |seed: &mut u64| ids[(splitmix(seed) % ids.len() as u64) as usize];
        match r {
            0..=44 if !ids.is_empty() => {
                let id = pick(&mut seed);
                let before = state[&id].0.clone();
                let after = Row {
                    qty: before.qty + 1 + (step % 7) as i64,
                    name: format!("user {id} v{step}"),
                    ..before.clone()
                };
                emit(&mut events, &mut state, 'u', Some(before), Some(after));
            }
            45..=69 => {
                let row = Row {
                    id: next_id,
                    name: format!("new {next_id}"),
                    qty: step as i64,
                };
                next_id += 1;
                emit(&mut events, &mut state, 'c', None, Some(row));
            }
            70..=87 if !ids.is_empty() => {
                let id = pick(&mut seed);
                let before = state[&id].0.clone();
                emit(&mut events, &mut state, 'd', Some(before), None);
            }
            88..=99 if !ids.is_empty() => {
                // A primary-key change: Debezium's delete of the old key
                // (and its tombstone), then a create of the new one.
                let id = pick(&mut seed);
                let before = state[&id].0.clone();
                let moved = Row {
                    id: next_id,
                    ..before.clone()
                };
                next_id += 1;
                emit(&mut events, &mut state, 'd', Some(before), None);
                emit(&mut events, &mut state, 'c', None, Some(moved));
            }
            _ => {}
        }
    }
    Stream { events, state }
}

/// The three JSON shapes of a Debezium event, and an upsert topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Envelope,
    Wrapped,
    Flattened,
    Upsert,
    /// Debezium's envelope in Avro through the schema registry.
    Avro,
    /// An upsert topic with Avro keys and values.
    AvroUpsert,
}

impl Shape {
    fn upsert(self) -> bool {
        matches!(self, Shape::Upsert | Shape::AvroUpsert)
    }

    fn avro(self) -> bool {
        matches!(self, Shape::Avro | Shape::AvroUpsert)
    }
}

/// Debezium's Avro envelope for `shop.public.users`.
const AVRO_ENVELOPE: &str = r#"{"type":"record","name":"Envelope","namespace":"shop.public.users","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
     {"name":"id","type":"long"},
     {"name":"name","type":["null","string"],"default":null},
     {"name":"qty","type":["null","long"],"default":null}]}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
     {"name":"version","type":"string"},
     {"name":"connector","type":"string"},
     {"name":"ts_ms","type":"long"},
     {"name":"db","type":"string"},
     {"name":"table","type":"string"},
     {"name":"lsn","type":["null","long"],"default":null}]}},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}]}"#;
const AVRO_KEY: &str = r#"{"type":"record","name":"Key","namespace":"shop.public.users","fields":[{"name":"id","type":"long"}]}"#;
const AVRO_VALUE: &str = r#"{"type":"record","name":"Row","namespace":"shop.public.users","fields":[{"name":"name","type":"string"},{"name":"qty","type":"long"}]}"#;

/// `event` in Avro: (key, value), a `None` value being a tombstone.
fn avro(event: &Event, shape: Shape, ids: (u32, u32)) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    use spate_clickhouse::formats::AvroWrite;
    let mut key = Vec::new();
    key.confluent_header(ids.0).avro_long(event.id() as i64);
    let Event::Change {
        op,
        before,
        after,
        lsn,
    } = event
    else {
        return (Some(key), None);
    };
    let mut v = Vec::new();
    v.confluent_header(ids.1);
    if shape == Shape::AvroUpsert {
        return match (op, after) {
            ('d', _) | (_, None) => (Some(key), None),
            (_, Some(a)) => {
                v.avro_bytes(a.name.as_bytes()).avro_long(a.qty);
                (Some(key), Some(v))
            }
        };
    }
    for image in [before, after] {
        match image {
            None => {
                v.avro_long(0);
            }
            Some(r) => {
                v.avro_long(1).avro_long(r.id as i64);
                v.avro_long(1).avro_bytes(r.name.as_bytes());
                v.avro_long(1).avro_long(r.qty);
            }
        }
    }
    let ts = 1_700_000_000_000i64 + *lsn as i64;
    v.avro_bytes(b"2.7.0.Final")
        .avro_bytes(b"postgresql")
        .avro_long(ts);
    v.avro_bytes(b"shop")
        .avro_bytes(b"users")
        .avro_long(1)
        .avro_long(*lsn as i64);
    v.avro_bytes(op.to_string().as_bytes());
    v.avro_long(1).avro_long(ts);
    (Some(key), Some(v))
}

fn image(r: &Option<Row>) -> String {
    r.as_ref().map_or("null".into(), Row::json)
}

/// `event` as the message value in `shape` (`TOMBSTONE`: no value).
fn payload(event: &Event, shape: Shape) -> String {
    let Event::Change {
        op,
        before,
        after,
        lsn,
    } = event
    else {
        return TOMBSTONE.to_owned();
    };
    let ts = 1_700_000_000_000u64 + lsn;
    let envelope = || {
        format!(
            r#"{{"before":{},"after":{},"source":{{"version":"2.7.0.Final","connector":"postgresql","name":"shop","ts_ms":{ts},"snapshot":"{}","db":"shop","schema":"public","table":"users","txId":{lsn},"lsn":{lsn}}},"op":"{op}","ts_ms":{ts}}}"#,
            image(before),
            image(after),
            if *op == 'r' { "true" } else { "false" }
        )
    };
    match shape {
        Shape::Envelope => envelope(),
        Shape::Wrapped => format!(
            r#"{{"schema":{{"type":"struct","fields":[{{"type":"struct","fields":[{{"type":"int64","optional":false,"field":"id"}},{{"type":"string","optional":true,"field":"name"}},{{"type":"int64","optional":true,"field":"qty"}}],"optional":true,"name":"shop.public.users.Value","field":"before"}},{{"type":"string","optional":false,"field":"op"}}],"optional":false,"name":"shop.public.users.Envelope"}},"payload":{}}}"#,
            envelope()
        ),
        Shape::Flattened => {
            let deleted = *op == 'd';
            let row = if deleted { before } else { after };
            let row = row.as_ref().expect("an image");
            format!(
                r#"{{"id":{},"name":"{}","qty":{},"__op":"{op}","__lsn":{lsn},"__source_table":"users","__source_ts_ms":{ts},"__deleted":"{deleted}"}}"#,
                row.id, row.name, row.qty
            )
        }
        Shape::Avro | Shape::AvroUpsert => unreachable!("Avro is produced as bytes"),
        Shape::Upsert => match (op, after) {
            ('d', _) | (_, None) => TOMBSTONE.to_owned(),
            (_, Some(a)) => format!(r#"{{"name":"{}","qty":{}}}"#, a.name, a.qty),
        },
    }
}

/// The messages of `shape`: an upsert topic has one tombstone per delete,
/// not Debezium's delete event plus tombstone.
fn messages(s: &Stream, shape: Shape) -> Vec<&Event> {
    s.events
        .iter()
        .filter(|e| !shape.upsert() || !matches!(e, Event::Tombstone { .. }))
        .collect()
}

fn create_table(ch: &Ch, svc: &Services, table: &str) {
    let (deleted, engine) = match svc.is_modern() {
        true => ("is_deleted UInt8", "ReplacingMergeTree(ver, is_deleted)"),
        false => ("_deleted UInt8", "ReplacingMergeTree(ver)"),
    };
    ch.exec(&format!(
        "CREATE TABLE {table} (id UInt64, name String, qty Int64, ver UInt64, {deleted}, \
         _op String, _source_lsn UInt64, _source_table String) \
         ENGINE = {engine} ORDER BY id"
    ));
}

/// The table's current state: `(id, name, qty, _source_lsn, _op)` per row.
fn current(ch: &Ch, svc: &Services, table: &str) -> Vec<String> {
    let live = if svc.is_modern() {
        ""
    } else {
        " WHERE _deleted = 0"
    };
    ch.text(
        &format!("SELECT id, name, qty, _source_lsn, _op FROM {table} FINAL{live} ORDER BY id"),
        "TabSeparated",
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

fn expected(s: &Stream, shape: Shape) -> Vec<String> {
    s.state
        .values()
        .map(|(r, lsn, op)| match shape {
            // An upsert topic has no source block: `_source_lsn` stays 0
            // and every value is an update.
            Shape::Upsert | Shape::AvroUpsert => {
                format!("{}\t{}\t{}\t0\tu", r.id, r.name, r.qty)
            }
            _ => format!("{}\t{}\t{}\t{lsn}\t{op}", r.id, r.name, r.qty),
        })
        .collect()
}

fn cdc_args(
    svc: &Services,
    topic: &str,
    group: &str,
    table: &str,
    shape: Shape,
    registry: Option<&TestRegistry>,
) -> Vec<String> {
    let mut args = run_args(svc, topic, group, table);
    if let Some(r) = registry {
        args.extend([
            "--format".into(),
            "avro".into(),
            "--schema-registry".into(),
            r.url(),
        ]);
    }
    let envelope = if shape.upsert() { "upsert" } else { "debezium" };
    args.extend(
        [
            "--envelope",
            envelope,
            "--batch-rows",
            "200",
            "--flush-interval",
            "100ms",
        ]
        .map(String::from),
    );
    args
}

fn first_diff(have: &[String], want: &[String]) -> String {
    let at = have
        .iter()
        .zip(want)
        .position(|(h, w)| h != w)
        .unwrap_or(have.len().min(want.len()));
    format!(
        "{} rows, {} expected; first difference at row {at}: have {:?}, want {:?}",
        have.len(),
        want.len(),
        have.get(at),
        want.get(at)
    )
}

/// Produce `msgs` to `topic` in `shape`, keyed by `{"id": N}` and placed
/// in partition `id % partitions` as Debezium keys a table's topic; Avro
/// shapes through `registry`. The end offsets per partition.
fn produce_stream(
    svc: &Services,
    (topic, partitions): (&str, i32),
    msgs: &[&Event],
    shape: Shape,
    registry: Option<&TestRegistry>,
) -> Vec<i64> {
    let partition = |i: usize| (msgs[i].id() % partitions as u64) as i32;
    match registry {
        None => {
            produce(&svc.brokers, topic, partitions, msgs.len(), |i| Msg {
                partition: partition(i),
                key: Some(format!(r#"{{"id":{}}}"#, msgs[i].id())),
                payload: payload(msgs[i], shape),
                timestamp_ms: None,
            })
            .counts
        }
        Some(r) => {
            let value = if shape == Shape::Avro {
                AVRO_ENVELOPE
            } else {
                AVRO_VALUE
            };
            let ids = (
                r.register(&format!("{topic}-key"), "", AVRO_KEY),
                r.register(&format!("{topic}-value"), "", value),
            );
            produce_records(&svc.brokers, topic, partitions, msgs.len(), |i| {
                let (k, v) = avro(msgs[i], shape, ids);
                (partition(i), k, v)
            })
        }
    }
}

/// Steps 1-4 of the module docs for one shape.
fn load_and_replay(svc: &Services, shape: Shape) {
    load_and_replay_with(svc, shape, false);
}

/// [`load_and_replay`]; with `truncate`, the stream truncates the source
/// table 60% of the way, on a topic of one partition, loaded with
/// `--on-truncate delete-all` (the deletes waited for before each check).
fn load_and_replay_with(svc: &Services, shape: Shape, truncate: bool) {
    let label = format!("{shape:?}{}", if truncate { "_truncated" } else { "" }).to_lowercase();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (s, partitions) = match truncate {
        true => (stream_with(1000, Some(600)), 1),
        false => (stream(1500), PARTITIONS),
    };
    let msgs = messages(&s, shape);
    let topic = unique(&format!("t_cdc_{label}"));
    let group = unique(&format!("g_cdc_{label}"));
    let db = ch.fresh_db("e2e_cdc");
    let table = format!("{db}.users");
    create_table(&ch, svc, &table);
    create_topic(&svc.brokers, &topic, partitions);
    let registry = shape.avro().then(|| TestRegistry::start(None));
    let ends = produce_stream(svc, (&topic, partitions), &msgs, shape, registry.as_ref());
    // An upsert writes a row per message (a tombstone: the key's delete
    // marker); Debezium a row per change event, none per tombstone.
    let rows_owed = (msgs.iter())
        .filter(|e| shape.upsert() || matches!(e, Event::Change { .. }))
        .count();

    let mut args = cdc_args(svc, &topic, &group, &table, shape, registry.as_ref());
    if truncate {
        args.extend(["--on-truncate", "delete-all"].map(String::from));
    }
    let ends = killed_and_finished(svc, &label, &args, (&topic, &group), &ends);
    mutations_done(&ch, &db);
    let want = expected(&s, shape);
    let have = current(&ch, svc, &table);
    assert!(
        have == want,
        "{label} on {}: the current state is not the source's: {}",
        svc.server.label(),
        first_diff(&have, &want)
    );
    if !shape.upsert() {
        // A PostgreSQL change's version is its lsn (an upsert's, its offset).
        let live = if svc.is_modern() {
            ""
        } else {
            " WHERE _deleted = 0"
        };
        let versions = ch.text(
            &format!("SELECT id, ver FROM {table} FINAL{live} ORDER BY id"),
            "TabSeparated",
        );
        let lsns: String = (s.state.iter())
            .map(|(id, (_, lsn, _))| format!("{id}\t{lsn}\n"))
            .collect();
        assert!(
            versions == lsns,
            "{label}: the versions are not the lsns:\n{versions}"
        );
    }

    // Every change again, over the loaded table: the same versions, so the
    // current state does not move.
    let replay = unique("g_cdc_replay");
    let mut again = args.clone();
    let at = again.iter().position(|a| a == &group).expect("the group");
    again[at] = replay.clone();
    again.push("--until-end".into());
    run(
        &format!("cdc-{label}-replay"),
        &again,
        Duration::from_secs(120),
    )
    .assert_code(0);
    assert_eq!(
        committed(&svc.brokers, &replay, &topic, partitions),
        ends,
        "{label}: the replay read every change"
    );
    mutations_done(&ch, &db);
    let have = current(&ch, svc, &table);
    assert!(
        have == want,
        "{label} after a full replay: {}",
        first_diff(&have, &want)
    );
    eprintln!(
        "[e2e_cdc::{label}] {} messages, {rows_owed} rows owed, {} keys live at the end",
        msgs.len(),
        want.len()
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// Run spate with `args` and commits held back (`--commit-interval 1h`),
/// `kill -9` it once it issued the delete of the truncate at offset `at`
/// and rows of later changes are in `table`, then finish with
/// `--until-end`: every message is read again, the blocks already
/// inserted are dropped by exactly-once, and the truncate's delete is
/// issued a second time over the rows of the changes after it, which it
/// must leave alone.
fn killed_after_the_truncate_and_finished(
    svc: &Services,
    label: &str,
    args: &[String],
    table: &str,
    at: i64,
) {
    let ch = Ch::connect(&svc.clickhouse_url);
    let mut held = args.to_vec();
    held.extend(["--commit-interval", "1h"].map(String::from));
    let what = "the truncate's delete issued and later rows in";
    killed_when(label, (&held, args), what, |running| {
        let issued = (running.stderr_so_far())
            .contains("truncate: the rows of the changes before it are being deleted");
        let later = ch.u64(&format!("SELECT count() FROM {table} WHERE _offset > {at}"));
        (issued && later > 0)
            .then_some(())
            .ok_or(format!("delete issued: {issued}, {later} later rows"))
    });
}

/// Run spate with `first` until `ready` says so (within a minute), `kill
/// -9` it, then finish with `args` and `--until-end`: exit 0.
fn killed_when<T>(
    label: &str,
    (first, args): (&[String], &[String]),
    what: &str,
    mut ready: impl FnMut(&Running) -> Result<T, String>,
) {
    let mut running = spawn(&format!("cdc-{label}-killed"), first);
    wait_for(
        what,
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            assert!(
                !running.has_exited(),
                "spate exited early:\n{}",
                running.stderr_so_far()
            );
            ready(&running)
        },
    );
    running.kill9();
    let mut rest = args.to_vec();
    rest.push("--until-end".into());
    run(
        &format!("cdc-{label}-rest"),
        &rest,
        Duration::from_secs(120),
    )
    .assert_code(0);
}

/// Wait until every mutation of `db` (a truncate's delete) is done.
fn mutations_done(ch: &Ch, db: &str) {
    wait_for(
        "the truncates' deletes done",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            let left = ch.u64(&format!(
                "SELECT count() FROM system.mutations WHERE database = '{db}' AND is_done = 0"
            ));
            (left == 0)
                .then_some(())
                .ok_or(format!("{left} mutations running"))
        },
    );
}

/// Run spate with `args`, `kill -9` it once a third of the messages of
/// `topic` (whose partitions end at `ends`) is committed by `group`, then
/// finish the topic with `--until-end`: exit 0, committed offsets at the
/// ends (returned).
fn killed_and_finished(
    svc: &Services,
    label: &str,
    args: &[String],
    (topic, group): (&str, &str),
    ends: &[i64],
) -> Vec<Option<i64>> {
    // Row counts say nothing here (merges replace rows), so the kill comes
    // after a third of the messages is committed.
    let total: i64 = ends.iter().sum();
    killed_when(
        label,
        (args, args),
        "a third of the changes committed",
        |_| {
            let done: i64 = committed(&svc.brokers, group, topic, ends.len() as i32)
                .iter()
                .map(|c| c.unwrap_or(0))
                .sum();
            (done * 3 >= total)
                .then_some(done)
                .ok_or(format!("{done} of {total}"))
        },
    );
    let ends: Vec<Option<i64>> = ends.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, group, topic, ends.len() as i32),
        ends,
        "{label}: committed offsets are the end offsets"
    );
    ends
}

on_both_servers!(exactly_once_writes_each_change_once);

/// `--delivery exactly-once` into a table whose merges are stopped, so
/// every row inserted stays in its part: after a `kill -9` a third of the
/// way, no change is in the table twice (tombstones end blocks at the same
/// offsets on the replay, so replayed blocks are dropped whole) and the
/// state is the source's. On 26.9 a
/// `ReplacingMergeTree(ver, is_deleted)` with a deduplication window; on
/// 18.16 a `ReplicatedReplacingMergeTree(.., ver)` with `_deleted`.
fn exactly_once_writes_each_change_once(svc: Services) {
    let _timer = Timer::start("e2e_cdc exactly-once");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let s = stream(1500);
    let msgs = messages(&s, Shape::Envelope);
    let db = ch.fresh_db("e2e_cdc_eo");
    let table = format!("{db}.users");
    let (deleted, engine) = match svc.is_modern() {
        true => (
            "is_deleted UInt8",
            "ReplacingMergeTree(ver, is_deleted) ORDER BY id SETTINGS non_replicated_deduplication_window = 10000, parts_to_delay_insert = 100000, parts_to_throw_insert = 100000".to_owned(),
        ),
        // 18.16 drops repeated blocks by their hash: exactly-once needs
        // the Kafka coordinates in each row there.
        false => (
            "_deleted UInt8, _partition Int32, _offset UInt64",
            format!("ReplicatedReplacingMergeTree('/clickhouse/tables/{db}/users', 'r1', ver) ORDER BY id SETTINGS parts_to_delay_insert = 100000, parts_to_throw_insert = 100000"),
        ),
    };
    ch.exec(&format!(
        "CREATE TABLE {table} (id UInt64, name String, qty Int64, ver UInt64, {deleted}, \
         _op String, _source_lsn UInt64, _source_table String) ENGINE = {engine}"
    ));
    ch.exec(&format!("SYSTEM STOP MERGES {table}"));
    let topic = unique("t_cdc_eo");
    let group = unique("g_cdc_eo");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let ends = produce(&svc.brokers, &topic, PARTITIONS, msgs.len(), |i| Msg {
        partition: (msgs[i].id() % PARTITIONS as u64) as i32,
        key: Some(format!(r#"{{"id":{}}}"#, msgs[i].id())),
        payload: payload(msgs[i], Shape::Envelope),
        timestamp_ms: None,
    })
    .counts;
    let mut args = cdc_args(&svc, &topic, &group, &table, Shape::Envelope, None);
    args.extend(["--delivery", "exactly-once"].map(String::from));
    killed_and_finished(&svc, "exactly-once", &args, (&topic, &group), &ends);
    // Merges are stopped, so a change inserted twice (a replayed block
    // the server did not drop) would be two rows of one (id, ver). Not a
    // count of rows: 26.9 applies the engine within each inserted block
    // (optimize_on_insert), keeping the last change of a key per block.
    let twice = ch.u64(&format!("SELECT count() - uniqExact(id, ver) FROM {table}"));
    assert_eq!(
        twice,
        0,
        "changes inserted twice under exactly-once on {}",
        svc.server.label()
    );
    let want = expected(&s, Shape::Envelope);
    let have = current(&ch, &svc, &table);
    assert!(
        have == want,
        "exactly-once on {}: {}",
        svc.server.label(),
        first_diff(&have, &want)
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

on_both_servers!(collapsing_tables_end_in_the_source_state_exactly_once);

/// `--delivery exactly-once` into a `CollapsingMergeTree(sign)` and a
/// `VersionedCollapsingMergeTree(sign, qty)` (`qty` only grows per key in
/// the model, so it serves as the source's row version), in the three
/// Debezium shapes between them, with and without a truncate; merges
/// stopped (without a truncate), with a `kill -9` a third of the way: the `FINAL` state is the source's,
/// and `sum(sign)` is 1 for every live key and 0 for every other one (a
/// cancel or state row inserted twice, or a key's rows inserted out of
/// order, would show). On 26.9 with a deduplication window; on 18.16 the
/// `Replicated` engines with the Kafka coordinates in each row.
fn collapsing_tables_end_in_the_source_state_exactly_once(svc: Services) {
    let _timer = Timer::start("e2e_cdc collapsing");
    let _lock = ch_shared_lock();
    // Each engine, each shape, with a truncate and without.
    for (engine, shape, truncate) in [
        ("CollapsingMergeTree", Shape::Envelope, false),
        ("CollapsingMergeTree", Shape::Wrapped, true),
        ("VersionedCollapsingMergeTree", Shape::Avro, true),
    ] {
        collapsed(&svc, engine, shape, truncate);
    }
}

/// With `truncate`: the stream truncates the source 60% of the way, on a
/// topic of one partition, loaded with `--on-truncate delete-all` (which
/// deletes by `_offset`); merges run, as the truncate's delete is a
/// mutation.
fn collapsed(svc: &Services, engine: &str, shape: Shape, truncate: bool) {
    let label = format!(
        "{}_{shape:?}{}",
        engine.to_lowercase(),
        if truncate { "_truncated" } else { "" }
    )
    .to_lowercase();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (s, partitions) = match truncate {
        true => (stream_with(1500, Some(900)), 1),
        false => (stream(1500), PARTITIONS),
    };
    let msgs = messages(&s, shape);
    let db = ch.fresh_db("e2e_cdc_collapse");
    let table = format!("{db}.users");
    let args = match engine {
        "CollapsingMergeTree" => "sign",
        _ => "sign, qty",
    };
    let settings = "SETTINGS parts_to_delay_insert = 100000, parts_to_throw_insert = 100000";
    let (extra, engine_clause) = match svc.is_modern() {
        true => (
            ", _offset UInt64",
            format!("{engine}({args}) ORDER BY id {settings}, non_replicated_deduplication_window = 10000"),
        ),
        false => (
            ", _partition Int32, _offset UInt64",
            format!("Replicated{engine}('/clickhouse/tables/{db}/users', 'r1', {args}) ORDER BY id {settings}, replicated_deduplication_window = 10000"),
        ),
    };
    ch.exec(&format!(
        "CREATE TABLE {table} (id UInt64, name String, qty UInt64, sign Int8, \
         _op String, _source_lsn UInt64, _source_table String{extra}) ENGINE = {engine_clause}"
    ));
    if !truncate {
        ch.exec(&format!("SYSTEM STOP MERGES {table}"));
    }
    let topic = unique(&format!("t_cdc_{label}"));
    let group = unique(&format!("g_cdc_{label}"));
    create_topic(&svc.brokers, &topic, partitions);
    let registry = shape.avro().then(|| TestRegistry::start(None));
    let ends = produce_stream(svc, (&topic, partitions), &msgs, shape, registry.as_ref());
    let mut args = cdc_args(svc, &topic, &group, &table, shape, registry.as_ref());
    // More than one insert per shard would let a key's later rows land
    // first; spate keeps one for collapsing tables whatever this says.
    args.extend(["--delivery", "exactly-once", "--insert-workers", "4"].map(String::from));
    match truncate {
        true => {
            args.extend(["--on-truncate", "delete-all"].map(String::from));
            let at = msgs
                .iter()
                .position(|e| matches!(e, Event::Change { op: 't', .. }))
                .expect("a truncate");
            killed_after_the_truncate_and_finished(svc, &label, &args, &table, at as i64);
        }
        false => {
            killed_and_finished(svc, &label, &args, (&topic, &group), &ends);
        }
    }
    mutations_done(&ch, &db);
    let want = expected(&s, shape);
    let have: Vec<String> = ch
        .text(
            &format!("SELECT id, name, qty, _source_lsn, _op FROM {table} FINAL ORDER BY id"),
            "TabSeparated",
        )
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(
        have == want,
        "{engine} on {}: the current state is not the source's: {}",
        svc.server.label(),
        first_diff(&have, &want)
    );
    let sums = ch.text(
        &format!("SELECT id, sum(sign) FROM {table} GROUP BY id HAVING sum(sign) != 0 ORDER BY id"),
        "TabSeparated",
    );
    let live: String = s.state.keys().map(|id| format!("{id}\t1\n")).collect();
    assert!(
        sums == live,
        "{engine} on {}: sum(sign) per key is not 1 for the live keys and 0 for the rest: {}",
        svc.server.label(),
        first_diff(
            &sums.lines().map(str::to_owned).collect::<Vec<_>>(),
            &live.lines().map(str::to_owned).collect::<Vec<_>>()
        )
    );
    eprintln!(
        "[e2e_cdc::{label}] {} messages, {} rows in the table, {} keys live",
        msgs.len(),
        ch.u64(&format!("SELECT count() FROM {table}")),
        want.len()
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

on_both_servers!(debezium_json_streams_end_in_the_source_state);

fn debezium_json_streams_end_in_the_source_state(svc: Services) {
    let _timer = Timer::start("e2e_cdc debezium");
    let _lock = ch_shared_lock();
    for shape in [
        Shape::Envelope,
        Shape::Wrapped,
        Shape::Flattened,
        Shape::Avro,
    ] {
        load_and_replay(&svc, shape);
    }
}

on_both_servers!(a_truncate_deletes_the_rows_of_the_changes_before_it);

/// `--on-truncate delete-all`: the stream truncates the source table 60%
/// of the way (Debezium's `op` `t`, then creates and changes of new keys);
/// loaded with a `kill -9` a third of the way and finished, then loaded
/// again whole by a new group (every change and the truncate replayed
/// over the table), the state is the source's: only the keys after the
/// truncate. The JSON envelope, the same in its `schema`/`payload`
/// wrapper, and Avro through the registry.
fn a_truncate_deletes_the_rows_of_the_changes_before_it(svc: Services) {
    let _timer = Timer::start("e2e_cdc delete-all");
    let _lock = ch_shared_lock();
    for shape in [Shape::Envelope, Shape::Wrapped, Shape::Avro] {
        load_and_replay_with(&svc, shape, true);
    }
}

on_both_servers!(an_upsert_topic_ends_in_the_source_state);

fn an_upsert_topic_ends_in_the_source_state(svc: Services) {
    let _timer = Timer::start("e2e_cdc upsert");
    let _lock = ch_shared_lock();
    load_and_replay(&svc, Shape::Upsert);
    load_and_replay(&svc, Shape::AvroUpsert);
}

on_both_servers!(tables_that_cannot_show_the_current_state_are_refused);

fn tables_that_cannot_show_the_current_state_are_refused(svc: Services) {
    let _timer = Timer::start("e2e_cdc refusals");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_cdc_refused");
    let cols = "id UInt64, name String, ver UInt64, sign Int8";
    for (name, engine) in [
        ("log", "MergeTree ORDER BY id"),
        ("unversioned", "ReplacingMergeTree ORDER BY id"),
        ("collapsing", "CollapsingMergeTree(sign) ORDER BY id"),
        (
            "versioned",
            "VersionedCollapsingMergeTree(sign, ver) ORDER BY id",
        ),
        ("nodelete", "ReplacingMergeTree(ver) ORDER BY id"),
    ] {
        ch.exec(&format!(
            "CREATE TABLE {db}.{name} ({cols}) ENGINE = {engine}"
        ));
    }
    ch.exec(&format!("CREATE TABLE {db}.narrow (id UInt64, ver UInt32, _deleted UInt8) ENGINE = ReplacingMergeTree(ver) ORDER BY id"));
    ch.exec(&format!("CREATE TABLE {db}.versioned_default (id UInt64, name String, ver UInt64 DEFAULT 0, sign Int8) ENGINE = VersionedCollapsingMergeTree(sign, ver) ORDER BY id"));
    let debezium = ["--envelope", "debezium"];
    let url = svc.clickhouse_url.as_str();
    let two_shards = [
        "--envelope",
        "debezium",
        "--on-delete",
        "skip",
        "--shard",
        url,
        "--shard",
        url,
    ];
    let keyed_by_ver = [&two_shards[..], &["--shard-key", "ver"]].concat();
    for (table, extra, needle) in [
        (
            "log",
            &debezium[..],
            "the table's engine is MergeTree, which keeps every row",
        ),
        (
            "unversioned",
            &debezium[..],
            "ReplacingMergeTree without a version column",
        ),
        (
            "collapsing",
            &debezium[..],
            "the table's engine is CollapsingMergeTree: an update cancels the key's previous row (sign = -1) and writes the new one (+1), and a cancel row replayed after a restart would cancel once too often. Collapsing targets need --delivery exactly-once",
        ),
        (
            "versioned",
            &debezium[..],
            "the table's engine is VersionedCollapsingMergeTree: an update cancels",
        ),
        (
            "collapsing",
            &["--envelope", "upsert", "--delivery", "exactly-once"][..],
            "an upsert topic carries only the new value",
        ),
        (
            "versioned_default",
            &["--envelope", "debezium", "--delivery", "exactly-once"][..],
            "the version column `ver` has a default",
        ),
        (
            "collapsing",
            &[
                "--envelope",
                "debezium",
                "--delivery",
                "exactly-once",
                "--on-truncate",
                "delete-all",
            ][..],
            "a collapsing table needs an `_offset UInt64` column",
        ),
        ("nodelete", &debezium[..], "no way to mark a delete"),
        (
            "narrow",
            &["--envelope", "upsert"][..],
            "the version column `ver` is UInt32",
        ),
        ("nodelete", &two_shards[..], "2 shards and no --shard-key"),
        (
            "nodelete",
            &keyed_by_ver[..],
            "`ver` is not in the table's ORDER BY (id)",
        ),
        (
            "nodelete",
            &["--envelope", "debezium", "--format", "csv"][..],
            "--format csv is not supported with it",
        ),
        ("nodelete", &["--on-delete", "skip"][..], "need --envelope"),
        (
            "nodelete",
            &["--envelope", "upsert", "--on-truncate", "skip"][..],
            "an upsert topic has no truncates",
        ),
    ] {
        refused_at(&svc, &format!("{db}.{table}"), extra, needle);
    }
    // A truncate's delete compares offsets of one partition only.
    let topic = unique("t_cdc_refused");
    create_topic(&svc.brokers, &topic, 2);
    let mut args = run_args(
        &svc,
        &topic,
        &unique("g_cdc_refused"),
        &format!("{db}.nodelete"),
    );
    args.extend(
        [
            "--envelope",
            "debezium",
            "--on-delete",
            "skip",
            "--on-truncate",
            "delete-all",
        ]
        .map(String::from),
    );
    let fin = run("cdc-refused-partitions", &args, Duration::from_secs(60));
    fin.assert_code(2);
    assert!(
        fin.stderr
            .contains("--on-truncate delete-all needs one topic of one partition")
            && fin.stderr.contains("has 2 partitions"),
        "{}",
        fin.tail(10)
    );
    // `--on-delete skip` is the way into a table without a deleted column.
    let topic = unique("t_cdc_skipdelete");
    create_topic(&svc.brokers, &topic, 1);
    let delete = r#"{"before":{"id":1,"name":"a"},"after":null,"op":"d","source":{}}"#;
    let create = r#"{"before":null,"after":{"id":1,"name":"a"},"op":"c","source":{}}"#;
    produce(&svc.brokers, &topic, 1, 3, |i| Msg {
        partition: 0,
        key: Some(r#"{"id":1}"#.into()),
        payload: [create, delete, TOMBSTONE][i].into(),
        timestamp_ms: None,
    });
    let mut args = run_args(
        &svc,
        &topic,
        &unique("g_cdc_skipdelete"),
        &format!("{db}.nodelete"),
    );
    args.extend(
        [
            "--envelope",
            "debezium",
            "--on-delete",
            "skip",
            "--until-end",
        ]
        .map(String::from),
    );
    run("cdc-skip-delete", &args, Duration::from_secs(60)).assert_code(0);
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {db}.nodelete FINAL")),
        1,
        "the deleted row stays under --on-delete skip"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// A start refused with exit 2 and `needle` in its stderr (`--shard`
/// flags in `extra` replace `--clickhouse-url`).
fn refused_at(svc: &Services, table: &str, extra: &[&str], needle: &str) {
    let topic = unique("t_cdc_refused");
    create_topic(&svc.brokers, &topic, 1);
    let mut args = run_args(svc, &topic, &unique("g_cdc_refused"), table);
    if extra.contains(&"--shard") {
        let at = args
            .iter()
            .position(|a| a == "--clickhouse-url")
            .expect("--clickhouse-url");
        args.drain(at..at + 2);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let fin = run("cdc-refused", &args, Duration::from_secs(60));
    fin.assert_code(2);
    assert!(
        fin.stderr.contains(needle),
        "{table} {extra:?}: expected `{needle}` in:\n{}",
        fin.tail(10)
    );
}

on_both_servers!(a_truncate_stops_the_run_unless_skipped);

fn a_truncate_stops_the_run_unless_skipped(svc: Services) {
    let _timer = Timer::start("e2e_cdc truncate");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_cdc_truncate");
    let table = format!("{db}.users");
    create_table(&ch, &svc, &table);
    let topic = unique("t_cdc_truncate");
    create_topic(&svc.brokers, &topic, 1);
    const AT: usize = 40;
    produce(&svc.brokers, &topic, 1, 60, |i| Msg {
        partition: 0,
        key: None,
        payload: match i {
            AT => {
                r#"{"before":null,"after":null,"op":"t","source":{"table":"users","lsn":5}}"#.into()
            }
            _ => format!(
                r#"{{"before":null,"after":{{"id":{i},"name":"n","qty":1}},"op":"c","source":{{"lsn":{i}}}}}"#
            ),
        },
        timestamp_ms: None,
    });
    let group = unique("g_cdc_truncate");
    let mut args = run_args(&svc, &topic, &group, &table);
    // Even a policy that skips bad messages does not skip a truncate.
    args.extend(
        [
            "--envelope",
            "debezium",
            "--on-error",
            "skip",
            "--until-end",
        ]
        .map(String::from),
    );
    let fin = run("cdc-truncate-fail", &args, Duration::from_secs(60));
    fin.assert_code(1);
    let needle = format!("topic {topic} partition 0 offset {AT}");
    assert!(
        fin.stderr.contains("--on-truncate skip") && fin.stderr.contains(&needle),
        "expected the truncate at {needle} named:\n{}",
        fin.tail(10)
    );
    let at_fail = committed(&svc.brokers, &group, &topic, 1)[0];
    assert!(
        at_fail.unwrap_or(0) <= AT as i64,
        "committed {at_fail:?}, past the truncate at {AT}"
    );

    args.extend(["--on-truncate", "skip"].map(String::from));
    run("cdc-truncate-skip", &args, Duration::from_secs(60)).assert_code(0);
    assert_eq!(committed(&svc.brokers, &group, &topic, 1), vec![Some(60)]);
    let live = if svc.is_modern() {
        ""
    } else {
        " WHERE _deleted = 0"
    };
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {table} FINAL{live}")),
        59,
        "every create, the truncate skipped"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// `spate check --envelope debezium`: the table's plan, each operation of
/// the sample and the row it would write; a truncate is what `run` would
/// stop at (exit 1, named).
#[test]
fn check_reports_each_operation_and_its_row() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_cdc check");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_cdc_check");
    let table = format!("{db}.users");
    create_table(&ch, &svc, &table);
    let topic = unique("t_cdc_check");
    create_topic(&svc.brokers, &topic, 1);
    let s = stream(10);
    let msgs = messages(&s, Shape::Envelope);
    produce(&svc.brokers, &topic, 1, msgs.len(), |i| Msg {
        partition: 0,
        key: None,
        payload: payload(msgs[i], Shape::Envelope),
        timestamp_ms: None,
    });
    let mut args = run_args(&svc, &topic, &unique("g_cdc_check"), &table);
    args[0] = "check".into();
    args.extend(["--envelope", "debezium", "--samples", "1000"].map(String::from));
    let fin = run("cdc-check", &args, Duration::from_secs(90));
    let stdout =
        std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).expect("check's stdout");
    fin.assert_code(0);
    let count = |op: char| {
        msgs.iter()
            .filter(|e| matches!(e, Event::Change { op: o, .. } if *o == op))
            .count()
    };
    assert!(
        stdout.contains("OK: debezium changes into")
            && stdout.contains("`ver` = its log position (PostgreSQL lsn, MySQL binlog) or Kafka offset, deletes marked by `is_deleted` = 1"),
        "{stdout}"
    );
    for (label, n) in [
        ("r (snapshot read)", count('r')),
        ("c (create)", count('c')),
        ("u (update)", count('u')),
        ("d (delete)", count('d')),
        ("tombstone", count('d')),
    ] {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no line for {label}:\n{stdout}"));
        assert!(
            line.split_whitespace().any(|w| w == n.to_string()),
            "{label}: {n} expected in `{line}`"
        );
    }
    // The first snapshot read's row, exactly.
    assert!(
        stdout.contains(r#"{"id":0,"name":"user 0","qty":0,"ver":1008,"is_deleted":0,"_op":"r","_source_table":"users","_source_lsn":1008}"#),
        "{stdout}"
    );

    // A truncate: the check fails as run would.
    produce_more(
        &svc.brokers,
        &topic,
        r#"{"before":null,"after":null,"op":"t","source":{}}"#,
    );
    let fin = run("cdc-check-truncate", &args, Duration::from_secs(90));
    fin.assert_code(1);
    let stdout =
        std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).expect("check's stdout");
    assert!(
        stdout.contains("t (truncate)") && stdout.contains("--on-truncate skip"),
        "{stdout}"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// One more message at the end of partition 0 of `topic`.
fn produce_more(brokers: &str, topic: &str, payload: &str) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    producer
        .send(
            BaseRecord::<(), str>::to(topic)
                .partition(0)
                .payload(payload),
        )
        .expect("send");
    producer
        .flush(Duration::from_secs(30))
        .expect("flush the truncate");
}

/// Debezium changes of two source tables on one topic (as a topic-routing
/// transform merges them), each into its own table by
/// `{field:/source/table}`: each table ends in its source's state. A
/// tombstone names no table, and owes none: none is a bad message (the
/// dead-letter topic stays empty), and the run commits to the end. On one
/// server: the routing is spate's own (the chain's handling of a change
/// stream is tested on both above).
#[test]
fn changes_of_two_tables_on_one_topic_go_to_their_own_tables() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_cdc routed by source table");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_cdc_routed");
    let s = stream(600);
    let msgs = messages(&s, Shape::Envelope);
    let tombstones = (msgs.iter())
        .filter(|e| matches!(e, Event::Tombstone { .. }))
        .count();
    assert!(tombstones > 0, "the stream has deletes");
    for t in ["users", "buyers"] {
        create_table(&ch, &svc, &format!("{db}.{t}"));
    }
    let topic = unique("t_cdc_routed");
    let dlq = format!("{topic}_dlq");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    create_topic(&svc.brokers, &dlq, 1);
    // The stream as `users`, then again as `buyers`: each key's changes
    // in order within each table.
    let n = msgs.len();
    let ends = produce(&svc.brokers, &topic, PARTITIONS, 2 * n, |i| {
        let e = msgs[i % n];
        let mut value = payload(e, Shape::Envelope);
        if i >= n {
            value = value.replace(r#""table":"users""#, r#""table":"buyers""#);
        }
        Msg {
            partition: (e.id() % PARTITIONS as u64) as i32,
            key: Some(format!(r#"{{"id":{}}}"#, e.id())),
            payload: value,
            timestamp_ms: None,
        }
    })
    .counts;
    let group = unique("g_cdc_routed");
    let table = format!("{db}.{{field:/source/table}}");
    let mut args = cdc_args(&svc, &topic, &group, &table, Shape::Envelope, None);
    args.extend(
        [
            "--allow-tables",
            &format!(r"{db}\.(users|buyers)"),
            "--on-error",
            "dead-letter",
            "--dead-letter-topic",
            &dlq,
            "--until-end",
        ]
        .map(String::from),
    );
    run("cdc-routed", &args, Duration::from_secs(120)).assert_code(0);
    let want = expected(&s, Shape::Envelope);
    for t in ["users", "buyers"] {
        let have = current(&ch, &svc, &format!("{db}.{t}"));
        assert!(have == want, "{t}: {}", first_diff(&have, &want));
    }
    assert_eq!(
        end_offsets(&svc.brokers, &dlq, 1),
        vec![0],
        "no tombstone ({tombstones} per table) is a bad message"
    );
    let want: Vec<Option<i64>> = ends.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed(&svc.brokers, &group, &topic, PARTITIONS), want);
}
