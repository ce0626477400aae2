//! The deduplication window a takeover needs (issue 29 point 4). A
//! replayed block is dropped by ClickHouse only while it is within the
//! table's window: the last `replicated_deduplication_window` (or
//! `non_replicated_deduplication_window`) blocks inserted into the table,
//! and, on servers that have it, no older than
//! `replicated_deduplication_window_seconds`. After a member is killed its
//! partitions are taken over after about `session.timeout.ms`, and every
//! partition can cut about one block per flush interval meanwhile, so the
//! window must hold at least
//!
//! ```text
//! needed = 2 × partitions × ceil(session.timeout.ms / flush interval)
//! ```
//!
//! blocks; the factor 2 is the margin for the rebalance after the
//! session timeout, the new owner's plan read, and flushes cut early by
//! the row and byte limits. Pure functions; the preflight reads the
//! inputs and logs the warning once at start.

use super::sql::{table_setting, TableFacts};
use std::time::Duration;

/// The margin over one session timeout's worth of blocks.
pub(crate) const MARGIN: u64 = 2;

/// What the window is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Takeover {
    /// The partitions of the pipeline's topics (Kafka metadata at start).
    pub partitions: u64,
    /// The consumer's `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `--flush-interval`: a partition cuts about one block per interval.
    pub flush_interval: Duration,
}

impl Takeover {
    /// The blocks the window must hold (see the module header).
    #[must_use]
    pub fn needed(&self) -> u64 {
        let flush = self.flush_interval.as_millis().max(1);
        let per_partition = self.session_timeout.as_millis().div_ceil(flush);
        (MARGIN * self.partitions).saturating_mul(per_partition as u64)
    }
}

/// The table's effective window in blocks: its own setting, else the
/// server's default (`system.merge_tree_settings`), else the default of
/// the release (`replicated_deduplication_window`: 100 on old servers such
/// as 18.16, 1000 on newer ones; none for a plain `MergeTree`).
pub(crate) fn window(facts: &TableFacts, old_server: bool) -> (&'static str, u64) {
    if facts.engine.starts_with("Replicated") {
        let name = "replicated_deduplication_window";
        let default = if old_server { 100 } else { 1000 };
        let w = (table_setting(&facts.engine_full, name))
            .or(facts.default_replicated_window)
            .unwrap_or(default);
        (name, w)
    } else {
        let name = "non_replicated_deduplication_window";
        let w = (table_setting(&facts.engine_full, name))
            .or(facts.default_window)
            .unwrap_or(0);
        (name, w)
    }
}

/// The warning when `table`'s window is smaller than `takeover` needs,
/// naming the inputs and the `ALTER TABLE` to run; `None` when it holds.
pub(crate) fn warning(
    table: &str,
    facts: &TableFacts,
    old_server: bool,
    takeover: &Takeover,
) -> Option<String> {
    let (setting, window) = window(facts, old_server);
    let needed = takeover.needed();
    let mut problems = Vec::new();
    let mut alter = Vec::new();
    if window < needed {
        problems.push(format!(
            "{setting} = {window} blocks, a takeover needs {needed}"
        ));
        alter.push(format!("{setting} = {needed}"));
    }
    let seconds = (table_setting(
        &facts.engine_full,
        "replicated_deduplication_window_seconds",
    ))
    .or(facts.default_window_seconds);
    let takeover_s = (takeover.session_timeout.as_secs() * MARGIN).max(1);
    if let Some(s) = seconds.filter(|&s| facts.engine.starts_with("Replicated") && s < takeover_s) {
        problems.push(format!(
            "replicated_deduplication_window_seconds = {s}, a takeover needs {takeover_s}"
        ));
        alter.push(format!(
            "replicated_deduplication_window_seconds = {takeover_s}"
        ));
    }
    if problems.is_empty() {
        return None;
    }
    Some(format!(
        "exactly-once: the deduplication window of {table} may be too small for a takeover: {} \
         ({MARGIN} × {} partitions × session.timeout.ms {} ms / --flush-interval {} ms); a block replayed \
         after a member was killed may then land twice. Run: ALTER TABLE {table} MODIFY SETTING {}",
        problems.join("; "),
        takeover.partitions,
        takeover.session_timeout.as_millis(),
        takeover.flush_interval.as_millis(),
        alter.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(engine: &str, full: &str) -> TableFacts {
        TableFacts {
            engine: engine.into(),
            engine_full: full.into(),
            default_window: Some(0),
            default_replicated_window: None,
            default_window_seconds: None,
            has_views: false,
            insert_deduplicate: true,
        }
    }

    fn takeover(partitions: u64, session_ms: u64, flush_ms: u64) -> Takeover {
        Takeover {
            partitions,
            session_timeout: Duration::from_millis(session_ms),
            flush_interval: Duration::from_millis(flush_ms),
        }
    }

    #[test]
    fn the_issue_example_needs_more_than_the_default_window() {
        // 64 partitions, the default 45 s session timeout, 1 s flushes.
        let t = takeover(64, 45_000, 1_000);
        assert_eq!(t.needed(), 2 * 64 * 45);
        let f = facts(
            "ReplicatedMergeTree",
            "ReplicatedMergeTree('/t', 'r') ORDER BY n",
        );
        let w = warning("db.t", &f, false, &t).expect("1000 < 5760");
        assert!(
            w.contains("replicated_deduplication_window = 1000 blocks, a takeover needs 5760"),
            "{w}"
        );
        assert!(
            w.contains("ALTER TABLE db.t MODIFY SETTING replicated_deduplication_window = 5760"),
            "{w}"
        );
        assert!(
            w.contains("64 partitions") && w.contains("45000 ms") && w.contains("1000 ms"),
            "{w}"
        );
        // 18.16's default is 100.
        assert_eq!(window(&f, true), ("replicated_deduplication_window", 100));
    }

    #[test]
    fn a_large_enough_window_is_quiet() {
        let t = takeover(4, 6_000, 1_000);
        let full = "MergeTree ORDER BY n SETTINGS non_replicated_deduplication_window = 48";
        assert_eq!(warning("db.t", &facts("MergeTree", full), false, &t), None);
        let small = "MergeTree ORDER BY n SETTINGS non_replicated_deduplication_window = 47";
        assert!(warning("db.t", &facts("MergeTree", small), false, &t).is_some());
    }

    #[test]
    fn the_window_in_seconds_is_checked_on_replicated_tables() {
        let t = takeover(1, 45_000, 100_000);
        let full = "ReplicatedMergeTree('/t', 'r') ORDER BY n SETTINGS replicated_deduplication_window_seconds = 60";
        let w = warning("db.t", &facts("ReplicatedMergeTree", full), false, &t).unwrap();
        assert!(
            w.contains("MODIFY SETTING replicated_deduplication_window_seconds = 90"),
            "{w}"
        );
    }
}
