//! End to end: ClickHouse goes away in the middle of a bounded run.
//!
//! 300 000 messages on 4 partitions (`--insert-timeout 5s`). Once rows are
//! arriving:
//! 1. ClickHouse is frozen at once (SIGSTOP via its PID file) for 6 s:
//!    in-flight inserts hang past the insert timeout and their retries hang
//!    too;
//! 2. the frozen server is killed (SIGKILL) and `services.sh ch-stop` clears
//!    its PID file; it stays down ~5 s (connections refused) and is started
//!    again (`ch-start`), same data directory.
//!
//! spate must still be running after the outage, retry, finish with exit 0,
//! and every (partition, offset) must be in the table (duplicates from
//! inserts whose outcome was unknown are allowed and printed).
//!
//! Why freeze and kill instead of a plain `ch-stop`: spate loads these rows
//! in about a second, and a graceful stop of ClickHouse 18.16 takes seconds
//! (up to ~15 s observed) during which it keeps serving the open keep-alive
//! connections, so the whole load finished through the stopping server and
//! the outage tested nothing (seen in practice). Without a PID file (e.g.
//! docker-compose services) the test falls back to a plain `ch-stop`.
//!
//! This test stops the shared server, so it holds the exclusive ClickHouse
//! lock (every other e2e test holds it shared).
//!
//! Four times:
//! - with one insert request per batch (`--insert-request 0`): spate waits
//!   the outage out, as above;
//! - with streamed requests that keep their batches (`--insert-request
//!   1s --insert-request-release=false`: several batches per
//!   request, `spate_clickhouse::sink::worker` `stream`), where the freeze
//!   lands in the middle of open requests (its log must show a request
//!   that failed, to be sent again). While ClickHouse is down, spate is
//!   killed (`kill -9`, its requests unanswered); once ClickHouse is back,
//!   every offset the group committed must be in the table (offsets never
//!   pass an acknowledged request), and a second run must finish the load
//!   with every offset in;
//! - with streamed requests whose batches are released once sent
//!   (`--insert-request-release`, the default, with `--insert-request-bytes
//!   64KiB`, far below a request's size): a
//!   request the outage fails cannot be sent again, so its partitions are
//!   read again from Kafka from their acknowledged offsets (the log must
//!   say so), and the run must end with every offset in and committed;
//! - the same, with spate killed during the outage once a released
//!   request failed, and the same check of the committed offsets as for
//!   held requests: a read again never lets offsets pass an answer.
//!
//! ClickHouse 18.16 only: the outage is driven by `scripts/services.sh`
//! (SIGSTOP, SIGKILL, ch-start on the same data), and what is tested is
//! spate's retry and acknowledgement path, which does not depend on the
//! server version; a second 300k-message outage would add a minute.

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use crate::support::*;
use std::process::Command;
use std::time::{Duration, Instant};

const N: usize = 300_000;
const PARTITIONS: i32 = 4;

/// Send `sig` to the local clickhouse-server named in its PID file; `false`
/// without one (e.g. against docker-compose).
fn signal_clickhouse(pid_file: Option<&str>, sig: libc::c_int) -> bool {
    let Some(file) = pid_file else { return false };
    let Ok(text) = std::fs::read_to_string(file) else {
        return false;
    };
    let pid: libc::pid_t = text
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{file}: not a pid: {text:?}: {e}"));
    // SAFETY: kill(2) on the pid the services script recorded for ClickHouse.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill -{sig} {pid}: {}",
        std::io::Error::last_os_error()
    );
    true
}

#[test]
fn clickhouse_outage_mid_run() {
    outage(Mode::PerBatch);
}

#[test]
fn clickhouse_outage_mid_streamed_requests() {
    outage(Mode::Streamed);
}

#[test]
fn clickhouse_outage_mid_released_requests_reads_them_again() {
    outage(Mode::Released);
}

#[test]
fn clickhouse_outage_mid_released_requests_never_commits_past_an_answer() {
    outage(Mode::ReleasedKilled);
}

/// How spate inserts during the outage.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `--insert-request 0`: one request per batch.
    PerBatch,
    /// Streamed requests that keep their batches (sent again whole).
    Streamed,
    /// Streamed requests past their byte bound (`--insert-request-bytes
    /// 64KiB --insert-request-release`): their batches are released once
    /// sent, and a failed one is read again from Kafka.
    Released,
    /// [`Released`](Mode::Released), and spate is killed during the
    /// outage once a released request failed, as in `Streamed`.
    ReleasedKilled,
}

fn outage(mode: Mode) {
    let Some(svc) = services() else { return };
    let script = svc.script();
    let _timer = Timer::start(match mode {
        Mode::PerBatch => "e2e_clickhouse_outage",
        Mode::Streamed => "e2e_clickhouse_outage_streamed",
        Mode::Released => "e2e_clickhouse_outage_released",
        Mode::ReleasedKilled => "e2e_clickhouse_outage_released_killed",
    });
    // Streamed: spate is killed during the outage, its requests
    // unanswered (see the module header).
    let streamed = matches!(mode, Mode::Streamed | Mode::ReleasedKilled);
    let released = matches!(mode, Mode::Released | Mode::ReleasedKilled);
    // The line the kill waits for: a request that failed (held, sent
    // again), or one that failed after its batches were released.
    let failed = match mode {
        Mode::ReleasedKilled => "failed after its batches were released",
        _ => "a streamed insert request failed",
    };
    let _lock = ch_exclusive_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_outage");
    let group = unique("g_outage");
    let table = ch.fresh_offsets_table("e2e_outage");

    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"outage-{i}"}}"#),
        timestamp_ms: None,
    });

    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--until-end",
            "--batch-rows",
            "10000",
            "--flush-interval",
            "200ms",
            "--insert-timeout",
            "5s",
            "--insert-request",
            if mode == Mode::PerBatch { "0" } else { "1s" },
        ]
        .map(String::from),
    );
    if mode == Mode::Streamed {
        // Held requests, whatever their size.
        args.push("--insert-request-release=false".into());
    }
    if released {
        args.extend(
            [
                "--insert-request-bytes",
                "64KiB",
                "--insert-request-release",
            ]
            .map(String::from),
        );
    }
    let mut running = Some(spawn("outage", &args));
    let exited = |r: &mut Option<Running>| r.as_mut().is_none_or(Running::has_exited);

    let before = ch.wait_rows(&table, 1, Duration::from_secs(60));
    assert!(
        !exited(&mut running) && before < N as u64,
        "spate finished before ClickHouse could be stopped ({before} rows in): the outage tests nothing"
    );
    let mut guard = Undo::new(|| {
        eprintln!("[test] resuming/restarting ClickHouse after a failure");
        let _ = Command::new(&script).arg("ch-resume").status();
        let _ = Command::new(&script).arg("ch-start").status();
    });
    let pid_file = svc.clickhouse_pid_file.as_deref();
    let frozen = signal_clickhouse(pid_file, libc::SIGSTOP);
    if frozen {
        eprintln!("[e2e_clickhouse_outage] ClickHouse frozen (SIGSTOP) with {before} rows in");
        // Longer than --insert-timeout: a fixed pause is the point here.
        std::thread::sleep(Duration::from_secs(6));
        signal_clickhouse(pid_file, libc::SIGKILL);
    }
    // Clears the PID file after the kill (or stops the server gracefully
    // when there was no PID file to freeze and kill).
    services_sh(&script, "ch-stop");
    let stopped = Instant::now();
    eprintln!("[e2e_clickhouse_outage] ClickHouse down ({before} rows were in at the start of the outage)");
    // Streamed: spate dies with its requests unanswered, once one of
    // them was seen failing (the kill raced the log line of the request
    // the SIGKILL broke, seen under load).
    let killed = streamed.then(|| {
        let by = Instant::now() + Duration::from_secs(15);
        let spate = running.as_mut().expect("spate");
        while !spate.stderr_so_far().contains(failed) && Instant::now() < by {
            std::thread::sleep(Duration::from_millis(50));
        }
        let fin = running.take().expect("spate").kill9();
        (fin, committed(&svc.brokers, &group, &topic, PARTITIONS))
    });
    // The outage itself: a fixed pause is the point of this test.
    std::thread::sleep(Duration::from_secs(5));
    let still_running = streamed || !exited(&mut running);
    services_sh(&script, "ch-start");
    Ch::wait_up(&svc.clickhouse_url, Duration::from_secs(60));
    guard.disarm();
    if let Some((fin, at_kill)) = killed {
        assert!(
            fin.stderr.contains(failed),
            "no \"{failed}\" in spate's log: the freeze did not meet an open request; stderr tail:\n{}",
            fin.tail(30)
        );
        // Nothing has inserted since the kill: the table holds what the
        // server confirmed (and perhaps requests it wrote unanswered).
        let ch = Ch::connect(&svc.clickhouse_url);
        for (p, c) in at_kill.iter().enumerate() {
            let c = c.unwrap_or(0);
            let have = ch.u64(&format!(
                "SELECT uniqExact(_offset) FROM {table} WHERE _partition = {p} AND _offset < {c}"
            ));
            assert_eq!(
                have, c as u64,
                "partition {p}: committed {c}, but only {have} of the offsets before it are in the table"
            );
        }
        eprintln!("[e2e_clickhouse_outage] committed at the kill {at_kill:?}, all in the table");
        running = Some(spawn("outage-again", &args));
    }
    eprintln!(
        "[e2e_clickhouse_outage] ClickHouse back after {:.1?} down",
        stopped.elapsed()
    );
    if !still_running {
        let fin = running.expect("spate").wait(Duration::from_secs(1));
        let rows = Ch::connect(&svc.clickhouse_url).u64(&format!("SELECT count() FROM {table}"));
        panic!(
            "spate exited ({:?}) before ClickHouse was back ({before} rows were in when the outage \
             began, {rows} now){}; stderr tail:\n{}",
            fin.status,
            if frozen { "" } else { ": the graceful stop let it finish, the outage tested nothing" },
            fin.tail(30)
        );
    }

    let fin = running.expect("spate").wait(Duration::from_secs(180));
    fin.assert_code(0);
    // A fresh client: the old one's pooled connections died with the server.
    let ch = Ch::connect(&svc.clickhouse_url);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    eprintln!(
        "[e2e_clickhouse_outage] {count} rows, {uniq} distinct offsets, {} duplicates; spate took {:.1?}",
        count - uniq,
        fin.elapsed
    );
    assert_eq!(uniq, N as u64, "every (partition, offset) present");
    match mode {
        Mode::PerBatch => assert!(!fin.stderr.contains(failed), "--insert-request 0 streamed"),
        Mode::Streamed | Mode::ReleasedKilled => {}
        Mode::Released => {
            // The outage met released requests, and their partitions
            // were read again (the rows above came back that way).
            for line in [
                "failed after its batches were released",
                "partition read again from its acknowledged watermark",
            ] {
                assert!(
                    fin.stderr.contains(line),
                    "no \"{line}\" in spate's log; tail:\n{}",
                    fin.tail(40)
                );
            }
        }
    }
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        ends,
        "committed offsets vs end offsets"
    );
    ch.drop_database_of(&table);
}
