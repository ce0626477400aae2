//! End to end: after `kill -9`, at-least-once replays only what was in
//! flight (issue 19).
//!
//! 400 000 messages on 4 partitions. spate is killed with `kill -9` twice
//! mid-run (at 25% and 60% of the rows), then a bounded run (`--until-end`)
//! loads the rest. Every (partition, offset) is present once at least,
//! committed = end offsets, and the duplicates stay within what can have
//! been in flight at each kill: the per-lane pending ceiling (4 batches of
//! rows, plus one poll) on every partition, plus what the sink acknowledged
//! inside one commit-coalescing window (100 ms, measured rate x 300 ms to
//! cover the controller's poll). With commits only on the `--commit-interval`
//! tick (1 s here, main before issue 19) every kill replays up to a second of
//! work, far beyond that bound. `SPATE_TEST_SPATE_BIN` runs another build for
//! a before/after figure.

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 400_000;
const PARTITIONS: i32 = 4;
const BATCH_ROWS: u64 = 2_000;
/// spate's poll batch: a lane may overshoot its pending ceiling by one poll.
const POLL_BATCH: u64 = 1_024;
/// Commit coalescing window plus the controller's poll, with margin.
const WINDOW: Duration = Duration::from_millis(300);

#[test]
fn kill9_replays_at_most_what_was_in_flight() {
    let Some(svc) = services() else { return };
    let _timer = Timer::start("e2e_replay_bound");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_replay");
    let group = unique("g_replay");
    let table = ch.fresh_offsets_table("e2e_replay");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, numbered(PARTITIONS));
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--batch-rows",
            &BATCH_ROWS.to_string(),
            "--flush-interval",
            "100ms",
            "--commit-interval",
            "1s",
        ]
        .map(String::from),
    );
    let in_flight_ceiling = PARTITIONS as u64 * (4 * BATCH_ROWS + POLL_BATCH);
    let mut bound = 0u64;
    let mut replayed = 0u64;
    for (k, percent) in [25u64, 60].into_iter().enumerate() {
        let (at_kill, rate) = run_until_then_kill(&ch, &table, &args, k, N as u64 * percent / 100);
        // Inserts the killed process had sent may still land: let them.
        std::thread::sleep(Duration::from_secs(1));
        let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
        let c = assert_committed_prefix_present(&ch, &table, &committed, "after kill -9");
        let past: u64 = c
            .iter()
            .enumerate()
            .map(|(p, c)| {
                ch.u64(&format!(
                    "SELECT count() FROM {table} WHERE _partition = {p} AND _offset >= {c}"
                ))
            })
            .sum();
        let window_rows = (rate * WINDOW.as_secs_f64()) as u64;
        eprintln!(
            "[e2e_replay_bound] kill {k}: {at_kill} rows at the kill, {past} past the commit \
             {committed:?} (rate {rate:.0} rows/s; bound {in_flight_ceiling} in flight + {window_rows})"
        );
        replayed += past;
        bound += in_flight_ceiling + window_rows;
    }
    let mut last = args.clone();
    last.push("--until-end".into());
    let fin = run("replay-bounded", &last, Duration::from_secs(120));
    fin.assert_code(0);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let dups = count - uniq;
    eprintln!(
        "[e2e_replay_bound] {count} rows, {uniq} distinct, {dups} duplicates = {:.2}% of {N} \
         (rows past the commit at the kills: {replayed}; bound {bound})",
        dups as f64 * 100.0 / N as f64
    );
    assert_eq!(uniq, N as u64, "every (partition, offset) present");
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        ends,
        "committed offsets vs end offsets"
    );
    assert!(
        dups <= bound,
        "{dups} duplicates after two kill -9, more than could have been in flight ({bound}): \
         acknowledged rows waited for the commit tick"
    );
    ch.drop_database_of(&table);
}

/// Run spate until `threshold` rows are in `table`, then `kill -9` it.
/// Returns the rows at the kill and the insert rate of the last 500 ms.
fn run_until_then_kill(
    ch: &Ch,
    table: &str,
    args: &[String],
    k: usize,
    threshold: u64,
) -> (u64, f64) {
    let mut proc = spawn(&format!("replay-run{k}"), args);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut samples: Vec<(Instant, u64)> = Vec::new();
    let rows = loop {
        let rows = ch
            .try_u64(&format!("SELECT count() FROM {table}"))
            .unwrap_or(0);
        samples.push((Instant::now(), rows));
        if rows >= threshold {
            break rows;
        }
        assert!(
            !proc.has_exited(),
            "run {k} exited before {threshold} rows were in: {}",
            proc.stderr_so_far()
        );
        assert!(
            Instant::now() < deadline,
            "run {k}: only {rows} of {threshold} rows after 90 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    proc.kill9();
    let now = Instant::now();
    let (t0, r0) = samples
        .iter()
        .find(|(t, _)| now.duration_since(*t) <= Duration::from_millis(500))
        .copied()
        .unwrap_or((now, rows));
    let secs = now.duration_since(t0).as_secs_f64().max(0.05);
    (rows, (rows - r0) as f64 / secs)
}
