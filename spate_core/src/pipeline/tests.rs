//! Runtime tests with in-memory fakes: completion, the shutdown order,
//! the drain deadline, bad input, panics, backpressure and revocation.

use super::fakes::{line_chains, recording_sink, FakeSource, RecordingSink};
use super::*;
use crate::record::Watermark;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub(super) fn io() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub(super) fn data(partitions: usize, rows: usize) -> Vec<Vec<Vec<u8>>> {
    (0..partitions)
        .map(|p| (0..rows).map(|o| format!("{p}-{o}").into_bytes()).collect())
        .collect()
}

pub(super) fn options(io: &tokio::runtime::Runtime) -> RuntimeOptions {
    let mut o = RuntimeOptions::new(io.handle().clone());
    o.drivers = 2;
    o.pin_drivers = false;
    o.poll_batch = 64;
    o.poll_timeout = Duration::from_millis(5);
    o.commit_interval = Duration::from_millis(20);
    o.shutdown_timeout = Duration::from_secs(5);
    o
}

pub(super) fn sink_options(rows: u64) -> SinkOptions {
    SinkOptions {
        limits: crate::sink::BatchLimits {
            rows,
            bytes: 1 << 20,
            interval: Duration::from_millis(20),
            jitter: 0.1,
            sizing: crate::sink::RowSizing::Fixed,
        },
    }
}

pub(super) fn start(
    source: FakeSource,
    sink: RecordingSink,
    opts: RuntimeOptions,
    rows: u64,
) -> PipelineRuntime {
    let pipeline = Pipeline::new(
        source,
        line_chains(),
        sink.runtime,
        sink.acks,
        sink_options(rows),
    )
    .unwrap();
    PipelineRuntime::start(pipeline, opts).unwrap()
}

/// Rows recorded by the sink, as offsets per partition.
pub(super) fn offsets(rows: &[String]) -> HashMap<i32, Vec<i64>> {
    let mut out: HashMap<i32, Vec<i64>> = HashMap::new();
    for r in rows {
        let (p, o) = r.split_once('-').unwrap();
        out.entry(p.parse().unwrap())
            .or_default()
            .push(o.parse().unwrap());
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

pub(super) fn never() -> impl std::future::Future<Output = ()> + Send + 'static {
    std::future::pending()
}

/// A shutdown requested at once: for tests that waited for their
/// condition before calling `run`.
pub(super) fn now() -> impl std::future::Future<Output = ()> + Send + 'static {
    std::future::ready(())
}

/// Long enough for anything a test waits on; reaching it is a failure.
pub(super) const WAIT: Duration = Duration::from_secs(10);

#[test]
fn bounded_run_completes_with_every_row_and_final_watermarks() {
    let io = io();
    let source = FakeSource::new(data(3, 1000), true);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let report = start(source, sink, options(&io), 100).run(never());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    assert_eq!(report.exit_code(), 0);
    let by = offsets(&sink_log.lock().rows);
    for p in 0..3 {
        assert_eq!(
            by[&p],
            (0..1000).collect::<Vec<i64>>(),
            "partition {p}: every row exactly once"
        );
    }
    let mut wms = report.final_watermarks.clone();
    wms.sort();
    assert_eq!(
        wms.iter()
            .map(|(p, w)| (p.partition, *w))
            .collect::<Vec<_>>(),
        vec![(0, 1000), (1, 1000), (2, 1000)]
    );
    assert!(report.sink_drain.as_ref().unwrap().is_clean());
    // Every commit along the way stayed within what was acknowledged.
    for (p, w, _) in &source_log.lock().commits {
        assert!(w.0 <= 1000, "{p} committed {w:?}");
    }
}

#[test]
fn rows_the_sink_lost_are_read_again_from_the_acknowledged_watermark() {
    let io = io();
    let source = FakeSource::new(data(3, 1000), true);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    // The sink loses its first four chunks (a failed streamed request
    // whose batches were released): their rows must come back.
    sink.lose_next.store(4, Ordering::Release);
    // Without the rewind the lost segments would hold the watermarks and
    // the run would never complete: a shutdown bounds the test.
    let deadline = async { tokio::time::sleep(Duration::from_secs(30)).await };
    let report = start(source, sink, options(&io), 100).run(deadline);
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    let by = offsets(&sink_log.lock().rows);
    for p in 0..3 {
        let mut got = by[&p].clone();
        got.dedup();
        assert_eq!(
            got,
            (0..1000).collect::<Vec<i64>>(),
            "partition {p}: every row, the lost ones read again"
        );
    }
    let rewinds = source_log.lock().rewinds.clone();
    assert!(!rewinds.is_empty(), "no lane was read again");
    let mut wms = report.final_watermarks.clone();
    wms.sort();
    let wms: Vec<_> = wms.iter().map(|(p, w)| (p.partition, *w)).collect();
    assert_eq!(wms, vec![(0, 1000), (1, 1000), (2, 1000)]);
}

#[test]
fn shutdown_flushes_drivers_then_drains_sink_then_commits() {
    let io = io();
    // Unbounded source: only a shutdown stops it.
    let source = FakeSource::new(data(2, 3000), false);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    // Row limit never reached and a long age limit: without the shutdown
    // flush, the tail would sit in the chains.
    let mut opts = options(&io);
    opts.commit_interval = Duration::from_secs(3600);
    let pipeline = Pipeline::new(
        source,
        line_chains(),
        sink.runtime,
        sink.acks,
        SinkOptions {
            limits: crate::sink::BatchLimits {
                rows: 1_000_000,
                bytes: 1 << 30,
                interval: Duration::from_secs(3600),
                jitter: 0.0,
                sizing: crate::sink::RowSizing::Fixed,
            },
        },
    )
    .unwrap();
    let runtime = PipelineRuntime::start(pipeline, opts).unwrap();
    source_log.wait_for("every row read into the chains", WAIT, |l| {
        l.delivered == 6000
    });
    let report = runtime.run(now());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    let by = offsets(&sink_log.lock().rows);
    let commits = source_log.lock().commits.clone();
    // The only commit is the final synchronous one, after the drain: it
    // covers exactly what the drivers flushed and the sink inserted.
    assert!(commits.iter().all(|(_, _, sync)| *sync), "{commits:?}");
    for (p, w, _) in &commits {
        let got = &by[&p.partition];
        assert_eq!(
            got.len() as i64,
            w.0,
            "{p}: committed {w:?} but {} rows inserted",
            got.len()
        );
        assert_eq!(*got, (0..w.0).collect::<Vec<_>>());
    }
    assert_eq!(commits.len(), 2);
    // Limits were never reached: the only seals were the shutdown flushes,
    // one per driver.
    assert_eq!(sink_log.lock().chunks, 2);
    assert!(report.sink_drain.unwrap().is_clean());
}

#[test]
fn stalled_sink_is_abandoned_at_the_deadline_and_nothing_is_committed() {
    let io = io();
    let source = FakeSource::new(data(2, 500), false);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    sink.stall.store(true, Ordering::Release);
    let mut opts = options(&io);
    opts.shutdown_timeout = Duration::from_millis(400);
    let sink_log = sink.log.clone();
    let started = std::time::Instant::now();
    let runtime = start(source, sink, opts, 50);
    sink_log.wait_for("a chunk held by the stalled sink", WAIT, |l| {
        l.held_chunks > 0
    });
    let report = runtime.run(now());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the deadline bounds the shutdown"
    );
    match &report.state {
        ExitState::Failed(f) => {
            assert_eq!(f.component, "sink");
            assert!(f.reason.contains("will replay"), "{f}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let drain = report.sink_drain.clone().unwrap();
    assert!(
        drain.abandoned_rows > 0 && drain.abandoned_chunks > 0,
        "{drain:?}"
    );
    assert!(report.final_watermarks.is_empty());
    assert!(
        source_log.lock().commits.is_empty(),
        "nothing was acknowledged"
    );
    assert_eq!(report.exit_code(), 1);
}

#[test]
fn bad_message_fails_naming_its_position_and_commits_everything_before_it() {
    let io = io();
    let mut d = data(2, 1000);
    d[0][500] = b"bad-value".to_vec();
    let source = FakeSource::new(d, true);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let report = start(source, sink, options(&io), 64).run(never());
    let ExitState::Failed(f) = &report.state else {
        panic!("expected failure: {report:?}");
    };
    assert!(
        f.reason.contains("topic fake partition 0 offset 500")
            && f.reason.contains("column `n`")
            && f.reason.contains("bad-value"),
        "{f}"
    );
    let by = offsets(&sink_log.lock().rows);
    assert_eq!(
        by[&0],
        (0..500).collect::<Vec<i64>>(),
        "everything before the bad message, nothing after"
    );
    let p0: Vec<Watermark> = source_log
        .lock()
        .commits
        .iter()
        .filter(|(p, _, _)| p.partition == 0)
        .map(|c| c.1)
        .collect();
    assert_eq!(
        p0.iter().max(),
        Some(&Watermark(500)),
        "committed up to, never past, the bad offset"
    );
}

#[test]
fn driver_panic_becomes_a_fatal_report_not_a_hang() {
    let io = io();
    let mut d = data(1, 100);
    d[0][10] = b"panic".to_vec();
    let source = FakeSource::new(d, true);
    let sink = recording_sink(io.handle(), 1 << 20);
    let report = start(source, sink, options(&io), 64).run(never());
    let ExitState::Failed(f) = &report.state else {
        panic!("expected failure: {report:?}");
    };
    assert!(f.reason.contains("panicked"), "{f}");
    assert!(f.component.starts_with("driver-"), "{f}");
}

#[test]
fn backpressure_pauses_lanes_and_resumes_them_without_loss() {
    let io = io();
    let source = FakeSource::new(data(2, 2000), true);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 256);
    let stall = sink.stall.clone();
    let sink_log = sink.log.clone();
    stall.store(true, Ordering::Release);
    let runtime = start(source, sink, options(&io), 16);
    source_log.wait_for("lanes paused", WAIT, |l| !l.paused.is_empty());
    stall.store(false, Ordering::Release);
    let report = runtime.run(never());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    let log = source_log.lock();
    assert!(log.pause_calls > 0);
    // Resumed, or retired at its end while paused (the fake's lanes read
    // on while paused; the driver resumes no ended lane).
    assert!(
        log.paused.is_empty(),
        "every paused lane was resumed or retired: {:?}",
        log.paused
    );
    let by = offsets(&sink_log.lock().rows);
    for p in 0..2 {
        assert_eq!(by[&p], (0..2000).collect::<Vec<i64>>());
    }
}

#[test]
fn revocation_commits_the_acknowledged_watermark_before_returning() {
    let io = io();
    let source = FakeSource::new(data(2, 4000), false);
    let source_log = source.log.clone();
    let revoke = source.revoke_now.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let mut opts = options(&io);
    opts.revoke_timeout = Duration::from_secs(2);
    // The controller's commit ticks run on this clock: after the
    // revocation the test turns it tick by tick, so "nothing committed
    // afterwards" is checked over real ticks, not over a sleep.
    let clock = crate::clock::ManualClock::new();
    opts.clock = clock.clone();
    let commit_interval = opts.commit_interval;
    let runtime = start(source, sink, opts, 100);
    sink_log.wait_for("rows of both partitions inserted", WAIT, |l| {
        ["0-", "1-"]
            .iter()
            .all(|p| l.rows.iter().any(|r| r.starts_with(p)))
    });
    revoke.store(true, Ordering::Release);
    source_log.wait_for("the revocation committed", WAIT, |l| {
        !l.revoked_commits.is_empty()
    });
    for _ in 0..3 {
        clock.advance(commit_interval);
        let polls = source_log.lock().polls;
        // Two more polls: one whole controller turn past the tick.
        source_log.wait_for("a controller turn", WAIT, |l| l.polls >= polls + 2);
    }
    let report = runtime.run(now());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    let revoked = source_log.lock().revoked_commits.clone();
    let by = offsets(&sink_log.lock().rows);
    assert_eq!(revoked.len(), 2, "{revoked:?}");
    for (p, w) in &revoked {
        // StopLanes flushed the chain and the revoke waited for the sink:
        // the watermark covers everything the lane delivered.
        assert_eq!(by[&p.partition], (0..w.0).collect::<Vec<_>>(), "{p}");
    }
    // Nothing is committed for revoked partitions afterwards.
    let commits = source_log.lock().commits.clone();
    let last_sync: Vec<_> = commits.iter().filter(|c| c.2).collect();
    assert_eq!(
        last_sync.len(),
        2,
        "only the two revocation commits: {commits:?}"
    );
}

#[test]
fn final_commit_refused_by_a_rebalance_is_retried_after_serving_the_source() {
    let io = io();
    let mut source = FakeSource::new(data(2, 500), false);
    source.refuse_sync_commits = 2;
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let mut opts = options(&io);
    opts.commit_interval = Duration::from_secs(3600);
    opts.commit_coalesce = None;
    let sink_log = sink.log.clone();
    let runtime = start(source, sink, opts, 50);
    sink_log.wait_for("every row inserted", WAIT, |l| l.rows.len() == 1000);
    let report = runtime.run(now());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    let commits = source_log.lock().commits.clone();
    assert_eq!(
        commits.len(),
        2,
        "the final commit went through once: {commits:?}"
    );
    for (p, w, sync) in &commits {
        assert!(*sync);
        assert_eq!(w.0, 500, "{p}");
    }
}

/// GET `path` from the admin server: (status line, body); `None` if it
/// does not answer.
fn admin_get(addr: std::net::SocketAddr, path: &str) -> Option<(String, String)> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// Requests shutdown when dropped, so a failing watcher thread cannot
/// leave the runtime running forever.
struct StopOnDrop(ShutdownHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

#[test]
fn a_stalled_driver_turns_healthz_503_naming_it() {
    let io = io();
    let mut d = data(2, 200);
    d[0][100] = b"hang".to_vec();
    let source = FakeSource::new(d, false);
    let sink = recording_sink(io.handle(), 1 << 20);
    let mut opts = options(&io);
    opts.stall_timeout = Duration::from_millis(300);
    opts.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    let runtime = start(source, sink, opts, 10);
    let addr = runtime.admin_addr().expect("admin server");
    let stop = StopOnDrop(runtime.shutdown_handle());
    let watcher = std::thread::spawn(move || {
        let _stop = stop;
        let wait = |want: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let mut last = None;
            loop {
                if let Some((status, body)) = admin_get(addr, "/healthz") {
                    if status.contains(want) {
                        return body;
                    }
                    last = Some((status, body));
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "/healthz never answered {want}; last: {last:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let stalled = wait("503");
        // Recovers once the driver's loop turns again.
        let recovered = wait("200");
        (stalled, recovered)
    });
    let report = runtime.run(never());
    let (stalled, recovered) = watcher.join().expect("watcher");
    assert!(
        stalled.contains("\"healthy\":false") && stalled.contains("\"thread\":\"driver-"),
        "the stalled driver is named: {stalled}"
    );
    assert!(
        !stalled.contains("controller"),
        "only the driver stalled: {stalled}"
    );
    assert!(recovered.contains("\"stalled\":[]"), "{recovered}");
    assert!(
        matches!(report.state, ExitState::Completed),
        "{:?}",
        report.state
    );
}

/// The commit tick is read from the runtime's clock: acknowledged rows are
/// not committed until the clock passes the commit interval (an hour, which
/// the real clock never reaches during the test), and then are.
#[test]
fn commits_follow_the_injected_clock() {
    let io = io();
    let source = FakeSource::new(data(1, 1000), false);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let clock = crate::clock::ManualClock::new();
    let mut opts = options(&io);
    opts.commit_interval = Duration::from_secs(3600);
    // The tick alone (eager commits: `commits_follow_acknowledgements_coalesced`).
    opts.commit_coalesce = None;
    opts.clock = clock.clone();
    let runtime = start(source, sink, opts, 100);
    sink_log.wait_for("every row inserted", WAIT, |l| l.rows.len() == 1000);
    let polls = source_log.lock().polls;
    source_log.wait_for("controller turns", WAIT, |l| l.polls >= polls + 5);
    assert!(
        source_log.lock().commits.is_empty(),
        "committed before the clock reached the commit interval"
    );
    clock.advance(Duration::from_secs(3600) - Duration::from_millis(1));
    let polls = source_log.lock().polls;
    source_log.wait_for("controller turns", WAIT, |l| l.polls >= polls + 3);
    assert!(source_log.lock().commits.is_empty(), "committed 1 ms early");
    clock.advance(Duration::from_millis(1));
    source_log.wait_for("the tick's commit of every row", WAIT, |l| {
        l.commits.iter().any(|c| c.1 == Watermark(1000))
    });
    let tick = source_log.lock().commits[0].clone();
    assert!(!tick.2, "a tick commits asynchronously: {tick:?}");
    let report = runtime.run(now());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
}

/// A watermark that moves is committed at once, without waiting for the
/// tick (an hour here), and later moves are coalesced: nothing more is
/// committed until the injected clock passes the coalescing window.
#[test]
fn commits_follow_acknowledgements_coalesced() {
    let io = io();
    let source = FakeSource::new(data(1, 1000), false);
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let clock = crate::clock::ManualClock::new();
    let mut opts = options(&io);
    opts.commit_interval = Duration::from_secs(3600);
    opts.commit_coalesce = Some(Duration::from_millis(100));
    opts.clock = clock.clone();
    let runtime = start(source, sink, opts, 100);
    source_log.wait_for("a commit without any tick", WAIT, |l| !l.commits.is_empty());
    sink_log.wait_for("every row inserted", WAIT, |l| l.rows.len() == 1000);
    let polls = source_log.lock().polls;
    source_log.wait_for("controller turns", WAIT, |l| l.polls >= polls + 5);
    let commits = source_log.lock().commits.clone();
    assert_eq!(
        commits.len(),
        1,
        "one eager commit; the window holds back the rest: {commits:?}"
    );
    assert!(
        !commits[0].2,
        "an eager commit is asynchronous: {commits:?}"
    );
    clock.advance(Duration::from_millis(100));
    source_log.wait_for("the last watermark committed", WAIT, |l| {
        l.commits.iter().any(|c| c.1 == Watermark(1000))
    });
    let report = runtime.run(now());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
}

/// The revoke deadline is on the runtime's clock: with the sink holding
/// the revoked lanes' rows, the revocation waits (in real time, well past
/// its 50 ms budget) until the clock passes the deadline, then gives up on
/// the unacknowledged rows.
#[test]
fn the_revoke_deadline_is_read_from_the_injected_clock() {
    let io = io();
    let source = FakeSource::new(data(2, 4000), false);
    let source_log = source.log.clone();
    let revoke = source.revoke_now.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let stall = sink.stall.clone();
    stall.store(true, Ordering::Release);
    let clock = crate::clock::ManualClock::new();
    let mut opts = options(&io);
    opts.revoke_timeout = Duration::from_millis(50);
    opts.clock = clock.clone();
    let runtime = start(source, sink, opts, 100);
    sink_log.wait_for("a chunk held by the stalled sink", WAIT, |l| {
        l.held_chunks > 0
    });
    revoke.store(true, Ordering::Release);
    source_log.wait_for("the revocation started", WAIT, |l| {
        l.revocations_started == 1
    });
    assert!(
        !source_log.wait_until(Duration::from_millis(300), |l| l.revocations_done > 0),
        "the revocation ended before its deadline on the injected clock"
    );
    clock.advance(Duration::from_millis(50));
    source_log.wait_for("the revocation gave up", WAIT, |l| l.revocations_done == 1);
    assert!(
        source_log.lock().revoked_commits.is_empty(),
        "nothing of the revoked lanes was acknowledged, so nothing is committed"
    );
    stall.store(false, Ordering::Release);
    let report = runtime.run(now());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    assert!(report.final_watermarks.is_empty(), "{report:?}");
}

#[test]
fn run_pipeline_returns_the_report_of_a_clean_run_and_the_failure_of_a_bad_one() {
    let io = io();
    let sink = recording_sink(io.handle(), 1 << 20);
    let pipeline = Pipeline::new(
        FakeSource::new(data(2, 300), true),
        line_chains(),
        sink.runtime,
        sink.acks,
        sink_options(64),
    )
    .unwrap();
    let report = PipelineRuntime::run_pipeline(pipeline, options(&io), never()).unwrap();
    assert_eq!(report.exit_code(), 0);

    let mut d = data(1, 100);
    d[0][10] = b"bad".to_vec();
    let sink = recording_sink(io.handle(), 1 << 20);
    let pipeline = Pipeline::new(
        FakeSource::new(d, true),
        line_chains(),
        sink.runtime,
        sink.acks,
        sink_options(64),
    )
    .unwrap();
    match PipelineRuntime::run_pipeline(pipeline, options(&io), never()) {
        Err(PipelineError::Failed(f)) => assert!(f.reason.contains("offset 10"), "{f}"),
        other => panic!("expected a failed run: {other:?}"),
    }

    let sink = recording_sink(io.handle(), 1 << 20);
    let no_queues = SinkRuntime {
        queues: Vec::new(),
        ..sink.runtime
    };
    let built = Pipeline::new(
        FakeSource::new(data(1, 1), true),
        line_chains(),
        no_queues,
        sink.acks,
        sink_options(64),
    );
    let err = PipelineError::from(built.err().expect("no sink queues"));
    assert!(
        matches!(err, PipelineError::Build(BuildError::Missing(_))),
        "{err}"
    );
}
