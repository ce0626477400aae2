//! The shutdown signal of `spate run`: a future that resolves on the first
//! SIGTERM or SIGINT, handed to `PipelineRuntime::run`. A second signal
//! exits the process at once (exit 1), without draining.
//!
//! Polled on the runtime's I/O threads; sends nothing, the runtime reacts
//! to the future resolving.

/// Resolves on the first SIGTERM or SIGINT; a second one exits at once.
pub(super) async fn signals() {
    wait_for_signal().await;
    tracing::info!("signal received; shutting down (a second signal exits at once)");
    tokio::spawn(async {
        wait_for_signal().await;
        eprintln!("spate: error: second signal; exiting without draining (nothing unacknowledged was committed)");
        std::process::exit(1);
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
