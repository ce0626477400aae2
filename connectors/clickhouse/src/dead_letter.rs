//! The dead-letter table (`--dead-letter-table [DB.]TABLE`): a
//! [`DeadLetterSink`] that inserts each letter as one row, in RowBinary,
//! into a MergeTree table it creates when missing:
//!
//! ```sql
//! topic String, partition Int32, offset Int64, timestamp_ms Nullable(Int64),
//! key Nullable(String), value Nullable(String), stage String, error String,
//! column Nullable(String), stored_at DateTime DEFAULT now()
//! ```
//!
//! (a `ReplacingMergeTree` ordered by topic, partition, offset and stage:
//! see [`ChDeadLetters::prepare`] for why a letter is stored once).
//!
//! [`ChDeadLetters::store`] is called from driver threads and from
//! blocking tasks of the sink's runtime; it runs the insert on that
//! runtime (`Handle::block_on`) and returns once ClickHouse confirmed it.
//! A retriable failure (the server is down, frozen, overloaded) is retried
//! with the sink's backoff, until it is stored or the shutdown deadline
//! abandons the wait (`abandon`): the caller waits (backpressure) and no
//! letter is dropped. Only an error retrying cannot fix is returned, or the
//! abandonment, whose message then replays.

use crate::classify::ErrorClass;
use crate::client::{ChClient, ClientError};
use crate::rowbinary::leb128;
use crate::sink::{RetryPolicy, TableRef};
use bytes::Bytes;
use spate_core::health::TransientStalls;
use spate_core::policy::{Abandoned, DeadLetter, DeadLetterSink, StoreError};
use std::sync::Arc;

/// The columns spate writes (in order), as `name type`.
const COLUMNS: &[(&str, &str)] = &[
    ("topic", "String"),
    ("partition", "Int32"),
    ("offset", "Int64"),
    ("timestamp_ms", "Nullable(Int64)"),
    ("key", "Nullable(String)"),
    ("value", "Nullable(String)"),
    ("stage", "String"),
    ("error", "String"),
    ("column", "Nullable(String)"),
    // The original message's headers, in the Kafka engine's shape (a null
    // value as '').
    ("headers.name", "Array(String)"),
    ("headers.value", "Array(String)"),
];

/// A dead-letter table on one server.
pub struct ChDeadLetters {
    client: ChClient,
    table: TableRef,
    io: tokio::runtime::Handle,
    retry: RetryPolicy,
    insert_settings: Vec<(String, String)>,
    /// Send an `insert_deduplication_token` per letter.
    dedup: bool,
    /// Where a letter waiting out an outage is reported (`/readyz`).
    stalls: Option<Arc<TransientStalls>>,
    /// Set at the shutdown deadline: stop waiting.
    abandoned: Abandoned,
}

impl ChDeadLetters {
    /// Create `table` on `client`'s server when missing.
    ///
    /// # Errors
    /// The table could not be created.
    pub async fn prepare(
        client: ChClient,
        table: TableRef,
        retry: RetryPolicy,
        io: tokio::runtime::Handle,
    ) -> Result<Self, ClientError> {
        let columns: Vec<String> = COLUMNS.iter().map(|(n, t)| format!("`{n}` {t}")).collect();
        // A retried insert whose first attempt landed after all (a frozen
        // or slow server) must not store the letter twice: servers with
        // insert deduplication tokens drop the retry (a window on the
        // non-replicated table); on older ones ReplacingMergeTree collapses
        // the copy on merge (`FINAL` reads each letter once).
        let dedup = client.features().insert_deduplication_token;
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS `{}`.`{}` ({}, `stored_at` DateTime DEFAULT now()) \
             ENGINE = ReplacingMergeTree() ORDER BY (`topic`, `partition`, `offset`, `stage`){}",
            table.db,
            table.table,
            columns.join(", "),
            if dedup {
                " SETTINGS non_replicated_deduplication_window = 10000"
            } else {
                ""
            }
        );
        client.execute(&sql, &[]).await?;
        Ok(Self {
            table,
            io,
            retry,
            // The same settings as the sink's inserts: done when the answer
            // comes (no async_insert, wait_end_of_query), as the server
            // version allows.
            insert_settings: crate::sink::dead_letter_insert_settings(&client),
            dedup,
            client,
            stalls: None,
            abandoned: Abandoned::default(),
        })
    }

    /// The same table through the same client, for another pipeline:
    /// nothing is asked of the server (the table was made by `self`'s
    /// [`prepare`](Self::prepare)); its stalls and abandonment are its own.
    #[must_use]
    pub fn sibling(&self) -> Self {
        Self {
            client: self.client.clone(),
            table: self.table.clone(),
            io: self.io.clone(),
            retry: self.retry,
            insert_settings: self.insert_settings.clone(),
            dedup: self.dedup,
            stalls: None,
            abandoned: Abandoned::default(),
        }
    }

    /// Report a letter that keeps failing to `stalls`, so `/readyz` turns
    /// 503 naming this table once it has not cleared for `--stall-timeout`
    /// (the pipeline waits for it meanwhile).
    #[must_use]
    pub fn with_stalls(mut self, stalls: Arc<TransientStalls>) -> Self {
        self.stalls = Some(stalls);
        self
    }
}

/// One letter as a RowBinary row of [`COLUMNS`].
fn row(letter: &DeadLetter) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &[u8]) {
        varint(out, s.len());
        out.extend_from_slice(s);
    }
    fn nullable(out: &mut Vec<u8>, s: Option<&[u8]>) {
        match s {
            None => out.push(1),
            Some(s) => {
                out.push(0);
                string(out, s);
            }
        }
    }
    let mut out = Vec::with_capacity(64 + letter.value.as_ref().map_or(0, Vec::len));
    string(&mut out, letter.topic.as_bytes());
    out.extend_from_slice(&letter.partition.to_le_bytes());
    out.extend_from_slice(&letter.offset.to_le_bytes());
    match letter.timestamp_ms {
        None => out.push(1),
        Some(t) => {
            out.push(0);
            out.extend_from_slice(&t.to_le_bytes());
        }
    }
    nullable(&mut out, letter.key.as_deref());
    nullable(&mut out, letter.value.as_deref());
    string(&mut out, letter.stage.as_str().as_bytes());
    string(&mut out, letter.error.as_bytes());
    nullable(&mut out, letter.column.as_deref().map(str::as_bytes));
    let headers = &letter.original_headers;
    for pick in [0, 1] {
        varint(&mut out, headers.len());
        for (k, v) in headers {
            let s = if pick == 0 {
                &k[..]
            } else {
                v.as_deref().unwrap_or_default()
            };
            string(&mut out, s);
        }
    }
    out
}

/// A length in RowBinary (of a string or an array): LEB128.
fn varint(out: &mut Vec<u8>, n: usize) {
    leb128::put(out, n as u64);
}

impl DeadLetterSink for ChDeadLetters {
    fn store(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let body = Bytes::from(row(letter));
        let columns: Vec<String> = COLUMNS.iter().map(|(n, _)| (*n).to_owned()).collect();
        let mut settings = self.insert_settings.clone();
        if self.dedup {
            let token = format!(
                "spate-dead-letter/{}/{}/{}/{}",
                letter.topic,
                letter.partition,
                letter.offset,
                letter.stage.as_str()
            );
            settings.push(("insert_deduplication_token".into(), token));
        }
        let who = format!("dead-letter {}", self.describe());
        let mut attempt = 0u32;
        let done = loop {
            if self.abandoned.is_set() {
                break Err(StoreError::Abandoned);
            }
            attempt += 1;
            let insert = self.client.insert(
                &self.table.db,
                &self.table.table,
                &columns,
                "RowBinary",
                body.clone(),
                &settings,
            );
            match self.io.block_on(insert) {
                Ok(()) => break Ok(()),
                Err(e) if e.class == ErrorClass::Fatal => break Err(StoreError::refused(e)),
                Err(e) => {
                    let delay = self.retry.delay(attempt, rand::random::<f64>());
                    tracing::warn!(table = %self.table, attempt, error = %e, backoff_ms = delay.as_millis() as u64, "dead letter not stored yet; retrying");
                    if let Some(s) = &self.stalls {
                        s.failing(&who, &e.to_string());
                    }
                    if !self.abandoned.pause(delay) {
                        break Err(StoreError::Abandoned);
                    }
                }
            }
        };
        if let Some(s) = &self.stalls {
            s.cleared(&who);
        }
        done
    }

    fn describe(&self) -> String {
        format!("table {}", self.table)
    }

    fn abandon(&self) {
        self.abandoned.set();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spate_core::policy::Stage;

    #[test]
    fn a_letter_is_one_rowbinary_row_of_the_columns() {
        let letter = DeadLetter {
            topic: "t".into(),
            partition: 2,
            offset: 300,
            timestamp_ms: None,
            key: None,
            value: Some(vec![b'x'; 200]),
            stage: Stage::Insert,
            error: "e".into(),
            column: Some("a".into()),
            original_headers: vec![(b"h".to_vec(), Some(b"v".to_vec())), (b"n".to_vec(), None)],
        };
        let r = row(&letter);
        let mut want = vec![1, b't'];
        want.extend_from_slice(&2i32.to_le_bytes());
        want.extend_from_slice(&300i64.to_le_bytes());
        want.extend_from_slice(&[1, 1, 0, 0xc8, 0x01]);
        want.extend_from_slice(&[b'x'; 200]);
        want.extend_from_slice(&[6]);
        want.extend_from_slice(b"insert");
        want.extend_from_slice(&[1, b'e', 0, 1, b'a']);
        // headers.name ['h', 'n'], headers.value ['v', ''].
        want.extend_from_slice(&[2, 1, b'h', 1, b'n', 2, 1, b'v', 0]);
        assert_eq!(r, want);
    }
}
