//! The shutdown signal of `spate run`, watched once for the whole process:
//! a `spate-signals` thread (its own small runtime) sets a flag on the
//! first SIGTERM or SIGINT, which every run of the pipelines waits on, and
//! exits the process at once (exit 1, without draining) on the second.
//!
//! Once for the process, not once per run: a signal that arrives while the
//! pipelines stop and start again in the process (a secret file only a new
//! client reads, `crate::rotate`) would otherwise find no listener, and
//! tokio drops a signal nobody waits for.
//!
//! A first signal while no pipeline runs (at start, waiting for ClickHouse
//! or the brokers; between two runs) exits at once: nothing is in flight,
//! and a start can wait out an outage for longer than a grace period.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// The process's shutdown signal: `requested` turns `true` at the first
/// signal; `running` says whether a pipeline runs (set around
/// `PipelineRuntime::run`).
pub(super) struct Shutdown {
    pub requested: watch::Receiver<bool>,
    pub running: Arc<AtomicBool>,
}

/// Start watching.
pub(super) fn watch() -> Shutdown {
    let (tx, rx) = watch::channel(false);
    let running = Arc::new(AtomicBool::new(false));
    let seen = running.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let spawned = runtime.map_err(|e| e.to_string()).and_then(|rt| {
        std::thread::Builder::new()
            .name("spate-signals".into())
            .spawn(move || rt.block_on(serve(tx, seen)))
            .map_err(|e| e.to_string())
    });
    if let Err(e) = spawned {
        // Without it SIGTERM keeps its default action: the process ends at
        // once and what was not committed replays.
        tracing::error!(error = %e, "cannot watch for SIGTERM/SIGINT; a signal ends the process without draining");
    }
    Shutdown {
        requested: rx,
        running,
    }
}

async fn either(term: &mut Signal, int: &mut Signal) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn serve(tx: watch::Sender<bool>, running: Arc<AtomicBool>) {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!(
            "cannot watch for SIGTERM/SIGINT; a signal ends the process without draining"
        );
        return;
    };
    // The same streams for both signals: none is lost in between.
    either(&mut term, &mut int).await;
    if !running.load(Ordering::SeqCst) {
        eprintln!("spate: signal received while no pipeline runs; exiting (nothing unacknowledged was committed)");
        std::process::exit(0);
    }
    tracing::info!("signal received; shutting down (a second signal exits at once)");
    let _ = tx.send(true);
    either(&mut term, &mut int).await;
    eprintln!("spate: error: second signal; exiting without draining (nothing unacknowledged was committed)");
    std::process::exit(1);
}
