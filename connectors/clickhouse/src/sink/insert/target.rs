//! [`InsertTarget`]: the one HTTP attempt an insert worker makes, behind a
//! small trait (an insert of pre-encoded bytes, and a ping), so the worker
//! and the probe run against a scripted fake in tests. [`ChClient`] is the
//! real implementation. Called from insert workers and the readiness probe
//! (tokio tasks); [`InsertQuery`] is built once per sink at start.

use crate::client::{ChClient, ClientError, InsertError};
use crate::schema::Column;
use crate::sink::insert::outcome::Prepared;
use bytes::Bytes;
use std::future::Future;
use std::time::Duration;

/// The statement every insert of one sink sends: `INSERT INTO db.table
/// (columns) FORMAT format`, with `settings` as query settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InsertQuery {
    pub(crate) db: String,
    pub(crate) table: String,
    pub(crate) columns: Vec<String>,
    pub(crate) format: &'static str,
    pub(crate) settings: Vec<(String, String)>,
}

/// One replica, as an insert worker sees it.
pub(crate) trait InsertTarget: Send + Sync + 'static {
    /// Send one pre-encoded batch with `extra` settings on top of the
    /// query's, giving up after `timeout`; `Ok` only once the server
    /// confirmed it.
    fn insert_bytes(
        &self,
        query: &InsertQuery,
        body: Bytes,
        extra: &[(String, String)],
        timeout: Duration,
    ) -> impl Future<Output = Result<(), InsertError>> + Send;

    /// Send the bodies `bodies` yields as one request (a streamed insert,
    /// `crate::sink::worker::stream`), ended when `bodies` closes; `Ok`
    /// only once the server confirmed all of it. `timeout` bounds each
    /// send and the wait for the answer. By default the bodies are
    /// gathered and sent at once with [`insert_bytes`](Self::insert_bytes)
    /// (what the tests' scripted replicas record as one attempt).
    fn insert_stream(
        &self,
        query: &InsertQuery,
        mut bodies: tokio::sync::mpsc::Receiver<Prepared>,
        extra: &[(String, String)],
        timeout: Duration,
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        let (query, extra) = (query.clone(), extra.to_vec());
        async move {
            let mut all = Vec::new();
            while let Some(body) = bodies.recv().await {
                all.extend_from_slice(&body.bytes);
            }
            self.insert_bytes(&query, Bytes::from(all), &extra, timeout)
                .await
        }
    }

    /// `SELECT 1`, for readiness.
    fn ping(&self) -> impl Future<Output = Result<(), ClientError>> + Send;

    /// The columns of `db.table` as this replica has them now (the
    /// insert's type guard, `crate::sink::schema_change::guard`).
    fn columns(
        &self,
        db: &str,
        table: &str,
    ) -> impl Future<Output = Result<Vec<Column>, ClientError>> + Send;
}

impl InsertTarget for ChClient {
    fn insert_bytes(
        &self,
        query: &InsertQuery,
        body: Bytes,
        extra: &[(String, String)],
        timeout: Duration,
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        let mut settings = query.settings.clone();
        settings.extend_from_slice(extra);
        async move {
            let sql =
                crate::client::insert_sql(&query.db, &query.table, &query.columns, query.format);
            self.insert_sql_within(sql, body, &settings, timeout).await
        }
    }

    fn insert_stream(
        &self,
        query: &InsertQuery,
        bodies: tokio::sync::mpsc::Receiver<Prepared>,
        extra: &[(String, String)],
        timeout: Duration,
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        let mut settings = query.settings.clone();
        settings.extend_from_slice(extra);
        let sql = crate::client::insert_sql(&query.db, &query.table, &query.columns, query.format);
        async move {
            self.insert_stream_within(sql, bodies, &settings, timeout)
                .await
        }
    }

    fn ping(&self) -> impl Future<Output = Result<(), ClientError>> + Send {
        ChClient::ping(self)
    }

    fn columns(
        &self,
        db: &str,
        table: &str,
    ) -> impl Future<Output = Result<Vec<Column>, ClientError>> + Send {
        self.describe(db, table)
    }
}
