//! One HTTP/1.0 exchange with the schema registry, over plain TCP or TLS.
//!
//! Runs on the thread that asks (a driver thread meeting an unknown schema
//! id, `spate gen`, `spate check`, start-up); blocking std sockets, one
//! connection per request (fetches are rare: once per schema id). TLS is
//! rustls over the same client settings as the ClickHouse transport
//! ([`crate::transport::client_config`]: system roots plus
//! `--schema-registry-ca`, a client certificate from
//! `--schema-registry-cert`/`-key`); a TLS failure becomes one line
//! naming what to fix ([`RegistryError::Tls`]).

use super::RegistryError;
use crate::transport::{describe_tls_for, TlsFlags};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// The flags naming the registry's TLS files.
pub const REGISTRY_TLS_FLAGS: TlsFlags = TlsFlags {
    ca: "--schema-registry-ca",
    cert: "--schema-registry-cert",
    key: "--schema-registry-key",
};

/// Largest answer read (a schema is a few KB; this bounds a bad server).
const MAX_ANSWER: usize = 16 << 20;

/// Where requests go.
pub(super) struct Endpoint {
    pub host: String,
    pub port: u16,
    /// TLS settings for an `https://` URL; `None` for `http://`.
    pub tls: Option<Arc<ClientConfig>>,
    pub timeout: Duration,
}

impl Endpoint {
    /// Send `request` (a whole HTTP/1.0 request) and read the answer to its
    /// end: its status and body.
    pub fn exchange(&self, request: &[u8]) -> Result<(u16, String), RegistryError> {
        let tcp = self.connect()?;
        let answer = match &self.tls {
            None => talk(tcp, request),
            Some(config) => {
                let name = ServerName::try_from(self.host.clone()).map_err(|e| {
                    RegistryError::Tls(format!("TLS error: `{}` is no server name: {e}", self.host))
                })?;
                let conn = ClientConnection::new(config.clone(), name)
                    .map_err(|e| RegistryError::Tls(format!("TLS error: {e}")))?;
                talk(StreamOwned::new(conn, tcp), request)
            }
        };
        let answer = answer.map_err(|e| self.failed(&e))?;
        parse_http(&answer)
    }

    fn connect(&self) -> Result<TcpStream, RegistryError> {
        let down = |e: std::io::Error| self.failed(&e);
        let addr = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(down)?
            .next()
            .ok_or_else(|| RegistryError::Unavailable(format!("{} does not resolve", self.host)))?;
        let stream = TcpStream::connect_timeout(&addr, self.timeout).map_err(down)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(down)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(down)?;
        Ok(stream)
    }

    /// A failed exchange: a TLS failure (permanent: a certificate or trust
    /// problem) or the registry being unreachable (transient).
    fn failed(&self, e: &std::io::Error) -> RegistryError {
        match describe_tls_for(e, REGISTRY_TLS_FLAGS) {
            Some(line) if self.tls.is_some() => RegistryError::Tls(line),
            _ => RegistryError::Unavailable(format!("{}:{}: {e}", self.host, self.port)),
        }
    }
}

/// Write `request`, then read until the answer is complete: its
/// Content-Length reached, or the connection closed. A TLS peer closing
/// without `close_notify` after a complete answer is not an error.
fn talk(mut s: impl Read + Write, request: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(request)?;
    s.flush()?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if complete(&answer) || answer.len() > MAX_ANSWER {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::UnexpectedEof
                    && answer.windows(4).any(|w| w == b"\r\n\r\n") =>
            {
                break
            }
            Err(e) => return Err(e),
        }
    }
    Ok(answer)
}

/// Whether `answer` holds its head and the whole body its Content-Length
/// announces (without one, only the connection's end says).
fn complete(answer: &[u8]) -> bool {
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&answer[..end]);
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    length.is_some_and(|n| answer.len() >= end + 4 + n)
}

/// Status and body of an HTTP/1.x answer read to its end.
pub(super) fn parse_http(answer: &[u8]) -> Result<(u16, String), RegistryError> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| RegistryError::Unavailable("the connection closed mid-answer".into()))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            RegistryError::Protocol(format!(
                "status line `{}`",
                head.lines().next().unwrap_or("")
            ))
        })?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_plain_and_chunked() {
        let (s, b) = parse_http(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((s, b.as_str()), (200, "{}"));
        let (s, b) = parse_http(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!((s, b.as_str()), (404, "abcde"));
        assert!(parse_http(b"HTTP/1.1 200").is_err());
    }

    #[test]
    fn an_answer_is_complete_at_its_content_length() {
        assert!(!complete(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{"));
        assert!(complete(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"));
        assert!(
            !complete(b"HTTP/1.1 200 OK\r\n\r\n{}"),
            "no length: read to the end"
        );
        assert!(!complete(b"HTTP/1.1 200 OK\r\nContent-Length: 2"));
    }

    /// A stream answering `answer` then failing with `end`.
    struct Canned(std::io::Cursor<Vec<u8>>, std::io::ErrorKind);

    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(self.1.into()),
                n => Ok(n),
            }
        }
    }

    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_peer_closing_without_close_notify_after_the_answer_is_fine() {
        use std::io::ErrorKind::{ConnectionReset, UnexpectedEof};
        let body = b"HTTP/1.0 200 OK\r\n\r\n{\"id\":1}".to_vec();
        let got = talk(
            Canned(std::io::Cursor::new(body.clone()), UnexpectedEof),
            b"GET",
        )
        .unwrap();
        assert_eq!(got, body);
        assert!(talk(
            Canned(std::io::Cursor::new(Vec::new()), UnexpectedEof),
            b"GET"
        )
        .is_err());
        assert!(talk(Canned(std::io::Cursor::new(body), ConnectionReset), b"GET").is_err());
    }
}
