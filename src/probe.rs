//! `spate probe`: one plain-HTTP GET of an admin endpoint (`/healthz`,
//! `/readyz`), exit 0 when it answers 200. It is what the container image's
//! `HEALTHCHECK` and the systemd unit's readiness wait run, on hosts and in
//! images that have no curl. With `--wait` it asks again every half second
//! until a 200 or the deadline.
//!
//! Runs on the main thread only, with std's blocking sockets: no runtime,
//! no logging, one line on stderr when the answer is not 200.

use crate::cli::ProbeArgs;
use crate::exit::Exit;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Pause between attempts under `--wait`.
const RETRY_EVERY: Duration = Duration::from_millis(500);
/// The most of an answer read: the status line and a short JSON body.
const MAX_ANSWER: u64 = 16 * 1024;

/// `spate probe`.
pub fn run(args: ProbeArgs) -> Result<(), Exit> {
    let target = Target::parse(&args.url)?;
    let deadline = args.wait.map(|w| Instant::now() + w);
    loop {
        let failure = match target.get(args.timeout) {
            Ok((200, _)) => return Ok(()),
            Ok((status, body)) => format!("{} answered {status}: {}", args.url, first_line(&body)),
            Err(e) => format!("{}: {e}", args.url),
        };
        match deadline {
            Some(d) if Instant::now() + RETRY_EVERY < d => std::thread::sleep(RETRY_EVERY),
            Some(_) => return Err(Exit::failed(format!("{failure} (still, after --wait)"))),
            None => return Err(Exit::failed(failure)),
        }
    }
}

fn first_line(body: &str) -> &str {
    body.lines().next().unwrap_or("").trim()
}

/// Where to connect and what to ask for, from an `http://HOST:PORT/PATH` URL.
#[derive(Debug, PartialEq)]
struct Target {
    /// `HOST:PORT`, as connected to and sent in `Host:`.
    authority: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, Exit> {
        let bad = |why: &str| {
            Exit::usage(format!(
                "--url {url}: {why} (e.g. http://127.0.0.1:9187/healthz)"
            ))
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// URLs (the admin server speaks plain HTTP)"))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let has_port = authority.rsplit_once(':').is_some_and(|(h, p)| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (!h.starts_with('[') || h.ends_with(']'))
        });
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let path = if path.is_empty() { "/" } else { path };
        Ok(Target {
            authority,
            path: path.to_string(),
        })
    }

    /// One GET: the status code and the start of the body.
    fn get(&self, timeout: Duration) -> std::io::Result<(u16, String)> {
        let addr = self
            .authority
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("the host resolves to no address"))?;
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        // One write: `write!` on the stream would send each piece of the
        // format as its own segment, and a server that answers after the
        // first one and closes turns the next write into a broken pipe.
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: spate-probe\r\nConnection: close\r\n\r\n",
            self.path, self.authority
        );
        stream.write_all(request.as_bytes())?;
        let mut answer = Vec::new();
        stream.take(MAX_ANSWER).read_to_end(&mut answer)?;
        let answer = String::from_utf8_lossy(&answer);
        let status = answer
            .strip_prefix("HTTP/1.")
            .and_then(|s| s.get(2..5))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("not an HTTP answer"))?;
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Ok((status, body.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn target(authority: &str, path: &str) -> Target {
        Target {
            authority: authority.into(),
            path: path.into(),
        }
    }

    #[test]
    fn urls() {
        assert_eq!(
            Target::parse("http://127.0.0.1:9187/healthz").unwrap(),
            target("127.0.0.1:9187", "/healthz")
        );
        assert_eq!(
            Target::parse("http://localhost/readyz").unwrap(),
            target("localhost:80", "/readyz")
        );
        assert_eq!(
            Target::parse("http://[::1]:9187").unwrap(),
            target("[::1]:9187", "/")
        );
        assert_eq!(
            Target::parse("http://[::1]/x").unwrap(),
            target("[::1]:80", "/x")
        );
        for bad in [
            "https://127.0.0.1:9187/healthz",
            "127.0.0.1:9187",
            "http:///healthz",
        ] {
            assert_eq!(Target::parse(bad).unwrap_err().code(), 2, "{bad}");
        }
    }

    /// A one-connection server answering `status` with `body`; the request
    /// line it read comes back on the handle.
    fn serve(status: &str, body: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/readyz", listener.local_addr().unwrap());
        let status = status.to_string();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // The whole request head, however it arrives.
            let mut buf = [0u8; 1024];
            let mut n = 0;
            while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf[n..]).unwrap() {
                    0 => break,
                    k => n += k,
                }
            }
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(answer.as_bytes()).unwrap();
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        });
        (url, handle)
    }

    fn probe(url: &str, wait: Option<Duration>) -> Result<(), Exit> {
        run(ProbeArgs {
            url: url.into(),
            timeout: Duration::from_secs(5),
            wait,
        })
    }

    #[test]
    fn ok_on_200() {
        let (url, server) = serve("200 OK", "ok\n");
        probe(&url, None).unwrap();
        assert_eq!(server.join().unwrap(), "GET /readyz HTTP/1.1");
    }

    #[test]
    fn fails_on_503_naming_the_answer() {
        let (url, server) = serve(
            "503 Service Unavailable",
            "{\"ready\":false,\"reason\":\"shutting down\"}\n",
        );
        let e = probe(&url, None).unwrap_err();
        server.join().unwrap();
        assert_eq!(e.code(), 1);
        assert!(
            e.message().contains("answered 503: {\"ready\":false"),
            "{}",
            e.message()
        );
    }

    /// Against spate's own admin server: /healthz is 200 with no stalled
    /// thread; /readyz is 503 until the consumer joined and the sinks
    /// answer, and `--wait` sees it turn 200.
    #[test]
    fn against_the_admin_server() {
        use spate_core::admin::{start, AdminConfig, Readiness};
        use std::sync::atomic::Ordering;
        use std::sync::Arc;
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let readiness = Arc::new(Readiness::default());
        let metrics = Arc::new(spate_core::metrics::Metrics::new());
        let server = io
            .block_on(start(
                "127.0.0.1:0".parse().unwrap(),
                AdminConfig::default(),
                metrics,
                readiness.clone(),
            ))
            .unwrap();
        let base = format!("http://{}", server.local_addr());
        probe(&format!("{base}/healthz"), None).unwrap();
        let e = probe(&format!("{base}/readyz"), None).unwrap_err();
        assert!(
            e.message().contains("answered 503: {\"ready\":false"),
            "{}",
            e.message()
        );

        let ready = readiness.clone();
        let waiter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            ready.source.joined.store(true, Ordering::Release);
            ready.sinks_connected.store(true, Ordering::Release);
        });
        probe(&format!("{base}/readyz"), Some(Duration::from_secs(10))).unwrap();
        waiter.join().unwrap();
        io.block_on(server.shutdown());
    }

    #[test]
    fn fails_when_nothing_listens_even_after_waiting() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/healthz");
        let e = probe(&url, Some(Duration::from_millis(600))).unwrap_err();
        assert_eq!(e.code(), 1);
        assert!(e.message().contains("after --wait"), "{}", e.message());
    }
}
