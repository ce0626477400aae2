//! End to end: `--on-error dead-letter --dead-letter-table` with the
//! dead-letter table's server frozen (SIGSTOP) for 10 s mid-run; while it
//! is, `/readyz` is 503 naming the dead-letter table (after
//! `--stall-timeout`), so the wait is never silent.
//!
//! The pipeline writes to ClickHouse 18.16; the dead-letter table lives on
//! the 26.9 server (`--dead-letter-clickhouse-url`), so that server can be
//! frozen alone. While it is frozen the letters cannot be stored: the
//! pipeline must wait (nothing past an unstored letter committed, spate
//! still running), and once it is back every partition is committed to its
//! end, with every good row once in the table and every bad message once
//! in the dead-letter table with its position, stage and column. The
//! messages are produced once the server is frozen, after spate's start.

use crate::support::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const N: usize = 3000;
const PARTITIONS: i32 = 2;

/// Every 50th message does not fit (`small` out of range), every 50th + 25
/// is rejected by the server's `throwIf`.
fn payload(i: usize) -> String {
    match i % 50 {
        7 => format!(r#"{{"a": {}, "small": 300}}"#, i + 100),
        32 => r#"{"a": 13, "small": 1}"#.to_owned(),
        _ => format!(r#"{{"a": {}, "small": 1}}"#, i + 100),
    }
}

/// What each test here starts from: the 18.16 server and its table
/// `{db}.t` (a `throwIf(a = 13)` column makes the server reject rows),
/// the dead-letter table's name on the 26.9 server (spate creates it) and
/// that server's PID file (to freeze it), a fresh topic and group.
struct Frozen {
    svc: Services,
    modern_pid: String,
    ch: Ch,
    letters_ch: Ch,
    topic: String,
    group: String,
    db: String,
    letters_db: String,
    table: String,
    letters: String,
}

impl Frozen {
    /// `None` (skipped) without the servers or the 26.9 PID file.
    fn setup(name: &str) -> Option<Frozen> {
        let svc = services_on(Server::V18)?;
        let Some(modern_pid) = svc.on(Server::V26).clickhouse_pid_file else {
            eprintln!("[{name}] no PID file for the 26.9 server; skipped");
            return None;
        };
        let ch = Ch::connect(&svc.clickhouse_url);
        let letters_ch = Ch::connect(&svc.clickhouse_modern_url);
        let db = ch.fresh_db(&format!("e2e_{name}"));
        let letters_db = letters_ch.fresh_db(&format!("e2e_{name}_letters"));
        let table = format!("{db}.t");
        ch.exec(&format!(
            "CREATE TABLE {table} (a UInt32, small UInt8, _partition UInt32, _offset UInt64, \
             chk UInt8 MATERIALIZED throwIf(a = 13)) ENGINE = MergeTree() ORDER BY (_partition, _offset)"
        ));
        let topic = unique(&format!("t_{name}"));
        create_topic(&svc.brokers, &topic, PARTITIONS);
        Some(Frozen {
            letters: format!("{letters_db}.letters"),
            group: unique(&format!("g_{name}")),
            modern_pid,
            ch,
            letters_ch,
            topic,
            db,
            letters_db,
            table,
            svc,
        })
    }

    /// The run is complete: committed to the ends, `good` distinct good
    /// rows in the table, `bad` letters stored once each.
    fn assert_all_in(&self, produced: &Produced, good: usize, bad: usize) {
        let ends: Vec<Option<i64>> = produced.counts.iter().map(|&n| Some(n)).collect();
        let committed = committed(&self.svc.brokers, &self.group, &self.topic, PARTITIONS);
        assert_eq!(committed, ends, "committed to the ends");
        let rows = (self.ch).u64(&format!("SELECT uniqExact(a) FROM {}", self.table));
        assert_eq!(rows, good as u64, "every good row in");
        let stored = self.letters_ch.u64(&format!(
            "SELECT uniqExact(partition, offset) FROM {} FINAL",
            self.letters
        ));
        assert_eq!(stored, bad as u64, "every letter stored");
    }

    fn drop_databases(&self) {
        self.ch.exec(&format!("DROP DATABASE {}", self.db));
        (self.letters_ch).exec(&format!("DROP DATABASE {}", self.letters_db));
    }
}

/// Freeze the dead-letter table's server (the 26.9 one, by its PID file)
/// once spate's start is done: its admin server on `port` answers only
/// after the dead-letter table has been created. Freezing on the table's
/// mere existence raced the CREATE's answer: frozen between the two, the
/// start itself waited. Messages produced after this call are all read
/// with the server frozen.
fn freeze_once_started(port: u16, pid_file: &str) {
    wait_for(
        "spate's start done (/healthz answers)",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || match http_get(port, "/healthz") {
            Some(r) if r.starts_with("HTTP/1.1") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    kill_pid_file(pid_file, libc::SIGSTOP);
}

/// Waiting for the frozen table is not silent: `/readyz` on `port` turns
/// 503 naming it within `within`; its answer.
fn readyz_names_the_letters(port: u16, letters: &str, within: Duration) -> String {
    wait_for(
        "/readyz 503 naming the frozen dead-letter table",
        within,
        Duration::from_millis(200),
        || match http_get(port, "/readyz") {
            Some(r)
                if r.starts_with("HTTP/1.1 503")
                    && r.contains(&format!("dead-letter table {letters}")) =>
            {
                Ok(r)
            }
            other => Err(format!("{other:?}")),
        },
    )
}

#[test]
fn dead_letter_table_server_frozen_mid_run() {
    let _lock = ch_exclusive_lock();
    let Some(f) = Frozen::setup("policy_dlt") else {
        return;
    };
    let _timer = Timer::start("e2e_policy_dead_letter_table");
    let Frozen {
        svc,
        modern_pid,
        ch,
        letters_ch,
        topic,
        group,
        table,
        letters,
        ..
    } = &f;
    let bad: Vec<usize> = (0..N).filter(|i| [7, 32].contains(&(i % 50))).collect();
    let good = N - bad.len();

    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let mut args = run_args(svc, topic, group, table);
    args.extend(
        [
            "--admin-addr",
            &admin,
            "--stall-timeout",
            "1s",
            "--on-error",
            "dead-letter",
            "--dead-letter-table",
            letters,
            "--dead-letter-clickhouse-url",
            &svc.clickhouse_modern_url,
            "--batch-rows",
            "200",
            "--insert-timeout",
            "2s",
        ]
        .map(String::from),
    );
    let mut resume = Undo::new(|| kill_pid_file(modern_pid, libc::SIGCONT));
    let spate = spawn("policy-dlt", &args);
    freeze_once_started(port, modern_pid);
    let frozen_at = Instant::now();
    let produced = produce(&svc.brokers, topic, PARTITIONS, N, |i| Msg {
        partition: ((i / 3) % PARTITIONS as usize) as i32,
        key: Some(format!("k{i}")),
        payload: payload(i),
        timestamp_ms: None,
    });
    std::thread::sleep(Duration::from_secs(5));
    let c = committed(&svc.brokers, group, topic, PARTITIONS);
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&n| Some(n)).collect();
    let mid_rows = ch.u64(&format!("SELECT count() FROM {table}"));
    assert_ne!(
        c, ends,
        "committed to the ends while no letter could be stored"
    );
    let mut spate = spate;
    assert!(
        !spate.has_exited(),
        "the run ended while the dead-letter table was frozen"
    );
    // Waiting for the table is not silent: /readyz names it.
    let ready = readyz_names_the_letters(
        port,
        letters,
        Duration::from_secs(9).saturating_sub(frozen_at.elapsed()),
    );
    eprintln!(
        "[e2e_policy_dead_letter_table] /readyz while frozen: {}",
        ready.lines().last().unwrap_or("")
    );
    // And a metric says so: the sink's stalls, as /readyz lists them.
    let metrics = http_get(port, "/metrics").unwrap_or_default();
    let stalls = metric_sum(&metrics, "spate_stalls", &[&format!("table=\"{table}\"")]);
    assert!(
        stalls >= 1.0,
        "spate_stalls{{table=\"{table}\"}} is {stalls} while /readyz names the frozen letters"
    );
    std::thread::sleep(Duration::from_secs(10).saturating_sub(frozen_at.elapsed()));
    kill_pid_file(modern_pid, libc::SIGCONT);
    resume.disarm();
    // Back: the letters are stored and everything is committed.
    wait_for(
        "every partition committed to its end once the letters' server is back",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || match committed(&svc.brokers, group, topic, PARTITIONS) {
            c if c == ends => Ok(()),
            c => Err(format!("{c:?}")),
        },
    );
    spate.sigterm();
    let fin = spate.wait(Duration::from_secs(60));
    fin.assert_code(0);

    let rows = ch.u64_rows(&format!(
        "SELECT a, count() FROM {table} GROUP BY a ORDER BY a"
    ));
    assert_eq!(rows.len(), good, "distinct good rows");
    assert!(rows.iter().all(|r| r[1] == 1), "a good row inserted twice");
    assert_eq!(committed(&svc.brokers, group, topic, PARTITIONS), ends);
    let stored = letters_ch.text(
        &format!("SELECT partition, offset, stage, ifNull(column, ''), value FROM {letters} ORDER BY partition, offset"),
        "TSV",
    );
    let mut seen = BTreeSet::new();
    for line in stored.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let at = (f[0].parse::<i32>().unwrap(), f[1].parse::<i64>().unwrap());
        let i = *bad
            .iter()
            .find(|&&i| produced.placement[i] == at)
            .unwrap_or_else(|| panic!("a letter of no bad message: {line}"));
        assert!(seen.insert(i), "message {i} stored twice");
        let (stage, column) = if i % 50 == 7 {
            ("decode", "small")
        } else {
            ("insert", "")
        };
        assert_eq!((f[2], f[3]), (stage, column), "{line}");
        assert_eq!(f[4], payload(i).replace('\\', "\\\\"), "the original value");
    }
    assert_eq!(seen.len(), bad.len(), "every bad message stored once");
    eprintln!(
        "[e2e_policy_dlt] frozen 10 s with {mid_rows} rows in and committed {c:?}; completed in {:.1?}: {good} rows, {} letters",
        fin.elapsed,
        seen.len()
    );
    f.drop_databases();
}

/// Issue 29 point 6: a row the server rejects waits for its dead letter,
/// the dead-letter table's server stops answering (SIGSTOP), and spate is
/// sent SIGTERM. Before, the pipeline reported "pipeline finished" but the
/// process kept retrying the letter on a blocking task that the runtime's
/// drop waited for: it never exited, whatever the signals. Now it exits
/// within `--shutdown-timeout` plus a small margin, nothing at or past the
/// unstored letter is committed, and a later run stores the letters and
/// loads every good row.
#[test]
fn sigterm_with_the_dead_letter_table_frozen_exits_within_the_deadline() {
    // Locked first: an outage test may have the servers down meanwhile.
    let _lock = ch_exclusive_lock();
    let Some(f) = Frozen::setup("policy_dlt_term") else {
        return;
    };
    let _timer = Timer::start("e2e_policy_dead_letter_sigterm");
    let Frozen {
        svc,
        modern_pid,
        ch,
        topic,
        group,
        table,
        letters,
        ..
    } = &f;
    // Only rows the server rejects (the insert stage's letters, stored
    // from the sink's blocking tasks).
    let bad_at = |i: usize| i % 50 == 32;
    let bad: Vec<usize> = (0..N).filter(|&i| bad_at(i)).collect();
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let mut args = run_args(svc, topic, group, table);
    args.extend(
        [
            "--on-error",
            "dead-letter",
            "--dead-letter-table",
            letters,
            "--dead-letter-clickhouse-url",
            &svc.clickhouse_modern_url,
            "--batch-rows",
            "200",
            "--insert-timeout",
            "2s",
        ]
        .map(String::from),
    );
    let mut resume = Undo::new(|| kill_pid_file(modern_pid, libc::SIGCONT));
    let mut first = args.clone();
    first.extend(
        [
            "--admin-addr",
            &admin,
            "--stall-timeout",
            "1s",
            "--shutdown-timeout",
            "5s",
        ]
        .map(String::from),
    );
    let spate = spawn("policy-dlt-sigterm", &first);
    freeze_once_started(port, modern_pid);
    let produced = produce(&svc.brokers, topic, PARTITIONS, N, |i| Msg {
        partition: ((i / 3) % PARTITIONS as usize) as i32,
        key: None,
        payload: if bad_at(i) {
            r#"{"a": 13, "small": 1}"#.to_owned()
        } else {
            format!(r#"{{"a": {}, "small": 1}}"#, i + 100)
        },
        timestamp_ms: None,
    });
    // A letter is waiting: /readyz names its table.
    readyz_names_the_letters(port, letters, Duration::from_secs(30));
    spate.sigterm();
    let signalled = Instant::now();
    // 5 s of shutdown deadline, plus the drain's grace and the runtime's.
    let fin = spate.wait(Duration::from_secs(20));
    let took = signalled.elapsed();
    eprintln!(
        "[e2e_policy_dlt_sigterm] exited {:?} {took:.1?} after SIGTERM",
        fin.status
    );
    assert!(
        took < Duration::from_secs(12),
        "exit took {took:?} after SIGTERM with --shutdown-timeout 5s"
    );
    // Nothing at or past an unstored letter is committed, and every row
    // below the commit is in.
    let c = committed(&svc.brokers, group, topic, PARTITIONS);
    for (p, c) in c.iter().enumerate() {
        let c = c.unwrap_or(0);
        let first_bad = (bad.iter())
            .map(|&i| produced.placement[i])
            .filter(|&(bp, _)| bp == p as i32)
            .map(|(_, o)| o)
            .min()
            .expect("a bad message in every partition");
        assert!(
            c <= first_bad,
            "partition {p} committed {c}, past its unstored letter at {first_bad}"
        );
        let present = ch.u64(&format!(
            "SELECT uniqExact(_offset) FROM {table} WHERE _partition = {p} AND _offset < {c}"
        ));
        assert_eq!(present, c as u64, "partition {p}: rows below the commit");
    }
    kill_pid_file(modern_pid, libc::SIGCONT);
    resume.disarm();
    let mut rest = args.clone();
    rest.push("--until-end".into());
    let fin = run("policy-dlt-sigterm-rerun", &rest, Duration::from_secs(120));
    fin.assert_code(0);
    f.assert_all_in(&produced, N - bad.len(), bad.len());
    f.drop_databases();
}

/// Issue 29 point 6, a revocation: member A's drivers wait inside their
/// polls for decode-stage dead letters whose table's server stopped
/// answering (SIGSTOP), and member B joins. Before, A's revocation waited
/// for the blocked poll without bound (the controller froze: no commits,
/// no rebalance, SIGTERM unanswered); now it ends at the revoke deadline
/// and A stops with an error naming the partition. B's own letters go to
/// a table on the 18.16 server (a member makes its dead-letter table at
/// start, and would wait for the frozen one); once A is gone, B takes
/// its partitions over, loads every good row and stores every letter
/// there, and commits to the ends.
#[test]
fn a_revocation_with_the_dead_letter_table_frozen_ends_at_its_deadline() {
    let _lock = ch_exclusive_lock();
    let Some(f) = Frozen::setup("policy_dlt_rev") else {
        return;
    };
    let _timer = Timer::start("e2e_policy_dead_letter_revoke");
    let Frozen {
        svc,
        modern_pid,
        ch,
        topic,
        group,
        table,
        letters,
        db,
        ..
    } = &f;
    // Decode-stage letters in both partitions, early: every lane of A
    // blocks on one once the letters' server is frozen.
    let n = 2000;
    let bad_at = |i: usize| (i / 2) % 40 == 10;
    let bad = (0..n).filter(|&i| bad_at(i)).count();
    let port = free_port();
    let mut args = run_args(svc, topic, group, table);
    args.extend(
        [
            "--on-error",
            "dead-letter",
            "--stall-timeout",
            "1s",
            "--shutdown-timeout",
            "5s",
            "--insert-timeout",
            "2s",
        ]
        .map(String::from),
    );
    let mut resume = Undo::new(|| kill_pid_file(modern_pid, libc::SIGCONT));
    let mut a_args = args.clone();
    a_args.extend(
        [
            "--dead-letter-table",
            letters,
            "--dead-letter-clickhouse-url",
            &svc.clickhouse_modern_url,
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ]
        .map(String::from),
    );
    let a = spawn("policy-dlt-revoke-a", &a_args);
    freeze_once_started(port, modern_pid);
    let produced = produce(&svc.brokers, topic, PARTITIONS, n, |i| Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!(
            r#"{{"a": {}, "small": {}}}"#,
            i + 100,
            if bad_at(i) { 300 } else { 1 }
        ),
        timestamp_ms: None,
    });
    // A letter is waiting inside a poll: /readyz names its table.
    readyz_names_the_letters(port, letters, Duration::from_secs(30));
    let b_letters = format!("{db}.letters");
    let mut b_args = args.clone();
    b_args.extend(["--dead-letter-table".to_owned(), b_letters.clone()]);
    let b = spawn("policy-dlt-revoke-b", &b_args);
    let joined = Instant::now();
    // The revoke deadline (a third of the 6 s session timeout) plus the
    // 5 s shutdown and its graces.
    let a = a.wait(Duration::from_secs(30));
    let took = joined.elapsed();
    eprintln!(
        "[e2e_policy_dlt_revoke] A exited {:?} {took:.1?} after B joined",
        a.status
    );
    assert!(
        a.code() == Some(1) && took < Duration::from_secs(20),
        "A did not stop within the revocation's deadline ({took:?}, {:?}); tail:\n{}",
        a.status,
        a.tail(30)
    );
    assert!(
        a.stderr
            .contains("was still running at the deadline of its revocation"),
        "A's error does not name the blocked revocation; tail:\n{}",
        a.tail(30)
    );
    kill_pid_file(modern_pid, libc::SIGCONT);
    resume.disarm();
    // B takes A's partitions over and catches up.
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    wait_for(
        "B committed every partition to its end",
        Duration::from_secs(90),
        Duration::from_millis(200),
        || match committed(&svc.brokers, group, topic, PARTITIONS) {
            c if c == ends => Ok(()),
            c => Err(format!("{c:?}")),
        },
    );
    b.sigterm();
    b.wait(Duration::from_secs(30)).assert_code(0);
    let good = ch.u64(&format!("SELECT uniqExact(a) FROM {table}"));
    assert_eq!(good, (n - bad) as u64, "every good row in");
    // A stored none (frozen); B stored them all, on the 18.16 server.
    let stored = ch.u64(&format!(
        "SELECT uniqExact(partition, offset) FROM {b_letters} FINAL"
    ));
    assert_eq!(stored, bad as u64, "every letter stored");
    f.drop_databases();
}

/// The dead-letter table's server stops answering before spate starts.
/// Before, the start's CREATE timed out and spate exited 2, a
/// configuration error (which `RestartPreventExitStatus=2` and a
/// Kubernetes operator read as "do not restart"), although nothing was
/// wrong with the configuration. Now the start waits for that server as
/// it waits for the sink's (bounded, logged each attempt); once it is
/// back the run completes: every good row in, every letter stored, ends
/// committed.
#[test]
fn a_dead_letter_table_server_frozen_at_start_is_waited_for() {
    let _lock = ch_exclusive_lock();
    let Some(f) = Frozen::setup("policy_dlt_start") else {
        return;
    };
    let _timer = Timer::start("e2e_policy_dead_letter_start");
    let Frozen {
        svc,
        modern_pid,
        topic,
        group,
        table,
        letters,
        ..
    } = &f;
    let n = 400;
    let bad_at = |i: usize| i % 50 == 7;
    let produced = produce(&svc.brokers, topic, PARTITIONS, n, |i| Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!(
            r#"{{"a": {}, "small": {}}}"#,
            i + 100,
            if bad_at(i) { 300 } else { 1 }
        ),
        timestamp_ms: None,
    });
    let bad = (0..n).filter(|&i| bad_at(i)).count();
    let mut args = run_args(svc, topic, group, table);
    args.extend(
        [
            "--until-end",
            "--on-error",
            "dead-letter",
            "--dead-letter-table",
            letters,
            "--dead-letter-clickhouse-url",
            &svc.clickhouse_modern_url,
            "--insert-timeout",
            "1s",
        ]
        .map(String::from),
    );
    kill_pid_file(modern_pid, libc::SIGSTOP);
    let mut resume = Undo::new(|| kill_pid_file(modern_pid, libc::SIGCONT));
    let mut spate = spawn("policy-dlt-start", &args);
    wait_for(
        "spate retrying the frozen dead-letter table's server at start",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || {
            let log = spate.stderr_so_far();
            if log.contains("dead-letter table's server not reachable at start; retrying") {
                Ok(())
            } else {
                Err(log.lines().last().unwrap_or("").to_owned())
            }
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !spate.has_exited(),
        "spate gave up on the dead-letter table's server at start; tail:\n{}",
        spate.stderr_so_far()
    );
    kill_pid_file(modern_pid, libc::SIGCONT);
    resume.disarm();
    let fin = spate.wait(Duration::from_secs(90));
    fin.assert_code(0);
    f.assert_all_in(&produced, n - bad, bad);
    f.drop_databases();
}
