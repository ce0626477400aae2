//! A small Confluent Schema Registry for the format tests, and a producer
//! of binary (wire-format) messages.
//!
//! [`TestRegistry`] implements the subset of the REST API spate uses, as
//! Confluent documents it: `GET /schemas/ids/{id}`,
//! `GET /subjects/{subject}/versions/{version}` (a number or `latest`),
//! `POST /subjects/{subject}/versions` (the same schema text and type
//! under a subject gets its existing id), with HTTP basic auth when a user
//! is set (401 otherwise). One thread accepts connections and answers each
//! (HTTP/1.0 style: the connection closes after the answer).
//! [`TestRegistry::stop`] closes the port (connections are refused, as for
//! a registry that is down); [`TestRegistry::restart`] opens the same port
//! again with the same schemas. It counts `GET /schemas/ids/{id}` per id,
//! so a test can check spate fetched a schema once.

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// (schema type or "" for Avro, text) by id - 1.
    schemas: Vec<(String, String)>,
    /// subject → ids of its versions, in order.
    subjects: HashMap<String, Vec<u32>>,
    fetches: HashMap<u32, u32>,
}

/// A running test registry.
pub struct TestRegistry {
    port: u16,
    auth: Option<String>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestRegistry {
    /// Start on a free port; with `auth = Some((user, password))` every
    /// request must carry those basic-auth credentials.
    pub fn start(auth: Option<(&str, &str)>) -> TestRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the test registry");
        let port = listener.local_addr().expect("registry address").port();
        let mut r = TestRegistry {
            port,
            auth: auth.map(|(u, p)| format!("Basic {}", base64(format!("{u}:{p}").as_bytes()))),
            state: Arc::default(),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        r.serve(listener);
        r
    }

    /// `http://127.0.0.1:PORT` (no credentials).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn serve(&mut self, listener: TcpListener) {
        let (state, stop, auth) = (self.state.clone(), self.stop.clone(), self.auth.clone());
        stop.store(false, Ordering::SeqCst);
        self.thread = Some(
            std::thread::Builder::new()
                .name("test-registry".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        if let Ok(c) = conn {
                            answer(c, &state, auth.as_deref());
                        }
                    }
                })
                .expect("registry thread"),
        );
    }

    /// Close the port: the registry is down until [`restart`](Self::restart).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            t.join().expect("registry thread panicked");
        }
    }

    /// Listen on the same port again, with the same schemas.
    pub fn restart(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "rebind registry port {}: {e}",
                        self.port
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        self.serve(listener);
    }

    /// Register a schema directly (not over HTTP), as a producer would;
    /// its id. `schema_type`: "" (Avro) or "PROTOBUF".
    pub fn register(&self, subject: &str, schema_type: &str, schema: &str) -> u32 {
        register(
            &mut self.state.lock().expect("registry state"),
            subject,
            schema_type,
            schema,
        )
    }

    /// How often `GET /schemas/ids/{id}` was asked.
    pub fn fetches(&self, id: u32) -> u32 {
        self.state
            .lock()
            .expect("registry state")
            .fetches
            .get(&id)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

fn register(st: &mut State, subject: &str, schema_type: &str, schema: &str) -> u32 {
    let ty = if schema_type == "AVRO" {
        ""
    } else {
        schema_type
    };
    let existing = st.subjects.get(subject).and_then(|ids| {
        ids.iter()
            .copied()
            .find(|&id| st.schemas[id as usize - 1] == (ty.to_owned(), schema.to_owned()))
    });
    if let Some(id) = existing {
        return id;
    }
    st.schemas.push((ty.to_owned(), schema.to_owned()));
    let id = st.schemas.len() as u32;
    st.subjects.entry(subject.to_owned()).or_default().push(id);
    id
}

/// One HTTP request as the registry needs it.
struct Request {
    method: String,
    path: String,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
    body: String,
}

/// Read one request.
fn read_request(c: &mut TcpStream) -> Option<Request> {
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn answer(mut c: TcpStream, state: &Mutex<State>, auth: Option<&str>) {
    let Some(Request {
        method,
        path,
        headers,
        body,
    }) = read_request(&mut c)
    else {
        return;
    };
    let authorized =
        auth.is_none_or(|a| headers.iter().any(|(k, v)| k == "authorization" && v == a));
    let (status, json) = if authorized {
        route(
            &mut state.lock().expect("registry state"),
            &method,
            &path,
            &body,
        )
    } else {
        (
            401,
            serde_json::json!({"error_code": 401, "message": "Unauthorized"}),
        )
    };
    let body = json.to_string();
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Error",
    };
    let _ = write!(
        c,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn not_found(code: u32, what: &str) -> (u16, serde_json::Value) {
    (
        404,
        serde_json::json!({"error_code": code, "message": format!("{what} not found")}),
    )
}

fn with_type(mut v: serde_json::Value, ty: &str) -> serde_json::Value {
    if !ty.is_empty() {
        v["schemaType"] = ty.into();
    }
    v
}

fn route(st: &mut State, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let parts: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    match (method, parts.as_slice()) {
        ("GET", ["schemas", "ids", id]) => {
            let Some(id) = id
                .parse::<u32>()
                .ok()
                .filter(|&i| i >= 1 && i as usize <= st.schemas.len())
            else {
                return not_found(40403, "Schema");
            };
            *st.fetches.entry(id).or_default() += 1;
            let (ty, text) = &st.schemas[id as usize - 1];
            (200, with_type(serde_json::json!({ "schema": text }), ty))
        }
        ("GET", ["subjects", subject, "versions", version]) => {
            let Some(ids) = st.subjects.get(*subject) else {
                return not_found(40401, "Subject");
            };
            let v = match *version {
                "latest" => Some(ids.len()),
                v => v
                    .parse::<usize>()
                    .ok()
                    .filter(|&v| v >= 1 && v <= ids.len()),
            };
            let Some(v) = v else {
                return not_found(40402, "Version");
            };
            let id = ids[v - 1];
            let (ty, text) = &st.schemas[id as usize - 1];
            let answer =
                serde_json::json!({"subject": subject, "version": v, "id": id, "schema": text});
            (200, with_type(answer, ty))
        }
        ("POST", ["subjects", subject, "versions"]) => {
            let Ok(req) = serde_json::from_str::<serde_json::Value>(body) else {
                return (
                    422,
                    serde_json::json!({"error_code": 42201, "message": "Invalid schema"}),
                );
            };
            let Some(schema) = req.get("schema").and_then(|s| s.as_str()) else {
                return (
                    422,
                    serde_json::json!({"error_code": 42201, "message": "Invalid schema"}),
                );
            };
            let ty = req.get("schemaType").and_then(|s| s.as_str()).unwrap_or("");
            let id = register(st, subject, ty, schema);
            (200, serde_json::json!({ "id": id }))
        }
        _ => not_found(404, "Endpoint"),
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() {
                char::from(A[(n >> (18 - 6 * i)) as usize & 63])
            } else {
                '='
            });
        }
    }
    out
}

/// Produce `count` binary messages, `make(i)` giving (partition, value),
/// wait for every delivery, and return each partition's end offset (the
/// topic must be new, so the ends count the messages; checked).
pub fn produce_bytes(
    brokers: &str,
    topic: &str,
    partitions: i32,
    count: usize,
    mut make: impl FnMut(usize) -> (i32, Vec<u8>),
) -> Vec<i64> {
    produce_records(brokers, topic, partitions, count, |i| {
        let (p, value) = make(i);
        (p, None, Some(value))
    })
}

/// [`produce_bytes`] with keys and tombstones: `make(i)` gives
/// (partition, key, value), a `None` value being a tombstone.
pub fn produce_records(
    brokers: &str,
    topic: &str,
    partitions: i32,
    count: usize,
    mut make: impl FnMut(usize) -> (i32, Option<Vec<u8>>, Option<Vec<u8>>),
) -> Vec<i64> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("message.timeout.ms", "120000")
        .create()
        .expect("producer");
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut sent = vec![0i64; partitions as usize];
    for i in 0..count {
        let (p, key, value) = make(i);
        assert!(p < partitions, "message {i}: partition {p} out of range");
        sent[p as usize] += 1;
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(p);
        if let Some(v) = &value {
            rec = rec.payload(&v[..]);
        }
        if let Some(k) = &key {
            rec = rec.key(&k[..]);
        }
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    assert!(Instant::now() < deadline, "producing timed out");
                    rec = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce message {i}: {e}"),
            }
        }
        if i % 1000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(deadline.saturating_duration_since(Instant::now()))
        .unwrap_or_else(|e| panic!("flush of {count} messages to {topic}: {e}"));
    let ends = super::end_offsets(brokers, topic, partitions);
    assert_eq!(ends, sent, "end offsets = messages sent (a new topic)");
    ends
}

/// `scripts/schema_registry.py` serving HTTPS (the same registry API), for
/// the registry's TLS tests: its server certificate is the HTTPS
/// ClickHouse's (`scripts/clickhouse-https.sh`, signed by the test CA, for
/// 127.0.0.1); with `client_ca` it requires a client certificate signed by
/// it. Killed on drop.
pub struct TlsRegistry {
    child: std::process::Child,
    port: u16,
}

impl TlsRegistry {
    /// Start on a free port with basic auth `user_password` (`user:pw`),
    /// serving `cert`/`key`; wait (bounded) until it accepts connections.
    pub fn start(cert: &str, key: &str, client_ca: Option<&str>, user_password: &str) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/schema_registry.py");
        let user_file = super::log_dir().join(format!("{}.user", super::unique("tls_registry")));
        std::fs::write(&user_file, format!("{user_password}\n")).expect("registry user file");
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(script)
            .args([
                "--port",
                &port.to_string(),
                "--tls-cert",
                cert,
                "--tls-key",
                key,
            ])
            .arg("--user-file")
            .arg(&user_file)
            .stdout(std::process::Stdio::null());
        if let Some(ca) = client_ca {
            cmd.args(["--tls-client-ca", ca]);
        }
        let child = cmd.spawn().expect("python3 scripts/schema_registry.py");
        let r = TlsRegistry { child, port };
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the TLS test registry did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
