//! Issue 29: lanes that cannot move are reported, and a lane whose driver
//! is stuck inside a poll does not freeze the controller.
//!
//! - A batch the sink gives up while the member still owns its lane (an
//!   exactly-once block fenced by a later owner) blocks the lane's
//!   watermark until the lane is revoked: `/readyz` names the partition
//!   and `spate_lanes_blocked` counts it until the revocation.
//! - A revocation while a driver is blocked inside a poll of the revoked
//!   lane (a decode-stage dead letter waiting for its destination) ends at
//!   the revoke deadline with a fatal error naming the partition, instead
//!   of waiting for the poll with every commit held up and SIGTERM
//!   unanswered; the run ends within its shutdown budget.

use super::super::fakes::{recording_sink, FakeSource};
use super::super::tests::{data, io, never, now, options, start, WAIT};
use super::super::*;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `/readyz`'s `(ready, body)`, until `cond` holds of them or `WAIT` ends.
fn readyz_until(
    runtime: &PipelineRuntime,
    what: &str,
    cond: impl Fn(bool, &str) -> bool,
) -> (bool, String) {
    let readiness = runtime.readiness();
    let deadline = Instant::now() + WAIT;
    loop {
        let (ready, body) = readiness.report();
        if cond(ready, &body) {
            return (ready, body);
        }
        assert!(Instant::now() < deadline, "{what}: last /readyz {body}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_lane_whose_batch_was_given_up_is_reported_until_it_is_revoked() {
    let io = io();
    let source = FakeSource::new(data(1, 4000), false);
    let revoke = source.revoke_now.clone();
    let source_log = source.log.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let give_up = sink.give_up_first.clone();
    give_up.store(true, Ordering::Release);
    let opts = options(&io);
    let metrics = opts.metrics.clone();
    let runtime = start(source, sink, opts, 100);
    let (ready, body) = readyz_until(&runtime, "the blocked partition reported", |_, b| {
        b.contains("\"blocked_partitions\":[\"fake/0 (lane")
    });
    assert!(!ready, "{body}");
    assert!(
        body.contains("cannot be committed until it is reassigned"),
        "{body}"
    );
    assert_eq!(metrics.lanes_blocked.get(), 1);
    give_up.store(false, Ordering::Release);
    revoke.store(true, Ordering::Release);
    source_log.wait_for("the revocation returned", WAIT, |l| l.revocations_done == 1);
    let (_, body) = readyz_until(&runtime, "the blocked list cleared", |_, b| {
        b.contains("\"blocked_partitions\":[]")
    });
    assert_eq!(metrics.lanes_blocked.get(), 0, "{body}");
    let report = runtime.run(now());
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
}

#[test]
fn a_revocation_does_not_wait_past_its_deadline_for_a_blocked_poll() {
    let io = io();
    let source = FakeSource::new(data(2, 4000), false);
    let source_log = source.log.clone();
    let revoke = source.revoke_now.clone();
    let block = source.block_first.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let mut opts = options(&io);
    opts.revoke_timeout = Duration::from_millis(300);
    opts.shutdown_timeout = Duration::from_secs(1);
    let runtime = start(source, sink, opts, 100);
    sink_log.wait_for("rows of both partitions inserted", WAIT, |l| {
        ["0-", "1-"]
            .iter()
            .all(|p| l.rows.iter().any(|r| r.starts_with(p)))
    });
    block.store(true, Ordering::Release);
    source_log.wait_for("a poll of partition 0 blocked", WAIT, |l| {
        l.blocked_polls > 0
    });
    let started = Instant::now();
    revoke.store(true, Ordering::Release);
    let returned = source_log.wait_until(WAIT, |l| l.revocations_done == 1);
    let revoke_took = started.elapsed();
    // The run stops by itself (the failure), with no shutdown requested;
    // in a thread, so a hang fails the test instead of holding it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(runtime.run(never()));
    });
    let report = rx.recv_timeout(WAIT);
    let run_took = started.elapsed();
    block.store(false, Ordering::Release);
    assert!(
        returned,
        "the revocation waited for the blocked poll past its deadline"
    );
    assert!(revoke_took < Duration::from_secs(3), "{revoke_took:?}");
    let report = report.expect("the run ended");
    let ExitState::Failed(f) = &report.state else {
        panic!("{report:?}");
    };
    assert!(f.reason.starts_with("fake/0: a poll of its lane"), "{f:?}");
    assert!(f.reason.contains("still running at the deadline"), "{f:?}");
    assert!(run_took < Duration::from_secs(6), "{run_took:?}");
}
