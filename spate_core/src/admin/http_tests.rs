//! The admin server over real loopback sockets: routes, keep-alive, HEAD,
//! 405/404, the head size limit, the header read timeout, the connection
//! limit and the graceful stop. Timeouts are configured short (hundreds of
//! milliseconds) rather than paused: hyper's timer races real socket I/O.

use super::*;
use crate::metrics::Metrics;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Bound on every read in these tests, so a broken server fails a test
/// instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(5);

/// One HTTP response as read off the wire.
#[derive(Debug)]
struct Reply {
    head: String,
    body: String,
}

impl Reply {
    fn status(&self) -> u16 {
        self.head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// Head and body as they came, as `read_to_string` would have seen them.
    fn text(&self) -> String {
        format!("{}\r\n\r\n{}", self.head, self.body)
    }
}

/// Read one response: its head, then `Content-Length` bytes of body unless
/// `head_only` (the answer to a HEAD). `None` on EOF before the head ended.
async fn read_reply<R: AsyncBufRead + Unpin>(r: &mut R, head_only: bool) -> Option<Reply> {
    let read = async {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']).to_string();
            if line.is_empty() {
                break;
            }
            lines.push(line);
        }
        let mut reply = Reply {
            head: lines.join("\r\n"),
            body: String::new(),
        };
        if !head_only {
            let len: usize = reply.header("content-length")?.parse().ok()?;
            let mut body = vec![0; len];
            r.read_exact(&mut body).await.ok()?;
            reply.body = String::from_utf8(body).ok()?;
        }
        Some(reply)
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("a reply in time")
}

/// A client connection kept open across requests.
struct Client {
    io: BufReader<TcpStream>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            io: BufReader::new(stream),
        }
    }

    async fn send(&mut self, bytes: &str) {
        self.io.get_mut().write_all(bytes.as_bytes()).await.unwrap();
        self.io.get_mut().flush().await.unwrap();
    }

    async fn request(&mut self, method: &str, path: &str) -> Reply {
        self.send(&format!("{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n"))
            .await;
        read_reply(&mut self.io, method == "HEAD")
            .await
            .expect("an answer")
    }

    /// Whether the server closed the connection (EOF, or a reset) within
    /// [`PATIENCE`], with no byte sent first.
    async fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(PATIENCE, self.io.read(&mut byte)).await {
            Ok(Ok(0) | Err(_)) => true,
            Ok(Ok(_)) | Err(_) => false,
        }
    }
}

async fn start_with(config: AdminConfig) -> AdminServer {
    let m = Arc::new(Metrics::new());
    m.lanes_paused.set(3);
    let r = Arc::new(Readiness::default());
    start("127.0.0.1:0".parse().unwrap(), config, m, r)
        .await
        .unwrap()
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
            let reply = read_reply(&mut BufReader::new(&mut s), false).await;
            reply.expect("an answer").text()
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
        let out = read_reply(&mut BufReader::new(&mut s), false)
            .await
            .expect("an answer")
            .text();
        assert!(
            out.starts_with("HTTP/1.1 200") && out.contains("spate_lanes_paused 3"),
            "{out}"
        );
    });
}

#[tokio::test]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let server = start_with(AdminConfig::default()).await;
    let mut c = Client::connect(server.local_addr()).await;
    let first = c.request("GET", "/metrics").await;
    assert_eq!(first.status(), 200, "{first:?}");
    assert!(first.body.contains("spate_lanes_paused 3"), "{first:?}");
    assert_ne!(first.header("connection"), Some("close"), "{first:?}");
    let second = c.request("GET", "/readyz").await;
    assert_eq!(second.status(), 503, "{second:?}");
    assert!(second.body.contains("\"ready\":false"), "{second:?}");
    // A client asking to close gets its answer, then the close.
    c.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let third = read_reply(&mut c.io, false).await.expect("an answer");
    assert_eq!(third.status(), 200, "{third:?}");
    assert!(c.closed().await);
}

#[tokio::test]
async fn head_answers_the_headers_without_a_body() {
    let server = start_with(AdminConfig::default()).await;
    let mut c = Client::connect(server.local_addr()).await;
    let get = c.request("GET", "/readyz").await;
    let head = c.request("HEAD", "/readyz").await;
    assert_eq!(head.status(), 503, "{head:?}");
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str()),
        "{head:?}"
    );
    assert_eq!(head.header("content-type"), Some("application/json"));
    // Had the HEAD answer carried a body, its bytes would come before this
    // status line.
    let next = c.request("GET", "/healthz").await;
    assert!(next.head.starts_with("HTTP/1.1 200"), "{next:?}");
    assert_eq!(c.request("HEAD", "/metrics").await.status(), 200);
}

#[tokio::test]
async fn other_methods_are_405_and_unknown_paths_404() {
    let server = start_with(AdminConfig::default()).await;
    let mut c = Client::connect(server.local_addr()).await;
    for (method, path) in [
        ("POST", "/metrics"),
        ("DELETE", "/readyz"),
        ("PUT", "/healthz"),
    ] {
        let reply = c.request(method, path).await;
        assert_eq!(reply.status(), 405, "{method} {path}: {reply:?}");
        assert_eq!(reply.header("allow"), Some("GET, HEAD"), "{reply:?}");
    }
    for (method, path) in [("GET", "/"), ("GET", "/metricsx"), ("POST", "/nope")] {
        let reply = c.request(method, path).await;
        assert_eq!(reply.status(), 404, "{method} {path}: {reply:?}");
    }
    // The query string is not part of the path.
    assert_eq!(c.request("GET", "/metrics?x=1").await.status(), 200);
}

#[tokio::test]
async fn an_oversized_request_head_is_rejected() {
    let config = AdminConfig {
        max_head_bytes: 1024,
        ..AdminConfig::default()
    };
    let server = start_with(config).await;
    let request = |pad: usize| {
        format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(pad)
        )
    };
    // Below the limit: served.
    let mut c = Client::connect(server.local_addr()).await;
    c.send(&request(800)).await;
    let ok = read_reply(&mut c.io, false).await.expect("an answer");
    assert_eq!(ok.status(), 200, "{ok:?}");
    // Above it: 431, then the connection closes.
    let mut c = Client::connect(server.local_addr()).await;
    c.send(&request(4096)).await;
    let reply = read_reply(&mut c.io, false).await.expect("an answer");
    assert_eq!(reply.status(), 431, "{reply:?}");
    assert!(c.closed().await);
}

#[tokio::test]
async fn a_client_that_never_finishes_its_head_is_dropped() {
    let timeout = Duration::from_millis(300);
    let config = AdminConfig {
        header_read_timeout: timeout,
        ..AdminConfig::default()
    };
    let server = start_with(config).await;
    // Taken before connecting: the server's timer cannot start earlier.
    let started = Instant::now();
    let mut slow = Client::connect(server.local_addr()).await;
    slow.send("GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
    assert!(slow.closed().await, "a stalled head must be dropped");
    let took = started.elapsed();
    assert!(took >= timeout, "dropped before the timeout: {took:?}");
    assert!(took < Duration::from_secs(3), "dropped late: {took:?}");
    // The same timer bounds an idle keep-alive connection.
    let mut idle = Client::connect(server.local_addr()).await;
    assert_eq!(idle.request("GET", "/healthz").await.status(), 200);
    let started = Instant::now();
    assert!(idle.closed().await, "an idle connection must be dropped");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_for_a_free_slot() {
    let config = AdminConfig {
        max_connections: 1,
        ..AdminConfig::default()
    };
    let server = start_with(config).await;
    let mut first = Client::connect(server.local_addr()).await;
    assert_eq!(first.request("GET", "/healthz").await.status(), 200);
    // The second client is in the backlog while the first stays open.
    let mut second = Client::connect(server.local_addr()).await;
    second
        .send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), second.io.read(&mut byte)).await;
    assert!(early.is_err(), "answered past the limit: {early:?}");
    drop(first);
    let reply = read_reply(&mut second.io, false).await.expect("an answer");
    assert_eq!(reply.status(), 200, "{reply:?}");
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight_and_closes_idle_connections() {
    let server = start_with(AdminConfig::default()).await;
    let addr = server.local_addr();
    let mut idle = Client::connect(addr).await;
    assert_eq!(idle.request("GET", "/metrics").await.status(), 200);
    let mut busy = Client::connect(addr).await;
    busy.send("GET /readyz HTTP/1.1\r\n").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let stopping = tokio::spawn(server.shutdown());
    assert!(idle.closed().await, "an idle connection closes at once");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!stopping.is_finished(), "returned with a request in flight");
    busy.send("Host: x\r\n\r\n").await;
    let reply = read_reply(&mut busy.io, false).await.expect("an answer");
    assert_eq!(reply.status(), 503, "{reply:?}");
    assert!(reply.body.contains("\"ready\":false"), "{reply:?}");
    assert!(busy.closed().await, "no keep-alive once stopping");
    tokio::time::timeout(PATIENCE, stopping)
        .await
        .expect("shutdown returns once the connections closed")
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "still listening");
}

#[tokio::test]
async fn shutdown_drops_connections_still_open_at_the_grace() {
    let grace = Duration::from_millis(200);
    let config = AdminConfig {
        header_read_timeout: Duration::from_secs(30),
        shutdown_grace: grace,
        ..AdminConfig::default()
    };
    let server = start_with(config).await;
    let mut stuck = Client::connect(server.local_addr()).await;
    stuck.send("GET /metrics HTTP/1.1\r\n").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    tokio::time::timeout(PATIENCE, server.shutdown())
        .await
        .expect("shutdown is bounded by its grace");
    let took = started.elapsed();
    assert!(took >= grace, "did not wait for the request: {took:?}");
    assert!(stuck.closed().await, "the stuck connection is dropped");
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let server = start_with(AdminConfig::default()).await;
    let addr = server.local_addr();
    drop(server);
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still listening after drop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
