//! `--on-truncate delete-all`: a Debezium truncate deletes every row the
//! table holds from the changes before it.
//!
//! The delete is `ALTER TABLE .. DELETE WHERE <offset column> < o`, `o`
//! the truncate's offset and the column the one spate fills with each
//! change's Kafka offset (a `ReplacingMergeTree`'s version, a collapsing
//! table's `_offset`). The chain issues it at a barrier
//! ([`Encoded::Barrier`](spate_core::sink::Encoded::Barrier)): once every
//! row of the partition read before the truncate is acknowledged, so the
//! mutation, which applies to the parts that exist when it is created,
//! finds them all. Rows of later changes have higher offsets and are never
//! touched, so the delete is harmless to repeat: a replay after a crash
//! re-inserts the earlier changes, reaches the truncate again, and deletes
//! them again. The topic has one partition (checked at start): offsets of
//! two partitions do not compare, and Debezium gives a truncate no order
//! against the changes of other partitions.
//!
//! The mutation runs in the background, as ClickHouse runs every
//! mutation; spate does not wait for it to finish (rows of later changes
//! are not in the parts it rewrites). `system.mutations` shows it.

use crate::client::{ident, ChClient};
use crate::sink::insert::shard::Shard;
use std::sync::Arc;
use std::time::Duration;

/// Attempts per replica before the next one is tried (the chain's wait
/// and these stay under the default `--stall-timeout` when the server
/// answers).
const ATTEMPTS: u32 = 2;

/// Issues a truncate's delete on every shard of the table.
pub struct Truncator {
    io: tokio::runtime::Handle,
    shards: Arc<[Arc<Shard<ChClient>>]>,
    /// `db`.`table`, quoted.
    table: String,
    /// A `Replicated` engine: one replica per shard is enough (the
    /// mutation is replicated); otherwise every replica.
    replicated: bool,
}

impl std::fmt::Debug for Truncator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Truncator")
            .field("table", &self.table)
            .field("shards", &self.shards.len())
            .field("replicated", &self.replicated)
            .finish()
    }
}

impl Truncator {
    pub(crate) fn new(
        io: tokio::runtime::Handle,
        shards: Arc<[Arc<Shard<ChClient>>]>,
        (db, table): (&str, &str),
        replicated: bool,
    ) -> Truncator {
        Truncator {
            io,
            shards,
            table: format!("{}.{}", ident(db), ident(table)),
            replicated,
        }
    }

    /// The statement that deletes the rows of changes before `offset`.
    #[must_use]
    pub fn statement(&self, column: &str, offset: i64) -> String {
        format!(
            "ALTER TABLE {} DELETE WHERE {} < {offset}",
            self.table,
            ident(column)
        )
    }

    /// Delete, on every shard, the rows whose `column` is below `offset`.
    /// Blocks the calling (driver) thread; each statement is bounded by
    /// the client's timeout, and each replica is tried [`ATTEMPTS`] times.
    pub fn delete_below(&self, column: &str, offset: i64) -> Result<(), String> {
        let sql = self.statement(column, offset);
        self.io.block_on(async {
            for shard in self.shards.iter() {
                let mut done = false;
                let mut last = String::new();
                for replica in &shard.replicas {
                    match issue(&replica.client, &sql).await {
                        Ok(()) => {
                            tracing::info!(shard = %shard.label, replica = %replica.url, statement = %sql, "truncate: the rows of the changes before it are being deleted (system.mutations)");
                            done = true;
                            if self.replicated {
                                break;
                            }
                        }
                        Err(e) if self.replicated => last = format!("{}: {e}", replica.url),
                        Err(e) => {
                            return Err(format!(
                                "`{sql}` failed on shard {} replica {}: {e}",
                                shard.label, replica.url
                            ))
                        }
                    }
                }
                if !done {
                    return Err(format!(
                        "`{sql}` failed on every replica of shard {}; the last: {last}",
                        shard.label
                    ));
                }
            }
            Ok(())
        })
    }
}

async fn issue(client: &ChClient, sql: &str) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
        }
        match client.execute(sql, &[]).await {
            Ok(()) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}
