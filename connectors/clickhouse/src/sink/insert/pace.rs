//! How an insert worker waits: [`Pace`] holds the drain deadline's signal
//! (every wait ends when it fires), the backoff policy, and the stall
//! table a retried error is reported in (`/readyz` names the worker once
//! the error has not cleared for `--stall-timeout`). One per worker; the
//! stages a worker composes (the type guard, the exactly-once intent, the
//! dead-letter store) wait through it, so no wait is unbounded or
//! unreported.

use super::outcome::{Abandoned, Attempt};
use super::retry::RetryPolicy;
use spate_core::error::{FatalError, Fault};
use spate_core::health::TransientStalls;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// One worker's waits.
pub(crate) struct Pace {
    abandon: watch::Receiver<bool>,
    pub(crate) retry: RetryPolicy,
    stalls: Option<Arc<TransientStalls>>,
    /// The worker's name in the stall table.
    name: String,
    /// The worker in fatal errors: `clickhouse sink <table> shard <n>`.
    context: String,
}

impl Pace {
    /// The waits of worker `index` of `table`'s shard `shard`.
    pub(crate) fn new(
        abandon: watch::Receiver<bool>,
        retry: RetryPolicy,
        stalls: Option<Arc<TransientStalls>>,
        (table, shard, index): (&str, &str, usize),
    ) -> Self {
        Pace {
            abandon,
            retry,
            stalls,
            name: format!("{table} shard {shard} worker {index}"),
            context: format!("clickhouse sink {table} shard {shard}"),
        }
    }

    /// The worker in fatal errors.
    pub(crate) fn context(&self) -> &str {
        &self.context
    }

    /// Whether the drain deadline passed.
    pub(crate) fn is_abandoned(&self) -> bool {
        *self.abandon.borrow()
    }

    /// Resolves when the drain deadline's signal changes (or its sender is
    /// gone): for `select!` arms that end a wait.
    pub(crate) async fn deadline(&mut self) {
        let _ = self.abandon.changed().await;
    }

    /// Resolves once the drain deadline abandoned the worker (never, if
    /// the pool is gone without abandoning): for waits on other tasks.
    pub(crate) fn abandoned(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut abandon = self.abandon.clone();
        async move {
            while !*abandon.borrow_and_update() {
                if abandon.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Wait `delay`, unless the drain deadline passes first.
    pub(crate) async fn pause(&mut self, delay: Duration) -> Result<(), Abandoned> {
        tokio::select! {
            () = tokio::time::sleep(delay) => Ok(()),
            _ = self.abandon.changed() => Err(Abandoned),
        }
    }

    /// Report the worker failing with `why` in the stall table.
    pub(crate) fn failing(&self, why: &str) {
        if let Some(stalls) = &self.stalls {
            stalls.failing(&self.name, why);
        }
    }

    /// The worker's error cleared.
    pub(crate) fn cleared(&self) {
        if let Some(stalls) = &self.stalls {
            stalls.cleared(&self.name);
        }
    }

    /// `op` until it answers, retried with the sink's backoff while
    /// `retriable` says its error may clear; `what` names it in the log,
    /// the stall table and the fatal error. `Err`: failed, or abandoned at
    /// the drain deadline.
    pub(crate) async fn retrying<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
        &mut self,
        what: &str,
        op: impl FnMut() -> F,
        retriable: impl Fn(&E) -> bool,
    ) -> Result<T, Attempt> {
        let outcome = self.retrying_unreported(what, op, retriable).await;
        self.cleared();
        outcome
    }

    /// [`retrying`](Self::retrying), leaving the stall table as it is on
    /// success (for a step between an insert's retries, whose failure
    /// stays reported until the insert is in).
    pub(crate) async fn retrying_unreported<
        T,
        E: std::fmt::Display,
        F: Future<Output = Result<T, E>>,
    >(
        &mut self,
        what: &str,
        mut op: impl FnMut() -> F,
        retriable: impl Fn(&E) -> bool,
    ) -> Result<T, Attempt> {
        let mut attempt = 0u32;
        loop {
            let error = tokio::select! {
                r = op() => match r {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
                _ = self.abandon.changed() => return Err(Attempt::Abandoned),
            };
            if !retriable(&error) {
                return Err(Attempt::Failed(FatalError::new(
                    self.context.clone(),
                    format!("{what} failed: {error}"),
                    Fault::External,
                )));
            }
            attempt += 1;
            let backoff = self.retry.delay(attempt, rand::random::<f64>());
            tracing::warn!(error = %error, attempt, backoff_ms = backoff.as_millis() as u64, "{what} failed; retrying");
            self.failing(&format!("{what}: {error}"));
            self.pause(backoff).await?;
        }
    }
}
