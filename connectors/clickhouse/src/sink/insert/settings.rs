//! The insert settings spate relies on, chosen once per sink from the
//! server version at start (`SinkPool::prepare`) and sent with every
//! insert. Pure.
//!
//! Every setting that decides when a 200 arrives is set explicitly, so a
//! server or user profile cannot change what an acknowledgement means:
//! - `async_insert=0` (>= 21.11, [`ServerFeatures::async_insert`]): recent
//!   servers turn asynchronous inserts on by default, and an asynchronous
//!   insert's 200 would not mean the rows are in the table.
//! - `wait_end_of_query=1` (every version: an HTTP-interface parameter,
//!   parsed by `HTTPHandler` long before 18.16): the server buffers its
//!   answer until the query finished, so no 200 status can be sent before
//!   an exception at the end of the insert.
//! - `insert_deduplicate=1` (>= 22.2, with the token): the deduplication
//!   the token relies on, whatever the profile says.
//! - `insert_deduplicate=0` (before 22.2, at-least-once): without a token a
//!   `Replicated*MergeTree` drops any block whose bytes equal a recent
//!   block's (its block hash) and answers 200, so a batch of identical
//!   rows from other offsets (the same event sent twice, a heartbeat
//!   topic, a table without `_offset`) was lost while its offsets were
//!   committed. The cost: an attempt that timed out but landed is a
//!   duplicate once its retry lands too (at-least-once allows it).
//!   Exactly-once on these servers keeps the block hash (it drops the
//!   replayed block) and instead needs every block's bytes to be unique,
//!   which its preflight checks (`intent::check`).
//!
//! Deduplication token (>= 22.2, [`ServerFeatures::insert_deduplication_token`]):
//! each insert sends `insert_deduplication_token` = [`dedup_token`] of its
//! chunk, derived from the chunk's partitions and offsets (and its shard),
//! the same on every attempt. A timed-out attempt keeps running on the
//! server; when it lands, the retry with the same token is recognised and
//! dropped. ClickHouse keeps tokens where it keeps block hashes: a
//! `Replicated*MergeTree` always (`replicated_deduplication_window`), a
//! plain `MergeTree` only with `non_replicated_deduplication_window > 0`
//! (`ALTER TABLE t MODIFY SETTING non_replicated_deduplication_window =
//! 1000`); elsewhere the token is ignored and a retry after a timeout can
//! still add the batch twice. Older servers (18.16) have no token: there
//! at-least-once sends `insert_deduplicate=0` (above), and exactly-once
//! lets a `Replicated*MergeTree` drop a replayed block by its block hash,
//! since every attempt and every replay of a block sends the same bytes.

use crate::schema::ServerFeatures;
use spate_core::sink::ChunkSpan;

/// The setting that carries a chunk's deduplication token.
pub(crate) const DEDUP_TOKEN: &str = "insert_deduplication_token";

/// How the sink's inserts are delivered, as far as the settings go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// At-least-once (and the dead-letter table's inserts).
    AtLeastOnce,
    /// Exactly-once: a replayed block must be dropped by the server.
    ExactlyOnce,
    /// At-least-once through the server's asynchronous inserts
    /// (`--async-insert`, 21.11+): `async_insert=1` with
    /// `wait_for_async_insert=1`, so the 200 still comes only once the
    /// rows are written (with the other clients' rows buffered beside
    /// them); no token, and `async_insert_deduplicate=0`, so the server
    /// never drops a batch as a repeat of another.
    AsyncInsert,
}

/// The settings to send with every insert to a server with `features`.
#[must_use]
pub(crate) fn insert_settings(
    features: ServerFeatures,
    delivery: Delivery,
) -> Vec<(String, String)> {
    let mut s = Vec::new();
    if delivery == Delivery::AsyncInsert {
        for (k, v) in [
            ("async_insert", "1"),
            ("wait_for_async_insert", "1"),
            ("async_insert_deduplicate", "0"),
            ("insert_deduplicate", "0"),
            ("wait_end_of_query", "1"),
        ] {
            s.push((k.to_string(), v.to_string()));
        }
        return s;
    }
    if features.async_insert {
        s.push(("async_insert".to_string(), "0".to_string()));
    }
    s.push(("wait_end_of_query".to_string(), "1".to_string()));
    if features.insert_deduplication_token {
        s.push(("insert_deduplicate".to_string(), "1".to_string()));
    } else if delivery == Delivery::AtLeastOnce {
        // No token: the block hash would drop distinct batches whose bytes
        // happen to be equal (see the module header).
        s.push(("insert_deduplicate".to_string(), "0".to_string()));
    }
    s
}

/// Whether inserts with `settings` (from [`insert_settings`]) carry a
/// deduplication token: the server takes one (only token servers are
/// sent `insert_deduplicate=1`).
#[must_use]
pub(crate) fn takes_dedup_token(settings: &[(String, String)]) -> bool {
    settings
        .iter()
        .any(|(k, v)| k == "insert_deduplicate" && v == "1")
}

/// The deduplication token of a chunk for `shard` holding `spans`, or
/// `None` when the spans are unknown (then no token is safe to send).
///
/// Deterministic across processes and releases (no std hasher): the same
/// messages cut into the same chunk give the same token on every member,
/// after every restart. Readable head (shard, first span, span count) and
/// a 128-bit FNV-1a of every span, so chunks that share a first span still
/// differ.
#[must_use]
pub fn dedup_token(shard: usize, spans: &[ChunkSpan]) -> Option<String> {
    let first = spans.first()?;
    let mut h = Fnv128::default();
    h.write(&(shard as u64).to_le_bytes());
    for s in spans {
        h.write(s.partition.topic.as_bytes());
        h.write(&[0]);
        h.write(&s.partition.partition.to_le_bytes());
        h.write(&s.first.0.to_le_bytes());
        h.write(&s.last.0.to_le_bytes());
        h.write(&s.rows.to_le_bytes());
    }
    Some(format!(
        "spate1-{shard}-{}-{}-{}-{}-{}-{:032x}",
        first.partition.topic,
        first.partition.partition,
        first.first.0,
        first.last.0,
        spans.len(),
        h.0
    ))
}

/// FNV-1a, 128 bits.
struct Fnv128(u128);

impl Default for Fnv128 {
    fn default() -> Self {
        Fnv128(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }
}

impl Fnv128 {
    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
        for b in bytes {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(PRIME);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_inserts_wait_for_the_write_and_never_deduplicate() {
        let f = ServerFeatures::from_version("26.9.1").unwrap();
        let s = insert_settings(f, Delivery::AsyncInsert);
        let get = |k: &str| s.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("async_insert"), Some("1"));
        assert_eq!(get("wait_for_async_insert"), Some("1"));
        assert_eq!(get("async_insert_deduplicate"), Some("0"));
        assert!(
            !takes_dedup_token(&s),
            "a token would be ignored, or drop batches"
        );
    }

    fn settings(version: &str) -> Vec<(String, String)> {
        insert_settings(
            ServerFeatures::from_version(version).unwrap(),
            Delivery::AtLeastOnce,
        )
    }

    fn exactly_once(version: &str) -> Vec<(String, String)> {
        insert_settings(
            ServerFeatures::from_version(version).unwrap(),
            Delivery::ExactlyOnce,
        )
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn per_version() {
        // Before 22.2 at-least-once turns the block hash off: it would drop
        // a batch whose bytes equal an earlier one's.
        let old = pairs(&[("wait_end_of_query", "1"), ("insert_deduplicate", "0")]);
        let new = pairs(&[
            ("async_insert", "0"),
            ("wait_end_of_query", "1"),
            ("insert_deduplicate", "0"),
        ]);
        let token = pairs(&[
            ("async_insert", "0"),
            ("wait_end_of_query", "1"),
            ("insert_deduplicate", "1"),
        ]);
        assert_eq!(settings("18.16.1"), old);
        assert_eq!(settings("21.10.6.2"), old);
        assert_eq!(settings("21.11.1.8636"), new);
        assert_eq!(settings("22.1.3.7"), new);
        assert_eq!(settings("22.2.2.1"), token);
        assert_eq!(settings("24.3.1.2672"), token);
        assert_eq!(settings("25.8.1.1"), token);
        assert!(!takes_dedup_token(&settings("18.16.1")));
        assert!(!takes_dedup_token(&settings("21.11.1.8636")));
        assert!(takes_dedup_token(&settings("26.9.1.1")));
        // Exactly-once keeps the block hash where there is no token (it
        // drops the replayed block; the preflight makes blocks unique).
        assert_eq!(
            exactly_once("18.16.1"),
            pairs(&[("wait_end_of_query", "1")])
        );
        assert!(!takes_dedup_token(&exactly_once("18.16.1")));
        assert_eq!(exactly_once("26.9.1.1"), token);
        assert!(takes_dedup_token(&exactly_once("26.9.1.1")));
    }

    fn span(topic: &str, p: i32, first: i64, last: i64, rows: u64) -> ChunkSpan {
        ChunkSpan {
            partition: spate_core::record::PartitionId::new(topic, p),
            first: spate_core::record::Offset(first),
            last: spate_core::record::Offset(last),
            rows,
            epoch: None,
        }
    }

    /// Same spans, same token (pinned: a release that changed it would
    /// break deduplication across an upgrade); any difference, another.
    #[test]
    fn dedup_token_is_stable_and_tells_chunks_apart() {
        let a = vec![span("t", 0, 0, 99, 100), span("t", 1, 0, 99, 100)];
        let t = dedup_token(0, &a).unwrap();
        assert_eq!(t, dedup_token(0, &a.clone()).unwrap());
        assert!(t.starts_with("spate1-0-t-0-0-99-2-"), "{t}");
        assert_eq!(t.len(), "spate1-0-t-0-0-99-2-".len() + 32, "{t}");
        let variants = [
            dedup_token(1, &a),
            dedup_token(0, &[span("t", 0, 0, 99, 100), span("t", 2, 0, 99, 100)]),
            dedup_token(0, &[span("t", 0, 0, 99, 100), span("t", 1, 0, 98, 99)]),
            dedup_token(0, &[span("t", 0, 0, 99, 100), span("u", 1, 0, 99, 100)]),
            dedup_token(0, &a[..1]),
        ];
        for v in variants {
            assert_ne!(v.as_deref(), Some(t.as_str()));
        }
        assert_eq!(dedup_token(0, &[]), None);
    }
}
