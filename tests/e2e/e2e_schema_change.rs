//! End to end: the table changes while spate runs (docs/rows.md), on
//! both servers.
//!
//! `schema_changes_during_a_million_messages`: table `(i UInt64, a UInt32,
//! unused String, _partition, _offset)`, 4 partitions, one `spate run`
//! (stopped with SIGTERM at the end):
//! 1. 400 000 messages `{"i", "a": i % 1000, "unused": "u"}`; while spate
//!    inserts them, `ALTER TABLE ADD COLUMN b UInt16 DEFAULT 7`; spate logs
//!    the change (within its 10 s re-read);
//! 2. 200 000 messages that also carry `"b": i % 100`; while spate inserts
//!    them, `DROP COLUMN unused` (batches that still name it are re-encoded
//!    without it when the insert is refused, or once the re-read saw it);
//! 3. 250 000 more such messages; once part of its first 50 000 is in
//!    (checked: the table does not hold them all yet), `MODIFY COLUMN a
//!    UInt64`, and the other 200 000 are produced after it. Batches encoded for UInt32 are re-encoded when the insert's
//!    type check or the server (18.16: code 368) refuses them; 26.9
//!    converts Native;
//! 4. after spate logged it, 200 000 messages with `a = 5 000 000 000 + i`.
//!
//! Then: every (partition, offset) is in the table (at least once: count at
//! least 1M, distinct = 1M), the group committed the end offsets, each phase's
//! rows carry their values (`b` from the messages after the ADD, 7 before
//! it; `a = i % 1000` before phase 4, beyond UInt32 in it), and spate logged
//! three applied changes.

use crate::support::*;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;
const PHASES: [usize; 4] = [350_000, 200_000, 250_000, 200_000];
const APPLIED: &str = "table schema changed; applied";

fn payload(i: usize) -> String {
    if i < PHASES[0] {
        format!(r#"{{"i":{i},"a":{},"unused":"u"}}"#, i % 1000)
    } else if i < PHASES[0] + PHASES[1] + PHASES[2] {
        format!(
            r#"{{"i":{i},"a":{},"unused":"u","b":{}}}"#,
            i % 1000,
            i % 100
        )
    } else {
        format!(
            r#"{{"i":{i},"a":{},"b":{}}}"#,
            5_000_000_000u64 + i as u64,
            i % 100
        )
    }
}

/// Produce messages `from..from + n` round-robin (appending: the support
/// `produce` wants a fresh topic), then check the topic holds `from + n`.
fn produce_range(svc: &Services, topic: &str, from: usize, n: usize) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &svc.brokers)
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let deadline = Instant::now() + Duration::from_secs(180);
    for i in from..from + n {
        let payload = payload(i);
        let mut rec = BaseRecord::<(), _>::to(topic)
            .partition((i % PARTITIONS as usize) as i32)
            .payload(&payload);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((e, r)) => {
                    assert!(Instant::now() < deadline, "produce message {i}: {e}");
                    producer.poll(Duration::from_millis(10));
                    rec = r;
                }
            }
        }
        if i % 1000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    let ends = end_offsets(&svc.brokers, topic, PARTITIONS);
    assert_eq!(
        ends.iter().sum::<i64>(),
        (from + n) as i64,
        "produced: {ends:?}"
    );
}

fn wait_rows(ch: &Ch, table: &str, at_least: u64, what: &str) {
    wait_for(
        what,
        Duration::from_secs(180),
        Duration::from_millis(250),
        || {
            let n = ch.try_u64(&format!("SELECT count() FROM {table}"))?;
            if n >= at_least {
                Ok(n)
            } else {
                Err(format!("{n} rows"))
            }
        },
    );
}

fn wait_applied(spate: &Running, count: usize, what: &str) {
    wait_for(
        what,
        Duration::from_secs(40),
        Duration::from_millis(200),
        || {
            let seen = spate.stderr_so_far().matches(APPLIED).count();
            if seen >= count {
                Ok(())
            } else {
                Err(format!("{seen} changes applied so far"))
            }
        },
    );
}

fn schema_changes_during_a_million_messages(svc: Services) {
    let total: usize = PHASES.iter().sum();
    let _timer = Timer::start("e2e_schema_change");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_schema"), unique("g_schema"));
    let db = ch.fresh_db("e2e_schema");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (i UInt64, a UInt32, unused String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce_range(&svc, &topic, 0, PHASES[0]);
    let spate = spawn("schema_change", &run_args(&svc, &topic, &group, &table));
    let started = Instant::now();

    wait_rows(&ch, &table, 50_000, "the first rows");
    ch.exec(&format!(
        "ALTER TABLE {table} ADD COLUMN b UInt16 DEFAULT 7"
    ));
    wait_applied(&spate, 1, "spate to apply ADD COLUMN");
    eprintln!(
        "[schema_change] ADD applied after {:.1?}",
        started.elapsed()
    );

    produce_range(&svc, &topic, PHASES[0], PHASES[1]);
    wait_rows(&ch, &table, (PHASES[0] + 50_000) as u64, "rows of phase 2");
    ch.exec(&format!("ALTER TABLE {table} DROP COLUMN unused"));
    wait_applied(&spate, 2, "spate to apply DROP COLUMN");
    eprintln!(
        "[schema_change] DROP applied after {:.1?}",
        started.elapsed()
    );

    // MODIFY while phase 3 is produced and inserted: the first slice of
    // it is produced, the ALTER comes once part of that slice is in, and
    // the rest is produced after it. (Produced in one go, the whole phase
    // could be in before a poll saw its first rows: spate inserts 250 000
    // small rows in well under a second.)
    let (p2, p3) = (PHASES[0] + PHASES[1], PHASES[0] + PHASES[1] + PHASES[2]);
    const FIRST_SLICE: usize = 50_000;
    produce_range(&svc, &topic, p2, FIRST_SLICE);
    ch.wait_rows(&table, (p2 + 20_000) as u64, Duration::from_secs(180));
    let at_alter = ch.u64(&format!("SELECT count() FROM {table}"));
    ch.exec(&format!("ALTER TABLE {table} MODIFY COLUMN a UInt64"));
    produce_range(&svc, &topic, p2 + FIRST_SLICE, PHASES[2] - FIRST_SLICE);
    assert!(
        at_alter < p3 as u64,
        "the MODIFY came after phase 3 was in ({at_alter} rows): it did not happen during the load"
    );
    wait_applied(&spate, 3, "spate to apply MODIFY COLUMN");
    eprintln!(
        "[schema_change] MODIFY at {at_alter} rows, applied after {:.1?}",
        started.elapsed()
    );

    produce_range(&svc, &topic, p3, PHASES[3]);
    let ends = end_offsets(&svc.brokers, &topic, PARTITIONS);
    assert_eq!(ends.iter().sum::<i64>(), total as i64, "produced");
    let want: Vec<Option<i64>> = ends.iter().map(|&e| Some(e)).collect();
    wait_for(
        "every message inserted and committed",
        Duration::from_secs(240),
        Duration::from_millis(500),
        || {
            let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
            if c == want {
                Ok(())
            } else {
                Err(format!("committed {c:?}, ends {ends:?}"))
            }
        },
    );
    spate.sigterm();
    let fin = spate.wait(Duration::from_secs(60));
    fin.assert_code(0);

    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    assert_eq!(uniq, total as u64, "distinct offsets (rows: {count})");
    assert!(count >= uniq);
    assert_eq!(
        ch.u64(&format!("SELECT uniqExact(i) FROM {table}")),
        total as u64,
        "every message index"
    );
    let bad = |cond: &str| ch.u64(&format!("SELECT count() FROM {table} WHERE NOT ({cond})"));
    let p1 = PHASES[0];
    assert_eq!(
        bad(&format!("i >= {p1} OR b = 7")),
        0,
        "rows before the ADD get b's DEFAULT"
    );
    assert_eq!(
        bad(&format!("i < {p1} OR b = i % 100")),
        0,
        "rows produced after the ADD carry b"
    );
    assert_eq!(
        bad(&format!("i >= {p3} OR a = i % 1000")),
        0,
        "a before the MODIFY"
    );
    assert_eq!(
        bad(&format!("i < {p3} OR a = 5000000000 + i")),
        0,
        "a after the MODIFY holds values beyond UInt32"
    );
    let changes = fin.stderr.matches(APPLIED).count();
    assert_eq!(
        changes,
        3,
        "one applied change per ALTER:\n{}",
        fin.tail(40)
    );
    ch.drop_database_of(&table);
}

on_both_servers!(schema_changes_during_a_million_messages);
