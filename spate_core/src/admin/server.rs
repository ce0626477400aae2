//! The admin listener: hyper's HTTP/1.1 server on the process's I/O
//! runtime, with its limits ([`AdminConfig`]) and its graceful stop
//! ([`AdminServer::shutdown`]).
//!
//! Tasks: one accept task per server, one task per connection; all of them
//! run on the tokio I/O runtime and never touch the pipeline threads (they
//! only read the shared [`Metrics`] and [`Readiness`] through
//! [`super::routes`]). The accept task receives the stop signal on a
//! `watch` channel, stops accepting, passes the signal on to every
//! connection (hyper's `graceful_shutdown`: an idle keep-alive connection
//! closes at once, a request being read or answered is finished first and
//! its answer says `Connection: close`) and waits for them for at most
//! [`AdminConfig::shutdown_grace`] before aborting the rest.

use super::routes::respond;
use super::Readiness;
use crate::metrics::Metrics;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

/// hyper refuses a read buffer smaller than this (its h1 minimum).
const MIN_READ_BUFFER: usize = 8192;

/// Limits of the admin server.
#[derive(Clone, Copy, Debug)]
pub struct AdminConfig {
    /// Longest a client may take to send a request head (request line and
    /// headers). The same timer bounds how long a keep-alive connection may
    /// sit idle between two requests: hyper restarts it when the connection
    /// goes idle.
    pub header_read_timeout: Duration,
    /// Largest request head, in bytes; a larger one is answered 431 and the
    /// connection closed.
    pub max_head_bytes: usize,
    /// Connections served at once; further clients wait in the listen
    /// backlog until one closes. At least 1.
    pub max_connections: usize,
    /// Longest [`AdminServer::shutdown`] waits for open connections to
    /// finish their request before it drops them.
    pub shutdown_grace: Duration,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(5),
            max_head_bytes: 8 * 1024,
            max_connections: 64,
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

/// A running admin server. Dropping it signals the graceful stop without
/// waiting for it; [`AdminServer::shutdown`] signals and waits.
#[derive(Debug)]
pub struct AdminServer {
    local_addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// The bound address (useful with port 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop accepting, let open connections finish the request they are
    /// in, and return once every connection closed or
    /// [`AdminConfig::shutdown_grace`] passed (the rest are dropped).
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "admin server task failed");
            }
        }
    }

    /// Serve until the runtime stops, without a stop signal.
    fn detach(mut self) -> SocketAddr {
        // A dropped sender without a `true` is read as "never stop".
        self.stop = None;
        self.task = None;
        self.local_addr
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }
}

/// Bind `addr` and serve until the runtime stops. Returns the bound address
/// (useful with port 0).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> std::io::Result<SocketAddr> {
    Ok(start(addr, AdminConfig::default(), metrics, readiness)
        .await?
        .detach())
}

/// Bind `addr` and serve with `config` until the returned server is shut
/// down or dropped.
pub async fn start(
    addr: SocketAddr,
    config: AdminConfig,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> std::io::Result<AdminServer> {
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        metrics,
        readiness,
        config,
    });
    let task = tokio::spawn(accept_loop(listener, shared, stop_rx));
    Ok(AdminServer {
        local_addr,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// What every connection reads.
struct Shared {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    config: AdminConfig,
}

/// Resolves when the stop signal fires; never if its sender went away
/// without firing ([`AdminServer::detach`]).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(shared.config.max_connections.max(1)));
    let mut connections = JoinSet::new();
    loop {
        // Take a connection slot first: at the limit, new clients wait in
        // the kernel's backlog rather than in our memory.
        let permit = tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // E.g. out of file descriptors: back off, don't spin.
                    tracing::warn!(error = %e, "admin server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(serve_connection(
            stream,
            shared.clone(),
            stop.clone(),
            permit,
        ));
    }
    drop(listener);
    let all_closed = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(shared.config.shutdown_grace, all_closed)
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "admin server: connections still open at the shutdown grace; dropping them"
        );
        connections.abort_all();
    }
}

async fn serve_connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let config = shared.config;
    let service = service_fn(move |request| {
        let response = respond(&request, &shared.metrics, &shared.readiness);
        async move { Ok::<_, Infallible>(response) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(config.header_read_timeout)
        .max_header_size(config.max_head_bytes)
        .max_buf_size(config.max_head_bytes.max(MIN_READ_BUFFER));
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stopped(&mut stop) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        // Timeouts, oversized heads, resets: the client's problem.
        tracing::debug!(error = %e, "admin connection ended with an error");
    }
}
