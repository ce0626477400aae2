//! `Ch`: a ClickHouse connection with blocking helpers for tests.

use super::env::{block_on, unique, wait_for};
use spate_clickhouse::ChClient;
use std::time::Duration;

/// A ClickHouse connection for the test, with blocking helpers.
pub struct Ch {
    pub client: ChClient,
    pub url: String,
}

impl Ch {
    /// Connect (retrying for up to 30 s).
    pub fn connect(url: &str) -> Ch {
        let client = wait_for(
            "ClickHouse to answer",
            Duration::from_secs(30),
            Duration::from_millis(200),
            || block_on(ChClient::connect(url, None, None)).map_err(|e| e.to_string()),
        );
        Ch {
            client,
            url: url.to_owned(),
        }
    }

    /// Run a statement; panics on error.
    pub fn exec(&self, sql: &str) {
        self.exec_with(sql, &[]);
    }

    /// Run a statement with settings; panics on error.
    pub fn exec_with(&self, sql: &str, settings: &[(&str, &str)]) {
        block_on(self.client.execute(sql, settings))
            .unwrap_or_else(|e| panic!("ClickHouse: {sql}: {e}"));
    }

    /// Run an idempotent statement (`CREATE TABLE IF NOT EXISTS` of a
    /// `Replicated*` table), retried for up to `within` while it fails: a
    /// server whose ZooKeeper session expired (after another test froze or
    /// restarted it) refuses or hangs replicated DDL until it reconnects.
    pub fn exec_idempotent(&self, sql: &str, within: std::time::Duration) {
        super::env::wait_for(
            &format!("ClickHouse to run {sql}"),
            within,
            std::time::Duration::from_millis(500),
            || block_on(self.client.execute(sql, &[])).map_err(|e| e.to_string()),
        );
    }

    /// Raw output of `sql` in `format`, or the error text.
    pub fn try_text(&self, sql: &str, format: &str) -> Result<String, String> {
        block_on(self.client.fetch_text(sql, format)).map_err(|e| e.to_string())
    }

    /// Raw output of `sql` in `format`; panics on error.
    pub fn text(&self, sql: &str, format: &str) -> String {
        self.try_text(sql, format)
            .unwrap_or_else(|e| panic!("ClickHouse: {sql}: {e}"))
    }

    /// A query returning one unsigned integer, or the error text.
    pub fn try_u64(&self, sql: &str) -> Result<u64, String> {
        let t = self.try_text(sql, "TabSeparated")?;
        t.trim()
            .parse::<u64>()
            .map_err(|e| format!("{sql}: not a number: {t:?}: {e}"))
    }

    /// Wait (up to `within`) until `table` holds at least `rows` rows; the
    /// count then.
    pub fn wait_rows(&self, table: &str, rows: u64, within: Duration) -> u64 {
        wait_for(
            &format!("at least {rows} rows in {table}"),
            within,
            Duration::from_millis(20),
            || match self.try_u64(&format!("SELECT count() FROM {table}")) {
                Ok(n) if n >= rows => Ok(n),
                Ok(n) => Err(format!("{n} rows")),
                Err(e) => Err(e),
            },
        )
    }

    /// A query returning one unsigned integer; panics on error.
    pub fn u64(&self, sql: &str) -> u64 {
        self.try_u64(sql)
            .unwrap_or_else(|e| panic!("ClickHouse: {e}"))
    }

    /// Rows of tab-separated unsigned integers.
    pub fn u64_rows(&self, sql: &str) -> Vec<Vec<u64>> {
        self.text(sql, "TabSeparated")
            .lines()
            .map(|l| {
                l.split('\t')
                    .map(|f| {
                        f.parse::<u64>()
                            .unwrap_or_else(|e| panic!("{sql}: {l:?}: {e}"))
                    })
                    .collect()
            })
            .collect()
    }

    /// A fresh database named after `prefix` with one table `t (n UInt64,
    /// s String, _partition UInt32, _offset UInt64)` that drops repeated
    /// blocks, as exactly-once needs: on a current server (`modern`) a
    /// MergeTree with `non_replicated_deduplication_window = window`; on
    /// 18.16 a ReplicatedMergeTree on the suite's ZooKeeper, with
    /// `replicated_deduplication_window = replicated_window` if given (else
    /// the server's default). Returns (db, `db.t`).
    pub fn deduplicating_table(
        &self,
        modern: bool,
        prefix: &str,
        window: u32,
        replicated_window: Option<u32>,
    ) -> (String, String) {
        let db = self.fresh_db(prefix);
        let table = format!("{db}.t");
        let engine = if modern {
            format!(
                "MergeTree() ORDER BY (_partition, _offset) SETTINGS non_replicated_deduplication_window = {window}"
            )
        } else {
            let settings = replicated_window
                .map(|w| format!(" SETTINGS replicated_deduplication_window = {w}"))
                .unwrap_or_default();
            format!(
                "ReplicatedMergeTree('/clickhouse/tables/{db}/t', 'r1') ORDER BY (_partition, _offset){settings}"
            )
        };
        self.exec(&format!(
            "CREATE TABLE {table} (n UInt64, s String, _partition UInt32, _offset UInt64) ENGINE = {engine}"
        ));
        (db, table)
    }

    /// Create a fresh database named after `prefix`; returns its name.
    pub fn fresh_db(&self, prefix: &str) -> String {
        let db = unique(prefix);
        self.exec(&format!("CREATE DATABASE {db}"));
        db
    }

    /// A fresh database holding `t (n UInt64, s String, _partition UInt32,
    /// _offset UInt64)`, a MergeTree (its rows survive a server restart)
    /// ordered by (_partition, _offset). Returns `db.t`.
    pub fn fresh_offsets_table(&self, prefix: &str) -> String {
        let table = format!("{}.t", self.fresh_db(prefix));
        self.exec(&format!(
            "CREATE TABLE {table} (n UInt64, s String, _partition UInt32, _offset UInt64) \
             ENGINE = MergeTree() ORDER BY (_partition, _offset)"
        ));
        table
    }

    /// Drop the database of `db.table` (tidying up after a test).
    pub fn drop_database_of(&self, table: &str) {
        let db = table.split('.').next().expect("db.table");
        self.exec(&format!("DROP DATABASE {db}"));
    }

    /// Wait until ClickHouse answers `SELECT 1` (fresh connections).
    pub fn wait_up(url: &str, timeout: Duration) {
        wait_for(
            "ClickHouse to answer",
            timeout,
            Duration::from_millis(200),
            || {
                let c = block_on(ChClient::connect(url, None, None)).map_err(|e| e.to_string())?;
                block_on(c.ping()).map_err(|e| e.to_string())
            },
        );
    }
}
