//! [`ChClient`]: the HTTP connection to ClickHouse.
//!
//! Wraps `clickhouse::Client` (cheap to clone, shares one connection pool).
//! Start-up code calls [`ChClient::connect`] and [`ChClient::describe`];
//! insert workers (tokio tasks) call [`ChClient::insert`] concurrently; the
//! readiness probe calls [`ChClient::ping`]. Every call is bounded by a
//! timeout from [`ChClientOptions`].
//!
//! Every client of a sink speaks through one [`Transport`] (the shared
//! connection pool and its TLS settings, see [`crate::transport`]).
//!
//! Validation of the `clickhouse` crate is off: spate's schema is only known
//! at run time and servers as old as 18.16 must work.

use crate::classify::{classify, code_remedy, parse_code, ErrorClass, Remedy};
use crate::schema::{Column, DefaultKind, ServerFeatures, VersionError};
use crate::transport::{describe_tls, Secret, SharedSecret, Transport};
use crate::types::{parse_type, TypeError};
use bytes::Bytes;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

/// Most bytes of an insert body handed to the `clickhouse` crate in one
/// `send`. With LZ4 the crate compresses each `send` into a buffer of the
/// worst-case compressed size, zero-filled (so resident) and kept whole
/// after truncation to the compressed length: the whole body in one `send`
/// made a second body-sized copy per insert in flight, however well it
/// compressed. In slices, the connection holds a bounded number of small
/// buffers instead (see [`send_buffer_bytes`]); ClickHouse reads the body
/// as a stream of compressed blocks, so the slices need not end on rows.
/// Below glibc's mmap threshold spate sets (128 KiB), so the buffers are
/// reused from the heap rather than mapped and unmapped each time.
pub const SEND_SLICE: usize = 64 << 10;

/// Slices' buffers the client may hold at once for one insert: hyper
/// queues up to 16 body chunks before it writes, plus the body channel's
/// slot and the slice being compressed.
const SEND_SLICES_HELD: usize = 18;

/// The most bytes the client holds for one insert of a `body_len`-byte
/// body, besides the body itself: a bounded number of compressed slices
/// (LZ4's worst case is the input plus 1/255, and the block's header).
#[must_use]
pub fn send_buffer_bytes(body_len: usize) -> usize {
    let slice = SEND_SLICE + SEND_SLICE / 255 + 64;
    body_len.min(SEND_SLICES_HELD * slice)
}

/// Timeouts for [`ChClient`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChClientOptions {
    /// Bound on `connect`, `describe` and `ping` round trips.
    pub connect_timeout: Duration,
    /// Bound on sending an insert body and, separately, on waiting for the
    /// server's answer to it. Keep below Kafka's `max.poll.interval.ms`.
    pub insert_timeout: Duration,
    /// Compress insert bodies with LZ4 (ClickHouse's native block
    /// compression). Off, the RowBinary goes as is: less CPU on both sides,
    /// about 3× more bytes on the wire.
    pub lz4: bool,
}

impl Default for ChClientOptions {
    fn default() -> Self {
        ChClientOptions {
            connect_timeout: Duration::from_secs(10),
            insert_timeout: Duration::from_secs(60),
            lz4: true,
        }
    }
}

/// A failed non-insert request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The request failed (network, timeout or server error).
    #[error("{what}: {message}")]
    Request {
        /// What spate was doing.
        what: &'static str,
        /// Retry or not.
        class: ErrorClass,
        /// ClickHouse error code, if the server sent one.
        code: Option<u32>,
        /// Details.
        message: String,
    },
    /// The TLS handshake failed or the TLS settings are unusable: the
    /// certificates or the URL need fixing, so it is not retried.
    #[error("{what}: {message}")]
    Tls {
        /// What spate was doing.
        what: &'static str,
        /// The TLS failure and what to do about it.
        message: String,
    },
    /// `SELECT version()` returned something unparsable.
    #[error(transparent)]
    Version(#[from] VersionError),
    /// The target table does not exist (or has no columns visible to us).
    #[error("table `{db}.{table}` does not exist or has no columns")]
    UnknownTable {
        /// Database.
        db: String,
        /// Table.
        table: String,
    },
    /// A column has a type spate does not understand.
    #[error("column `{column}`: {source}")]
    ColumnType {
        /// Column name.
        column: String,
        /// Parser error.
        #[source]
        source: TypeError,
    },
}

impl ClientError {
    /// Retry or not.
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            ClientError::Request { class, .. } => *class,
            _ => ErrorClass::Fatal,
        }
    }

    /// Whether the user's configuration (not an outage) is at fault: what
    /// retrying at start cannot mend, so the start fails at once (exit 2).
    #[must_use]
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            ClientError::UnknownTable { .. }
                | ClientError::ColumnType { .. }
                | ClientError::Tls { .. }
                // UNKNOWN_USER, WRONG_PASSWORD, REQUIRED_PASSWORD,
                // AUTHENTICATION_FAILED: the credentials need fixing (the
                // server may send them as retriable 500s).
                | ClientError::Request {
                    code: Some(192 | 193 | 194 | 516),
                    ..
                }
        )
    }
}

/// A failed insert, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("insert failed ({class:?}{}): {message}", code.map(|c| format!(", code {c}")).unwrap_or_default())]
pub struct InsertError {
    /// Retry or not.
    pub class: ErrorClass,
    /// ClickHouse error code, if the server sent one.
    pub code: Option<u32>,
    /// Details (server message or transport error).
    pub message: String,
}

impl InsertError {
    /// What this failure calls for, from the one table in
    /// [`crate::classify`]: give up, retry here, or fail over to the
    /// shard's next replica. A failure without a server code (no answer,
    /// a timeout, a cut connection, a 5xx from a proxy) fails over.
    #[must_use]
    pub fn remedy(&self) -> Remedy {
        match (self.class, self.code) {
            (ErrorClass::Fatal, _) => Remedy::GiveUp,
            (ErrorClass::Retriable, None) => Remedy::Failover,
            (ErrorClass::Retriable, Some(code)) => match code_remedy(code, &self.message) {
                Some(Remedy::Failover) => Remedy::Failover,
                _ => Remedy::Retry,
            },
        }
    }

    /// Whether the server blamed rows of the batch (a data error: see
    /// [`crate::classify::is_row_error`]): bisecting the batch isolates them.
    #[must_use]
    pub fn is_row_error(&self) -> bool {
        self.class == ErrorClass::Fatal
            && self
                .code
                .is_some_and(|c| crate::classify::is_row_error(c, &self.message))
    }

    /// Whether the replica itself looks unreachable or unable to take
    /// writes, so the insert should move to the shard's next replica.
    /// Errors about the data are never failed over.
    #[must_use]
    pub fn is_replica_failure(&self) -> bool {
        self.remedy() == Remedy::Failover
    }
}

/// Map an error of the `clickhouse` crate to (class, code, message).
///
/// Pitfall: the crate folds the HTTP status into `BadResponse(String)` and
/// only keeps it when the body is empty (`"500 Internal Server Error"`). For
/// a body with `Code: N` the status is lost; ClickHouse answers most
/// exceptions with 500, so 500 is assumed and the code decides.
fn map_error(e: &clickhouse::error::Error) -> (ErrorClass, Option<u32>, String) {
    use clickhouse::error::Error as E;
    let message = e.to_string();
    match e {
        E::BadResponse(body) => {
            let status = body
                .get(..3)
                .and_then(|s| s.parse::<u16>().ok())
                .filter(|s| (100..600).contains(s));
            (
                classify(Some(status.unwrap_or(500)), body),
                parse_code(body),
                body.clone(),
            )
        }
        E::Network(source) => match describe_tls(source.as_ref()) {
            Some(tls) => (ErrorClass::Retriable, None, tls),
            None => (ErrorClass::Retriable, None, chain(e)),
        },
        E::TimedOut | E::Other(_) | E::Custom(_) => (ErrorClass::Retriable, None, message),
        _ => (ErrorClass::Fatal, parse_code(&message), message),
    }
}

/// `e` and its causes, `: `-joined, each said once (hyper's own line is
/// only "client error (Connect)").
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = cause.source();
    }
    line
}

fn request_error(what: &'static str, e: &clickhouse::error::Error) -> ClientError {
    if let clickhouse::error::Error::Network(source) = e {
        if let Some(message) = describe_tls(source.as_ref()) {
            return ClientError::Tls { what, message };
        }
    }
    let (class, code, message) = map_error(e);
    ClientError::Request {
        what,
        class,
        code,
        message,
    }
}

pub(crate) fn timeout_error(what: &'static str, after: Duration) -> ClientError {
    ClientError::Request {
        what,
        class: ErrorClass::Retriable,
        code: None,
        message: format!("timed out after {after:?}"),
    }
}

/// Quote an identifier with backticks.
pub(crate) fn ident(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('`');
    for c in name.chars() {
        if c == '`' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('`');
    s
}

/// `INSERT INTO db.table (cols) FORMAT fmt`.
pub(crate) fn insert_sql(db: &str, table: &str, columns: &[String], format: &str) -> String {
    let mut sql = format!("INSERT INTO {}.{} (", ident(db), ident(table));
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&ident(c));
    }
    // Infallible: writing to a String.
    let _ = write!(sql, ") FORMAT {format}");
    sql
}

/// A connection to one ClickHouse server (HTTP interface).
#[derive(Clone, Debug)]
pub struct ChClient {
    inner: clickhouse::Client,
    /// Sent with every request as it is made (it may rotate); `inner`
    /// holds none.
    password: Option<SharedSecret>,
    features: ServerFeatures,
    version: String,
    opts: ChClientOptions,
}

impl ChClient {
    /// Connect with default timeouts; runs `SELECT version()`.
    pub async fn connect(
        url: &str,
        user: Option<&str>,
        password: Option<&str>,
    ) -> Result<ChClient, ClientError> {
        Self::connect_with(url, user, password, ChClientOptions::default()).await
    }

    /// Connect with explicit timeouts over a transport of its own (the
    /// system's root certificates, no client certificate); runs `SELECT
    /// version()`.
    pub async fn connect_with(
        url: &str,
        user: Option<&str>,
        password: Option<&str>,
        opts: ChClientOptions,
    ) -> Result<ChClient, ClientError> {
        let transport = Transport::system().map_err(|e| ClientError::Tls {
            what: "TLS settings",
            message: e.to_string(),
        })?;
        let password = password.map(|p| SharedSecret::new(Secret::new(p)));
        Self::connect_via(&transport, url, user, password.as_ref(), opts).await
    }

    /// Connect over `transport` (shared pool, TLS settings) with explicit
    /// timeouts; runs `SELECT version()`. Every request sends the password
    /// `password` holds when it is made.
    pub async fn connect_via(
        transport: &Transport,
        url: &str,
        user: Option<&str>,
        password: Option<&SharedSecret>,
        opts: ChClientOptions,
    ) -> Result<ChClient, ClientError> {
        let mut inner = transport
            .client()
            .with_url(url)
            .with_validation(false)
            .with_compression(if opts.lz4 {
                clickhouse::Compression::Lz4
            } else {
                clickhouse::Compression::None
            });
        if let Some(u) = user {
            inner = inner.with_user(u);
        }
        let query = match password {
            Some(p) => inner.clone().with_password(p.current().expose()),
            None => inner.clone(),
        }
        .query("SELECT version()")
        .fetch_one::<String>();
        let version = tokio::time::timeout(opts.connect_timeout, query)
            .await
            .map_err(|_| timeout_error("SELECT version()", opts.connect_timeout))?
            .map_err(|e| request_error("SELECT version()", &e))?;
        let features = ServerFeatures::from_version(&version)?;
        Ok(ChClient {
            inner,
            password: password.cloned(),
            features,
            version,
            opts,
        })
    }

    /// A client for another server of the same cluster (a replica or
    /// another shard), with the same credentials, timeouts and assumed
    /// features. Makes no request: the server may be down right now.
    #[must_use]
    pub fn sibling(&self, url: &str) -> ChClient {
        ChClient {
            inner: self.inner.clone().with_url(url),
            ..self.clone()
        }
    }

    /// This client sending `settings` with every statement (on top of
    /// those a statement sets itself).
    #[must_use]
    pub(crate) fn with_settings(&self, settings: &[(String, String)]) -> ChClient {
        let mut inner = self.inner.clone();
        for (k, v) in settings {
            inner = inner.with_setting(k.clone(), v.clone());
        }
        ChClient {
            inner,
            ..self.clone()
        }
    }

    /// The client for one request: `inner` with the password now in force.
    fn http(&self) -> Cow<'_, clickhouse::Client> {
        match &self.password {
            Some(p) => Cow::Owned(self.inner.clone().with_password(p.current().expose())),
            None => Cow::Borrowed(&self.inner),
        }
    }

    /// What the server supports.
    #[must_use]
    pub fn features(&self) -> ServerFeatures {
        self.features
    }

    /// The server's `version()`.
    #[must_use]
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The columns of `db.table` in table order, from `system.columns`.
    pub async fn describe(&self, db: &str, table: &str) -> Result<Vec<Column>, ClientError> {
        const WHAT: &str = "reading system.columns";
        let order = if self.features.columns_position {
            " ORDER BY position"
        } else {
            ""
        };
        let sql = format!("SELECT name, type, default_kind, default_expression FROM system.columns WHERE database = ? AND table = ?{order}");
        let query = self
            .http()
            .query(&sql)
            .bind(db)
            .bind(table)
            .fetch_all::<(String, String, String, String)>();
        let rows = tokio::time::timeout(self.opts.connect_timeout, query)
            .await
            .map_err(|_| timeout_error(WHAT, self.opts.connect_timeout))?
            .map_err(|e| request_error(WHAT, &e))?;
        if rows.is_empty() {
            return Err(ClientError::UnknownTable {
                db: db.to_owned(),
                table: table.to_owned(),
            });
        }
        rows.into_iter()
            .map(|(name, ty, kind, expression)| {
                let ty = parse_type(&ty).map_err(|source| ClientError::ColumnType {
                    column: name.clone(),
                    source,
                })?;
                Ok(Column {
                    name,
                    ty,
                    default_kind: DefaultKind::parse(&kind),
                    default_expression: expression,
                })
            })
            .collect()
    }

    /// Send one pre-encoded batch: `INSERT INTO db.table (columns) FORMAT
    /// format` with `body` as the data. `settings` are sent as query
    /// settings (set every insert setting spate relies on explicitly).
    pub async fn insert(
        &self,
        db: &str,
        table: &str,
        columns: &[String],
        format: &str,
        body: Bytes,
        settings: &[(String, String)],
    ) -> Result<(), InsertError> {
        let sql = insert_sql(db, table, columns, format);
        self.insert_sql_within(sql, body, settings, self.opts.insert_timeout)
            .await
    }

    /// Send `body` for the statement `sql` (see [`insert`](Self::insert))
    /// with this attempt's own timeout: insert workers grow it after an
    /// attempt timed out.
    pub(crate) async fn insert_sql_within(
        &self,
        sql: String,
        body: Bytes,
        settings: &[(String, String)],
        timeout: Duration,
    ) -> Result<(), InsertError> {
        let mut insert = self.open_insert(sql, settings, timeout);
        if body.is_empty() {
            insert.send(Bytes::new()).await.map_err(insert_error)?;
        }
        send_sliced(&mut insert, &body).await?;
        insert.end().await.map_err(insert_error)
    }

    /// Stream the bodies `bodies` yields into one request of the statement
    /// `sql`, in order, as they come; the request ends when `bodies` is
    /// closed, and `Ok` only once the server confirmed the whole of it.
    /// `timeout` bounds each send (a server that stops reading) and the
    /// wait for the answer, not the time between bodies: the caller decides
    /// how long the request stays open. See `crate::sink::worker::stream`.
    pub(crate) async fn insert_stream_within<B: AsRef<Bytes> + Send>(
        &self,
        sql: String,
        mut bodies: tokio::sync::mpsc::Receiver<B>,
        settings: &[(String, String)],
        timeout: Duration,
    ) -> Result<(), InsertError> {
        let mut insert = self.open_insert(sql, settings, timeout);
        // `held` is dropped once sent (its buffer may go back to its
        // worker).
        while let Some(held) = bodies.recv().await {
            send_sliced(&mut insert, held.as_ref()).await?;
        }
        insert.end().await.map_err(insert_error)
    }

    /// An insert of `sql` with `settings`, each send and the wait for the
    /// answer bounded by `timeout`; nothing is sent yet.
    fn open_insert(
        &self,
        sql: String,
        settings: &[(String, String)],
        timeout: Duration,
    ) -> clickhouse::insert_formatted::InsertFormatted {
        let t = Some(timeout);
        let mut insert = self.http().insert_formatted_with(sql).with_timeouts(t, t);
        for (k, v) in settings {
            insert = insert.with_setting(k.clone(), v.clone());
        }
        insert
    }

    /// `SELECT 1`, for readiness.
    pub async fn ping(&self) -> Result<(), ClientError> {
        let query = self.http().query("SELECT 1").fetch_one::<u8>();
        let one = tokio::time::timeout(self.opts.connect_timeout, query)
            .await
            .map_err(|_| timeout_error("SELECT 1", self.opts.connect_timeout))?
            .map_err(|e| request_error("SELECT 1", &e))?;
        if one == 1 {
            Ok(())
        } else {
            Err(ClientError::Request {
                what: "SELECT 1",
                class: ErrorClass::Retriable,
                code: None,
                message: format!("unexpected answer {one}"),
            })
        }
    }

    /// Run a statement (DDL, settings); for tests and tooling.
    pub async fn execute(&self, sql: &str, settings: &[(&str, &str)]) -> Result<(), ClientError> {
        let mut q = self.http().query(sql);
        for (k, v) in settings {
            q = q.with_setting(*k, *v);
        }
        tokio::time::timeout(self.opts.insert_timeout, q.execute())
            .await
            .map_err(|_| timeout_error("executing a statement", self.opts.insert_timeout))?
            .map_err(|e| request_error("executing a statement", &e))
    }

    /// Fetch the raw output of a query in `format` (e.g. `JSONEachRow`);
    /// for tests and tooling.
    pub async fn fetch_text(&self, sql: &str, format: &str) -> Result<String, ClientError> {
        self.fetch_text_within(sql, format, self.opts.insert_timeout)
            .await
    }

    /// [`Self::fetch_text`] with its own timeout.
    pub async fn fetch_text_within(
        &self,
        sql: &str,
        format: &str,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        let fetch = async {
            let mut cursor = self.http().query(sql).fetch_bytes(format)?;
            cursor.collect().await
        };
        let bytes = tokio::time::timeout(timeout, fetch)
            .await
            .map_err(|_| timeout_error("fetching", timeout))?
            .map_err(|e| request_error("fetching", &e))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Send `body` into `insert` in slices (see [`SEND_SLICE`]).
async fn send_sliced(
    insert: &mut clickhouse::insert_formatted::InsertFormatted,
    body: &Bytes,
) -> Result<(), InsertError> {
    let mut at = 0;
    while at < body.len() {
        let end = (at + SEND_SLICE).min(body.len());
        insert
            .send(body.slice(at..end))
            .await
            .map_err(insert_error)?;
        at = end;
    }
    Ok(())
}

/// An insert's failure, classified.
fn insert_error(e: clickhouse::error::Error) -> InsertError {
    let (class, code, message) = map_error(&e);
    InsertError {
        class,
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_insert_sql() {
        let cols = vec!["a".to_owned(), "we`ird".to_owned()];
        assert_eq!(
            insert_sql("db", "t", &cols, "RowBinary"),
            "INSERT INTO `db`.`t` (`a`, `we\\`ird`) FORMAT RowBinary"
        );
    }

    /// Credentials refused are the configuration's fault whatever class
    /// the server's status gave them; an outage is not.
    #[test]
    fn refused_credentials_are_config_errors() {
        let request = |code, class| ClientError::Request {
            what: "test",
            class,
            code,
            message: String::new(),
        };
        for code in [192, 193, 194, 516] {
            assert!(
                request(Some(code), ErrorClass::Retriable).is_config(),
                "{code}"
            );
        }
        assert!(
            !request(None, ErrorClass::Retriable).is_config(),
            "a timeout"
        );
        assert!(
            !request(Some(202), ErrorClass::Retriable).is_config(),
            "too many queries"
        );
        assert!(ClientError::Tls {
            what: "test",
            message: String::new()
        }
        .is_config());
    }

    #[test]
    fn maps_crate_errors() {
        use clickhouse::error::Error as E;
        let (c, code, _) = map_error(&E::BadResponse(
            "Code: 60, e.displayText() = DB::Exception: Table x.y doesn't exist".into(),
        ));
        assert_eq!((c, code), (ErrorClass::Fatal, Some(60)));
        let (c, code, _) = map_error(&E::BadResponse("Code: 241, Memory limit".into()));
        assert_eq!((c, code), (ErrorClass::Retriable, Some(241)));
        let (c, _, _) = map_error(&E::BadResponse("503 Service Unavailable".into()));
        assert_eq!(c, ErrorClass::Retriable);
        let (c, _, _) = map_error(&E::BadResponse("403 Forbidden".into()));
        assert_eq!(c, ErrorClass::Fatal);
        let (c, _, _) = map_error(&E::TimedOut);
        assert_eq!(c, ErrorClass::Retriable);
        let (c, _, _) = map_error(&E::Network("reset".into()));
        assert_eq!(c, ErrorClass::Retriable);
    }

    #[test]
    fn only_replica_failures_fail_over() {
        let e = |class, code| InsertError {
            class,
            code,
            message: String::new(),
        };
        assert!(e(ErrorClass::Retriable, None).is_replica_failure());
        assert!(e(ErrorClass::Retriable, Some(210)).is_replica_failure());
        assert!(e(ErrorClass::Retriable, Some(242)).is_replica_failure());
        // Too many parts: the same replica will take it after a pause.
        assert!(!e(ErrorClass::Retriable, Some(252)).is_replica_failure());
        // A data error is the same on every replica.
        assert!(!e(ErrorClass::Fatal, Some(27)).is_replica_failure());
        assert!(!e(ErrorClass::Fatal, None).is_replica_failure());
        // A read-only user profile is not a replica fault (and not retried).
        assert!(!e(ErrorClass::Fatal, Some(164)).is_replica_failure());
        assert_eq!(e(ErrorClass::Retriable, Some(252)).remedy(), Remedy::Retry);
        assert_eq!(e(ErrorClass::Fatal, Some(252)).remedy(), Remedy::GiveUp);
        // A refused login while running: a password rotating, retried.
        assert_eq!(e(ErrorClass::Retriable, Some(516)).remedy(), Remedy::Retry);
        assert_eq!(e(ErrorClass::Retriable, Some(193)).remedy(), Remedy::Retry);
    }
}
