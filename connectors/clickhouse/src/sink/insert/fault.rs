//! Test-only fault points around an insert (issue 19, kill points), read
//! from `SPATE_FAULT=<point>` and `SPATE_FAULT_AT=<n>` (the n-th chunk an
//! insert worker of this process takes, 1-based; default 1). Compiled only
//! with `debug_assertions` or the `fault-injection` feature (which
//! `make test` turns on for its release build), so the release binary
//! users build cannot trigger them.
//!
//! Points: `hold-before-intent` (the worker waits, before recording the
//! intent, until the file `SPATE_FAULT_RELEASE` names exists: an old owner
//! whose insert is held while its partition moves on; counted over the
//! chunks whose intent a worker records), `hold-before-send` (the same
//! wait after the intent is recorded, the fence checked and the column
//! types checked (`crate::sink::schema_change::guard`), just before the first attempt: a test
//! freezes ClickHouse, or alters the table, then releases it, so the
//! insert is sent into the freeze or the change), `before-send` (the intent is
//! recorded, the insert not sent),
//! `during-insert` (the process dies a few milliseconds into the attempt,
//! while the server is reading or writing it), `after-ack` (ClickHouse
//! confirmed the insert, spate has not acknowledged or committed it). At the
//! point the process aborts (SIGABRT: no drain, no commit, like `kill -9`).
//! Touched by insert workers (tokio tasks).

/// A fault point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Without fault injection the hold points are only named, never armed.
#[cfg_attr(
    not(any(debug_assertions, feature = "fault-injection")),
    allow(dead_code)
)]
pub(crate) enum Point {
    BeforeSend,
    DuringInsert,
    AfterAck,
    HoldBeforeIntent,
    HoldBeforeSend,
}

#[cfg(any(debug_assertions, feature = "fault-injection"))]
mod imp {
    use super::Point;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static CHUNKS: AtomicU64 = AtomicU64::new(0);
    static INTENTS: AtomicU64 = AtomicU64::new(0);

    fn armed() -> Option<(Point, u64)> {
        static ARMED: OnceLock<Option<(Point, u64)>> = OnceLock::new();
        *ARMED.get_or_init(|| {
            let point = match std::env::var("SPATE_FAULT").ok()?.as_str() {
                "before-send" => Point::BeforeSend,
                "during-insert" => Point::DuringInsert,
                "after-ack" => Point::AfterAck,
                "hold-before-intent" => Point::HoldBeforeIntent,
                "hold-before-send" => Point::HoldBeforeSend,
                _ => return None,
            };
            let at = std::env::var("SPATE_FAULT_AT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            Some((point, at))
        })
    }

    /// Whether a fault point is armed in this process (insert workers
    /// then insert batch by batch, as the points count batches).
    pub(crate) fn any_armed() -> bool {
        armed().is_some()
    }

    /// A worker took a chunk: whether `point` fires for it.
    pub(crate) fn chunk_taken() -> u64 {
        CHUNKS.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub(crate) fn fires(point: Point, chunk: u64) -> bool {
        armed().is_some_and(|(p, at)| p == point && at == chunk)
    }

    pub(crate) fn hit(point: Point, chunk: u64) {
        if fires(point, chunk) {
            eprintln!("spate: test fault {point:?} at chunk {chunk}: aborting");
            std::process::abort();
        }
    }

    /// `hold-before-intent`: wait for the release file.
    pub(crate) async fn hold_before_intent() {
        let nth = INTENTS.fetch_add(1, Ordering::AcqRel) + 1;
        hold(Point::HoldBeforeIntent, nth).await;
    }

    /// `hold-before-send`: chunk `nth`'s intent is recorded and its fence
    /// checked; wait for the release file before its first attempt.
    pub(crate) async fn hold_before_send(nth: u64) {
        hold(Point::HoldBeforeSend, nth).await;
    }

    async fn hold(point: Point, nth: u64) {
        if !fires(point, nth) {
            return;
        }
        let Some(release) = std::env::var_os("SPATE_FAULT_RELEASE") else {
            return;
        };
        eprintln!("spate: test fault {point:?} at chunk {nth}: holding until {release:?} exists");
        while !std::path::Path::new(&release).exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        eprintln!("spate: test fault {point:?} at chunk {nth}: released");
    }
}

#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
mod imp {
    use super::Point;

    pub(crate) fn any_armed() -> bool {
        false
    }

    pub(crate) fn chunk_taken() -> u64 {
        0
    }

    pub(crate) fn fires(_: Point, _: u64) -> bool {
        false
    }

    pub(crate) fn hit(_: Point, _: u64) {}

    pub(crate) async fn hold_before_intent() {}

    pub(crate) async fn hold_before_send(_: u64) {}
}

pub(crate) use imp::{any_armed, chunk_taken, fires, hit, hold_before_intent, hold_before_send};
