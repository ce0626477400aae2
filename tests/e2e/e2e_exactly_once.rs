//! End to end: `--delivery exactly-once` through `kill -9` (issue 19).
//!
//! A producer writes slowly (so age-limited tails occur) to 4 partitions
//! while spate is killed with `kill -9` five times, each time a moment
//! after ClickHouse took a block (a random pause, then the next rise of
//! the row count: the worst instant, an insert landed and its offsets not
//! yet committed). A bounded run then loads the rest. Exactly-once: every
//! offset present exactly once, committed = ends. The negative control runs
//! the same scenario at least once and must show duplicates, so the check
//! can fail.
//!
//! On ClickHouse 26.9: a plain MergeTree with
//! `non_replicated_deduplication_window` (ReplicatedMergeTree is read-only
//! on the suite's 26.9 server), deduplicated by the token. On 18.16: a
//! ReplicatedMergeTree on the suite's ZooKeeper (`scripts/services.sh`),
//! deduplicated by block hash (18.16 has no token).

use crate::support::*;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const N: usize = 40_000;
const PARTITIONS: i32 = 4;
const KILLS: usize = 5;

on_both_servers!(exactly_once_survives_kill9_with_a_slow_producer);

fn exactly_once_survives_kill9_with_a_slow_producer(svc: Services) {
    let (dups, missing) = scenario(&svc, "exactly-once", false);
    assert_eq!(missing, 0, "exactly-once lost rows");
    assert_eq!(dups, 0, "exactly-once left duplicates");
}

// Issue 29 point 3: a static member (`group.instance.id`, as a StatefulSet
// pod runs) killed and restarted within `session.timeout.ms` rejoins with
// no rebalance and the same generation. Each incarnation must still be a
// new owner: before epochs had an incarnation, the restarted process
// skipped its predecessor's seal and re-cut its blocks (21,849 duplicates
// in 240,000 rows on 26.9).
on_both_servers!(exactly_once_survives_kill9_of_a_static_member);

fn exactly_once_survives_kill9_of_a_static_member(svc: Services) {
    let (dups, missing) = scenario(&svc, "exactly-once", true);
    assert_eq!(missing, 0, "exactly-once lost rows");
    assert_eq!(dups, 0, "exactly-once left duplicates with a static member");
}

/// Negative control: the same kills at least once duplicate rows.
#[test]
fn at_least_once_duplicates_in_the_same_scenario() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let (dups, missing) = scenario(&svc, "at-least-once", false);
    assert_eq!(missing, 0, "at-least-once lost rows");
    assert!(
        dups > 0,
        "no duplicates at least once: the scenario cannot tell the modes apart"
    );
}

/// A tiny LCG, seeded from the clock (printed, so a failure can be rerun).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Returns (duplicates, missing) after five kills and a bounded run;
/// `static_member`: every run is the same `group.instance.id`, restarted
/// at once after its kill (within the session timeout).
fn scenario(svc: &Services, delivery: &str, static_member: bool) -> (u64, u64) {
    let _timer = Timer::start("e2e_exactly_once");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (db, table) = ch.deduplicating_table(svc.is_modern(), "e2e_eos", 10000, Some(10000));
    let topic = unique("t_eos");
    let group = unique("g_eos");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    eprintln!("[e2e_exactly_once] {delivery}: seed {seed}");
    let mut rng = Rng(seed);
    let mut exercised = 0;
    let producer = produce_paced(
        &svc.brokers,
        &topic,
        N,
        Duration::from_secs(30),
        numbered(PARTITIONS),
    );
    let mut args = run_args(svc, &topic, &group, &table);
    args.extend(["--delivery", delivery, "--flush-interval", "200ms"].map(String::from));
    if static_member {
        args.extend([
            "-X".to_string(),
            format!("group.instance.id={}", unique("spate-0")),
        ]);
    }
    let mut generations = Vec::new();
    // Each run cuts its batches at another size: at least once, a replayed
    // batch then never matches the landed one it repeats, whose insert
    // token (a hash of its offsets, issue 16 point 10) would otherwise
    // deduplicate it by chance, and the negative control could see none;
    // exactly once, the new owner must cut the recorded blocks at their
    // offsets whatever its own limits say.
    let batch_rows = |k: usize| ["--batch-rows".to_string(), (500 + 61 * k).to_string()];
    for k in 0..KILLS {
        let mut run_args = args.clone();
        run_args.extend(batch_rows(k));
        let mut proc = spawn(&format!("eos-{delivery}-{k}"), &run_args);
        let pause = Duration::from_millis(1000 + rng.next() % 2000);
        std::thread::sleep(pause);
        let before = ch
            .try_u64(&format!("SELECT count() FROM {table}"))
            .unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(
                !proc.has_exited(),
                "run {k} exited: {}",
                proc.stderr_so_far()
            );
            let rows = ch
                .try_u64(&format!("SELECT count() FROM {table}"))
                .unwrap_or(0);
            if rows > before || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let killed = proc.kill9();
        generations.extend(assigned_generations(&killed.stderr));
        let landed = landed_past_commit(svc, &ch, &table, &group, &topic);
        exercised += landed;
        eprintln!(
            "[e2e_exactly_once] {delivery}: kill {k} after {pause:?}; {landed} rows landed past the commit"
        );
    }
    let delivered = producer.join();
    assert!(
        delivered.errors.is_empty(),
        "producer errors: {:?}",
        &delivered.errors[..3.min(delivered.errors.len())]
    );
    let mut last = args.clone();
    last.extend(batch_rows(KILLS));
    last.push("--until-end".into());
    let fin = run(
        &format!("eos-{delivery}-bounded"),
        &last,
        Duration::from_secs(90),
    );
    fin.assert_code(0);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let ends = end_offsets(&svc.brokers, &topic, PARTITIONS);
    let total: i64 = ends.iter().sum();
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    eprintln!(
        "[e2e_exactly_once] {delivery}: {count} rows, {uniq} distinct of {total}, {} duplicates; committed {committed:?}",
        count - uniq
    );
    assert_eq!(
        committed,
        ends.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
        "committed = ends"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
    assert!(
        exercised > 0,
        "no kill left a landed block uncommitted: nothing had to be deduplicated"
    );
    eprintln!(
        "[e2e_exactly_once] {delivery}: generations of the runs' assignments {generations:?}"
    );
    if static_member {
        // The scenario is the static member's only if a restarted process
        // was given its predecessor's generation back.
        let mut distinct = generations.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(
            distinct.len() < generations.len(),
            "no restart rejoined with its predecessor's generation: {generations:?}"
        );
    }
    (count - uniq, total as u64 - uniq)
}

/// The generations a run's "partition assigned" lines name, one per run
/// (its first assignment).
fn assigned_generations(stderr: &str) -> Option<String> {
    let line = stderr.lines().find(|l| l.contains("partition assigned"))?;
    let at = line.find("generation=")?;
    let rest = &line[at + "generation=".len()..];
    Some(rest.split_whitespace().next().unwrap_or("").to_owned())
}

/// Rows in the table at or past the committed offsets (what the next owner
/// must not insert again), once the killed process's inserts settled.
fn landed_past_commit(svc: &Services, ch: &Ch, table: &str, group: &str, topic: &str) -> u64 {
    std::thread::sleep(Duration::from_millis(300));
    let committed = committed(&svc.brokers, group, topic, PARTITIONS);
    let c = assert_committed_prefix_present(ch, table, &committed, "after kill -9");
    c.iter()
        .enumerate()
        .map(|(p, c)| {
            ch.u64(&format!(
                "SELECT count() FROM {table} WHERE _partition = {p} AND _offset >= {c}"
            ))
        })
        .sum()
}
