//! Issue 16 point 4: a member that holds no partition (a standby member:
//! more members than partitions; or one stripped of every partition
//! before they retired) is ready once it joined, and a bounded run of one
//! ends, exit 0, after holding nothing for `RuntimeOptions::idle_exit`.
//!
//! Each test runs the runtime on a helper thread and waits for its report
//! with a deadline; a run still going then is stopped and reported.

use crate::pipeline::fakes::{recording_sink, FakeSource};
use crate::pipeline::tests::{data, io, never, options, start, WAIT};
use crate::pipeline::{ExitReport, ExitState, PipelineRuntime};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const GRACE: Duration = Duration::from_millis(300);

/// Run until the pipeline ends on its own; `Err` with how long it ran if
/// it was still going after [`WAIT`] (it is then shut down).
fn run_to_end(runtime: PipelineRuntime) -> Result<ExitReport, Duration> {
    let handle = runtime.shutdown_handle();
    let started = Instant::now();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let thread = std::thread::spawn(move || {
        let _ = tx.send(runtime.run(never()));
    });
    match rx.recv_timeout(WAIT) {
        Ok(report) => {
            thread.join().expect("runner");
            Ok(report)
        }
        Err(_) => {
            let ran = started.elapsed();
            handle.shutdown();
            let _ = rx.recv_timeout(WAIT);
            Err(ran)
        }
    }
}

#[test]
fn a_bounded_member_assigned_nothing_is_ready_and_ends() {
    let io = io();
    let source = FakeSource::new(Vec::new(), true);
    let sink = recording_sink(io.handle(), 1 << 20);
    let mut opts = options(&io);
    opts.idle_exit = Some(GRACE);
    let runtime = start(source, sink, opts, 100);
    let readiness = runtime.readiness();
    let started = Instant::now();
    let report = run_to_end(runtime)
        .unwrap_or_else(|ran| panic!("a bounded run assigned nothing still going after {ran:?}"));
    assert!(
        readiness.source.joined.load(Ordering::Acquire),
        "a member that joined with an empty assignment is not ready"
    );
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    assert_eq!(report.exit_code(), 0);
    assert!(
        started.elapsed() >= GRACE,
        "ended before holding nothing for the grace period"
    );
}

#[test]
fn a_bounded_member_stripped_of_its_partitions_ends() {
    let io = io();
    let source = FakeSource::new(data(2, 500), true);
    let source_log = source.log.clone();
    // Partition 0 never reaches its end: only the revocation takes it away.
    source.hold_first.store(true, Ordering::Release);
    let revoke = source.revoke_now.clone();
    let sink = recording_sink(io.handle(), 1 << 20);
    let sink_log = sink.log.clone();
    let mut opts = options(&io);
    opts.idle_exit = Some(GRACE);
    let runtime = start(source, sink, opts, 100);
    sink_log.wait_for("partition 1 inserted", WAIT, |l| {
        l.rows.iter().filter(|r| r.starts_with("1-")).count() == 500
    });
    revoke.store(true, Ordering::Release);
    source_log.wait_for("every lane revoked", WAIT, |l| l.revocations_done == 1);
    let report = run_to_end(runtime).unwrap_or_else(|ran| {
        panic!("a bounded run stripped of its partitions still going after {ran:?}")
    });
    assert_eq!(report.state, ExitState::Completed, "{report:?}");
    assert_eq!(report.exit_code(), 0);
}
