//! End to end: an old owner still inserting after it lost its partition (a
//! zombie) adds no duplicate (issue 19), and the intents no replay needs
//! are pruned.
//!
//! `zombie_old_owner_adds_no_duplicate`: member A (exactly-once, blocks of
//! 7 rows) takes the partition; the test-only hook `hold-before-intent`
//! (see `connectors/clickhouse/src/sink/fault.rs`) holds its first block
//! before the intent is recorded. A is frozen (SIGSTOP) past the session
//! timeout, member B (blocks of 10 rows) gets the partition in a later
//! generation, finds no intent, cuts its own blocks over the same offsets
//! and delivers everything. Then A is resumed and its block released: it
//! records its intent for offsets 0..=6, which B already inserted as part
//! of 0..=9 with another token. Without the fence A inserts it (7
//! duplicates); with it A reads B's fence and drops the block. On 26.9
//! (token) and 18.16 (block hash).
//!
//! `intents_below_the_commit_are_pruned`: two bounded runs of one group;
//! on 26.9 the second assignment deletes the first's rows (all below the
//! committed offset); on 18.16, whose state is replicated, it keeps them
//! and runs no mutation (one crashed that server); the data is exact.

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 300;

on_both_servers!(
    zombie_old_owner_adds_no_duplicate,
    intents_below_the_commit_are_pruned
);

fn produce_n(svc: &Services, topic: &str, from: usize, n: usize) {
    produce(&svc.brokers, topic, 1, n, |i| Msg {
        partition: 0,
        key: None,
        payload: format!(r#"{{"n":{},"s":"row {}"}}"#, from + i, from + i),
        timestamp_ms: None,
    });
}

fn eos_args(svc: &Services, topic: &str, group: &str, table: &str, rows: &str) -> Vec<String> {
    let mut args = run_args(svc, topic, group, table);
    args.extend(
        [
            "--delivery",
            "exactly-once",
            "--batch-rows",
            rows,
            "--flush-interval",
            "100ms",
            "--insert-workers",
            "1",
        ]
        .map(String::from),
    );
    args
}

/// (rows, distinct offsets) of `table`.
fn counts(ch: &Ch, table: &str) -> (u64, u64) {
    (
        ch.u64(&format!("SELECT count() FROM {table}")),
        ch.u64(&format!(
            "SELECT uniqExact(_partition, _offset) FROM {table}"
        )),
    )
}

fn zombie_old_owner_adds_no_duplicate(svc: Services) {
    let _timer = Timer::start("e2e_exactly_once_zombie");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (db, table) = ch.deduplicating_table(svc.is_modern(), "e2e_eos_zombie", 1000, None);
    let topic = unique("t_eos_zombie");
    let group = unique("g_eos_zombie");
    create_topic(&svc.brokers, &topic, 1);
    produce_n(&svc, &topic, 0, N);
    let held = Held::spawn(
        "eos-zombie-old",
        &eos_args(&svc, &topic, &group, &table, "7"),
        "hold-before-intent",
        1,
    );
    let pid = held.proc.pid();
    kill_pid(pid, libc::SIGSTOP);
    let mut undo = Undo::new(move || kill_pid(pid, libc::SIGCONT));
    // The new owner: joins once the frozen member's session expired, finds
    // no intent, cuts 10-row blocks and delivers everything.
    let mut args = eos_args(&svc, &topic, &group, &table, "10");
    args.push("--until-end".into());
    let new = run("eos-zombie-new", &args, Duration::from_secs(120));
    new.assert_code(0);
    assert_eq!(
        counts(&ch, &table),
        (N as u64, N as u64),
        "the new owner delivered"
    );
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        vec![Some(N as i64)]
    );
    // The zombie: resumed, its held block released.
    held.release();
    kill_pid(pid, libc::SIGCONT);
    undo.disarm();
    let deadline = Instant::now() + Duration::from_secs(30);
    let fenced = loop {
        let err = held.proc.stderr_so_far();
        if err.contains("a later owner fenced the partition") {
            break true;
        }
        if counts(&ch, &table).0 > N as u64 || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the zombie still sends (its other queued blocks) goes now.
    std::thread::sleep(Duration::from_secs(2));
    held.proc.sigterm();
    let old = held.proc.wait(Duration::from_secs(60));
    let (count, uniq) = counts(&ch, &table);
    eprintln!(
        "[e2e_exactly_once_zombie] {}: {count} rows, {uniq} distinct of {N}, {} duplicates; zombie fenced: {fenced}",
        svc.server.label(),
        count - uniq
    );
    assert!(
        old.stderr.contains("released"),
        "the held block was never released: {}",
        old.tail(20)
    );
    // Fenced blocks are not the drain's abandonment: the zombie exits clean.
    old.assert_code(0);
    assert_eq!(uniq, N as u64, "every offset present");
    assert_eq!(
        count, uniq,
        "the zombie's block landed next to the new owner's: duplicates"
    );
    assert!(
        fenced,
        "the zombie neither inserted nor was fenced: {}",
        old.tail(30)
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

fn intents_below_the_commit_are_pruned(svc: Services) {
    let _timer = Timer::start("e2e_exactly_once_prune");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (db, table) = ch.deduplicating_table(svc.is_modern(), "e2e_eos_prune", 1000, None);
    let topic = unique("t_eos_prune");
    let group = unique("g_eos_prune");
    create_topic(&svc.brokers, &topic, 1);
    let mut args = eos_args(&svc, &topic, &group, &table, "10");
    args.push("--until-end".into());
    let state = format!("{db}.spate_intents");
    let below = |end: usize| {
        ch.u64(&format!(
            "SELECT count() FROM {state} WHERE topic = '{topic}' AND (first < 0 OR last < {end})"
        ))
    };
    produce_n(&svc, &topic, 0, N);
    run("eos-prune-1", &args, Duration::from_secs(90)).assert_code(0);
    let first = below(N);
    assert!(
        first >= (N / 10) as u64,
        "the first run recorded its blocks: {first} rows"
    );
    // The second batch at offsets N..2N (`produce` wants a fresh topic).
    let more = produce_paced(&svc.brokers, &topic, N, Duration::ZERO, |i| Msg {
        partition: 0,
        key: None,
        payload: format!(r#"{{"n":{},"s":"row {}"}}"#, N + i, N + i),
        timestamp_ms: None,
    })
    .join();
    assert!(
        more.errors.is_empty(),
        "{:?}",
        &more.errors[..more.errors.len().min(3)]
    );
    assert_eq!(more.acked.len(), N);
    run("eos-prune-2", &args, Duration::from_secs(90)).assert_code(0);
    // On 26.9 the mutation deletes the first run's rows (asynchronously:
    // what is left of its blocks, fence and seal; the second run's own
    // fence and seal have first < 0 too, so they are counted apart). On
    // 18.16 the state is replicated, and a mutation of a replicated table
    // crashed that server: spate keeps the rows there (`may_prune`).
    let old_rows = || {
        let old = ch.u64(&format!(
            "SELECT count() FROM {state} WHERE topic = '{topic}' AND last < {N} AND first >= 0"
        ));
        let fences = ch.u64(&format!(
            "SELECT uniqExact(epoch) FROM {state} WHERE topic = '{topic}' AND first < 0"
        ));
        (old, fences)
    };
    let left = if svc.is_modern() {
        wait_for(
            "the first run's intents to be pruned",
            Duration::from_secs(60),
            Duration::from_millis(200),
            || match old_rows() {
                (0, 1) => Ok(0),
                (old, fences) => Err(format!(
                    "{old} intents below {N}, fences/seals of {fences} epochs"
                )),
            },
        )
    } else {
        let (old, fences) = old_rows();
        assert!(
            old >= (N / 10) as u64 && fences == 2,
            "18.16 keeps the first run's rows: {old} intents below {N}, fences/seals of {fences} epochs"
        );
        let mutations = ch.u64(&format!(
            "SELECT count() FROM system.mutations WHERE database = '{db}'"
        ));
        assert_eq!(mutations, 0, "no mutation of the replicated state on 18.16");
        old
    };
    let (count, uniq) = counts(&ch, &table);
    eprintln!(
        "[e2e_exactly_once_prune] {}: {first} state rows after the first run, {left} of them left after the second; {count} rows, {uniq} distinct",
        svc.server.label()
    );
    assert_eq!((count, uniq), (2 * N as u64, 2 * N as u64));
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        vec![Some(2 * N as i64)]
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}
