//! Admin HTTP server (tokio, on `--admin-addr`): `/metrics`, `/healthz`,
//! `/readyz`. `/healthz` is 503, naming the thread, when a pipeline
//! thread's loop stops turning ([`crate::health`]).
//!
//! A deliberately small HTTP/1.1 responder: GET only, one response per
//! connection, no keep-alive. It runs on the process's I/O runtime and
//! reads shared flags; it never touches the pipeline threads.

use crate::health::Liveness;
use crate::health::SourceReadiness;
use crate::metrics::Metrics;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Readiness as `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Readiness {
    /// Source side: joined, shutting down.
    pub source: Arc<SourceReadiness>,
    /// The last sink probe succeeded.
    pub sinks_connected: AtomicBool,
    /// What the last failed sink probe said.
    pub sink_error: Mutex<Option<String>>,
    /// The pipeline threads' heartbeats (`/healthz`).
    pub liveness: Arc<Liveness>,
}

impl Readiness {
    /// `(ready, JSON body)`.
    #[must_use]
    pub fn report(&self) -> (bool, String) {
        let joined = self.source.joined.load(Ordering::Acquire);
        let shutting_down = self.source.shutting_down.load(Ordering::Acquire);
        let sinks = self.sinks_connected.load(Ordering::Acquire);
        let sink_error = self
            .sink_error
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        let ready = joined && sinks && !shutting_down;
        let body = format!(
            "{{\"ready\":{ready},\"consumer_joined\":{joined},\"sinks_connected\":{sinks},\"shutting_down\":{shutting_down},\"sink_error\":{}}}\n",
            sink_error.map_or("null".to_string(), |e| json_string(&e))
        );
        (ready, body)
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Bind `addr` and serve until the runtime stops. Returns the bound address
/// (useful with port 0).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            let readiness = readiness.clone();
            tokio::spawn(async move {
                // Read until the end of the request head: a client may
                // send "GET " and the rest in separate segments.
                let mut buf = [0u8; 2048];
                let mut n = 0;
                let read_head = async {
                    while n < buf.len() {
                        match stream.read(&mut buf[n..]).await {
                            Ok(0) | Err(_) => break,
                            Ok(k) => n += k,
                        }
                        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                };
                if tokio::time::timeout(std::time::Duration::from_secs(5), read_head)
                    .await
                    .is_err()
                    || n == 0
                {
                    return;
                }
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let (status, ctype, body) = route(path, &metrics, &readiness);
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(local)
}

fn route(
    path: &str,
    metrics: &Metrics,
    readiness: &Readiness,
) -> (&'static str, &'static str, String) {
    match path {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.encode_text()),
        "/healthz" => {
            let (healthy, body) = readiness.liveness.report();
            let status = if healthy {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            (status, "application/json", body)
        }
        "/readyz" => {
            let (ready, body) = readiness.report();
            let status = if ready {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            (status, "application/json", body)
        }
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_names_failing_conditions() {
        let r = Readiness::default();
        let (ready, body) = r.report();
        assert!(!ready);
        assert!(body.contains("\"consumer_joined\":false"));
        r.source.joined.store(true, Ordering::Release);
        r.sinks_connected.store(true, Ordering::Release);
        assert!(r.report().0);
        *r.sink_error.lock().unwrap() = Some("shard 0 \"x\"".into());
        r.sinks_connected.store(false, Ordering::Release);
        let (ready, body) = r.report();
        assert!(!ready);
        assert!(
            body.contains("\"sink_error\":\"shard 0 \\\"x\\\"\""),
            "{body}"
        );
    }

    #[test]
    fn serves_metrics_and_readyz_over_http() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let m = Arc::new(Metrics::new());
            m.lanes_paused.set(3);
            let r = Arc::new(Readiness::default());
            let addr = serve("127.0.0.1:0".parse().unwrap(), m, r).await.unwrap();
            let get = |path: &'static str| async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).await.unwrap();
                out
            };
            let metrics = get("/metrics").await;
            assert!(metrics.starts_with("HTTP/1.1 200"));
            assert!(metrics.contains("spate_lanes_paused 3"));
            assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
            assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
            // A request split over several segments is still one request.
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            for part in ["GET ", "/metrics HTTP/1.1\r\n", "Host: x\r\n\r\n"] {
                s.write_all(part.as_bytes()).await.unwrap();
                s.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            assert!(
                out.starts_with("HTTP/1.1 200") && out.contains("spate_lanes_paused 3"),
                "{out}"
            );
        });
    }
}
