//! [`SchemaRegistry`]: a client of the Confluent Schema Registry REST API,
//! the subset spate uses: `GET /schemas/ids/{id}` (decoding),
//! `GET /subjects/{subject}/versions/{version}` and
//! `POST /subjects/{subject}/versions` (`spate gen`, tests). Basic auth
//! from the URL's user info or the flags; the password never appears in
//! `Debug` output, logs or errors. `https://` URLs speak TLS with the
//! ClickHouse transport's settings (`http`: system roots plus
//! `--schema-registry-ca`, optional client certificate); verification
//! cannot be turned off.
//!
//! One client per pipeline, shared by its driver threads (`Arc`): schemas
//! are fetched by id once and cached for the life of the process (an id's
//! schema never changes). A driver meeting an unknown id fetches it on its
//! own thread with a blocking HTTP/1.0 request (rare, so no pool); while
//! the registry is unreachable, [`SchemaRegistry::schema_waiting`] retries
//! with capped backoff, which holds that driver (its lanes back up, nothing
//! past the message is committed) until the registry answers. A TLS
//! failure (untrusted certificate, refused client certificate) is not an
//! outage and is not retried; [`SchemaRegistry::probe`] finds it at start.

mod http;

pub use http::REGISTRY_TLS_FLAGS;

use crate::transport::TlsFiles;
use http::Endpoint;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the registry is and how to log in.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryConfig {
    /// `http[s]://host:port[/path]`, optionally with `user:password@`.
    pub url: String,
    /// Basic-auth user (wins over the URL's).
    pub user: Option<String>,
    /// Basic-auth password.
    pub password: Option<String>,
    /// TLS files for an `https://` URL (`--schema-registry-ca/-cert/-key`).
    pub tls: TlsFiles,
}

impl fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("url", &mask_userinfo(&self.url))
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// The URL with any password replaced by `***`.
fn mask_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let info = &url[s + 3..at];
            let user = info.split_once(':').map_or(info, |(u, _)| u);
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The kind of a registered schema (`schemaType`; absent means Avro).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaType {
    /// Avro (JSON schema text).
    Avro,
    /// Protobuf (`.proto` text).
    Protobuf,
    /// JSON Schema.
    Json,
}

impl SchemaType {
    fn parse(s: Option<&str>) -> SchemaType {
        match s {
            Some("PROTOBUF") => SchemaType::Protobuf,
            Some("JSON") => SchemaType::Json,
            _ => SchemaType::Avro,
        }
    }

    fn wire(self) -> Option<&'static str> {
        match self {
            SchemaType::Avro => None,
            SchemaType::Protobuf => Some("PROTOBUF"),
            SchemaType::Json => Some("JSON"),
        }
    }
}

/// A schema as the registry holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredSchema {
    /// Its global id.
    pub id: u32,
    /// Its kind.
    pub schema_type: SchemaType,
    /// Its text.
    pub schema: String,
}

/// A failed registry request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The URL cannot be used.
    #[error("--schema-registry `{url}`: {reason}")]
    Url {
        /// The URL, password masked.
        url: String,
        /// Why.
        reason: String,
    },
    /// The registry has no schema with this id (a bad message).
    #[error("schema id {0} is not in the schema registry")]
    NotFound(u32),
    /// The registry answered with an error status.
    #[error("the schema registry answered HTTP {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The body, cut short.
        body: String,
    },
    /// The registry could not be reached or did not answer in time.
    #[error("the schema registry is unreachable: {0}")]
    Unavailable(String),
    /// The TLS handshake failed (one line saying what to fix).
    #[error("schema registry {0}")]
    Tls(String),
    /// The TLS files cannot be used (a configuration error).
    #[error("{0}")]
    Config(String),
    /// The answer was not what the API documents.
    #[error("unexpected answer from the schema registry: {0}")]
    Protocol(String),
}

impl RegistryError {
    /// The bad message whose schema `id` could not be had: the registry's
    /// own words for an unknown id, else the error naming the id.
    pub(crate) fn for_message(&self, id: u32) -> crate::encode::RowError {
        let reason = match self {
            RegistryError::NotFound(_) => self.to_string(),
            other => format!("schema id {id}: {other}"),
        };
        crate::encode::RowError::new(None, &id.to_string(), reason)
    }

    /// Worth retrying: unreachable, 5xx, 429.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Unavailable(_) => true,
            RegistryError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// A Confluent schema registry, with the schemas fetched so far.
pub struct SchemaRegistry {
    endpoint: Endpoint,
    base: String,
    /// The `Authorization` header value.
    auth: Option<String>,
    shown: String,
    /// How long [`Self::schema_waiting`] waits out an outage, in ms
    /// (0: for as long as it lasts).
    wait_limit_ms: AtomicU64,
    cache: Mutex<HashMap<u32, Arc<RegisteredSchema>>>,
}

impl fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaRegistry")
            .field("url", &self.shown)
            .field("auth", &self.auth.as_ref().map(|_| "basic ***"))
            .field("tls", &self.endpoint.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Backoff between attempts while the registry is unreachable.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

impl SchemaRegistry {
    /// A client for `cfg` (nothing is contacted yet).
    pub fn new(cfg: &RegistryConfig) -> Result<SchemaRegistry, RegistryError> {
        let shown = mask_userinfo(&cfg.url);
        let bad = |reason: &str| RegistryError::Url {
            url: shown.clone(),
            reason: reason.to_owned(),
        };
        let (rest, https) = if let Some(r) = cfg.url.strip_prefix("http://") {
            (r, false)
        } else if let Some(r) = cfg.url.strip_prefix("https://") {
            (r, true)
        } else {
            return Err(bad("must start with http:// or https://"));
        };
        let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| bad("bad port"))?),
            None => (hostport, if https { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let (url_user, url_pass) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((u, p)) => (Some(u.to_owned()), Some(p.to_owned())),
                None => (Some(u.to_owned()), None),
            },
            None => (None, None),
        };
        let user = cfg.user.clone().or(url_user);
        let password = cfg.password.clone().or(url_pass);
        let auth = user.map(|u| {
            let pair = format!("{u}:{}", password.unwrap_or_default());
            format!("Basic {}", base64(pair.as_bytes()))
        });
        let tls = match https {
            true => Some(Arc::new(
                crate::transport::client_config(&cfg.tls, REGISTRY_TLS_FLAGS)
                    .map_err(|e| RegistryError::Config(e.to_string()))?,
            )),
            false if cfg.tls != TlsFiles::default() => {
                return Err(bad(
                    "--schema-registry-ca/-cert/-key need an https:// registry URL",
                ))
            }
            false => None,
        };
        Ok(SchemaRegistry {
            endpoint: Endpoint {
                host: host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port,
                tls,
                timeout: Duration::from_secs(10),
            },
            base: format!("/{}", path.trim_end_matches('/'))
                .trim_end_matches('/')
                .to_owned(),
            auth,
            shown,
            wait_limit_ms: AtomicU64::new(0),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The URL, password masked.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Put a schema into the cache as if fetched (schemas known up front,
    /// tests).
    pub fn preload(&self, schema: RegisteredSchema) {
        if let Ok(mut c) = self.cache.lock() {
            c.insert(schema.id, Arc::new(schema));
        }
    }

    /// The schema with `id`: from the cache, or one request.
    pub fn schema(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        if let Some(s) = self.cache.lock().ok().and_then(|c| c.get(&id).cloned()) {
            return Ok(s);
        }
        let (status, body) = self.request("GET", &format!("/schemas/ids/{id}"), None)?;
        if status == 404 {
            return Err(RegistryError::NotFound(id));
        }
        let v = parse_answer(status, &body)?;
        let schema = v
            .get("schema")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| RegistryError::Protocol(format!("no `schema` for id {id}")))?;
        let s = Arc::new(RegisteredSchema {
            id,
            schema_type: SchemaType::parse(v.get("schemaType").and_then(serde_json::Value::as_str)),
            schema: schema.to_owned(),
        });
        if let Ok(mut c) = self.cache.lock() {
            c.insert(id, s.clone());
        }
        Ok(s)
    }

    /// Bound how long [`schema_waiting`](Self::schema_waiting) waits out
    /// an outage (`spate check`, which must answer); by default it waits
    /// for as long as the outage lasts (`spate run`: backpressure).
    pub fn limit_waits(&self, limit: Duration) {
        let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX).max(1);
        self.wait_limit_ms.store(ms, Ordering::Relaxed);
    }

    /// [`schema`](Self::schema), retrying transient failures with capped
    /// exponential backoff for as long as they last (each attempt logged),
    /// or up to [`limit_waits`](Self::limit_waits). Only a permanent answer
    /// (unknown id, refused credentials, a TLS failure) or the limit
    /// returns an error.
    pub fn schema_waiting(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        let mut delay = BACKOFF_FIRST;
        let mut attempt = 1u32;
        let limit = match self.wait_limit_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Instant::now() + Duration::from_millis(ms)),
        };
        loop {
            match self.schema(id) {
                Err(e) if e.is_transient() && limit.is_none_or(|l| Instant::now() < l) => {
                    tracing::warn!(registry = %self.shown, schema_id = id, attempt, error = %e, backoff_ms = delay.as_millis() as u64, "schema registry unavailable; this driver waits for the schema (nothing past the message is committed)");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(BACKOFF_MAX);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Register `schema` under `subject` (or find it there); its id.
    pub fn register(
        &self,
        subject: &str,
        ty: SchemaType,
        schema: &str,
    ) -> Result<u32, RegistryError> {
        let mut body = serde_json::json!({ "schema": schema });
        if let Some(t) = ty.wire() {
            body["schemaType"] = t.into();
        }
        let path = format!("/subjects/{}/versions", encode_path(subject));
        let (status, answer) = self.request("POST", &path, Some(&body.to_string()))?;
        let v = parse_answer(status, &answer)?;
        id_of(&v)
    }

    /// The id and text of `version` (a number or `latest`) of `subject`.
    pub fn version(&self, subject: &str, version: &str) -> Result<RegisteredSchema, RegistryError> {
        let path = format!(
            "/subjects/{}/versions/{}",
            encode_path(subject),
            encode_path(version)
        );
        let (status, answer) = self.request("GET", &path, None)?;
        let v = parse_answer(status, &answer)?;
        let schema = v
            .get("schema")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| RegistryError::Protocol("no `schema` in the version".into()))?;
        Ok(RegisteredSchema {
            id: id_of(&v)?,
            schema_type: SchemaType::parse(v.get("schemaType").and_then(serde_json::Value::as_str)),
            schema: schema.to_owned(),
        })
    }

    /// Whether the registry answers and takes the credentials: one
    /// `GET /subjects`. A TLS failure or refused credentials are errors
    /// (configuration: fix and restart); an unreachable registry is a
    /// transient error the caller may tolerate (an outage at start).
    pub fn probe(&self) -> Result<(), RegistryError> {
        let (status, body) = self.request("GET", "/subjects", None)?;
        match status {
            // 401: the credentials are refused. (403 is not: a principal
            // may read schemas by id without being allowed the list.)
            s if s == 401 || s >= 500 => Err(RegistryError::Status {
                status,
                body: body.chars().take(300).collect(),
            }),
            // Any other answer (even 404 from a registry without the
            // endpoint) shows the connection, TLS and login work.
            _ => Ok(()),
        }
    }

    /// One HTTP/1.0 exchange (the server closes the connection).
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), RegistryError> {
        let Endpoint { host, port, .. } = &self.endpoint;
        let mut req = format!(
            "{method} {}{path} HTTP/1.0\r\nHost: {host}:{port}\r\nConnection: close\r\nAccept: application/vnd.schemaregistry.v1+json, application/json\r\n",
            self.base
        );
        if let Some(a) = &self.auth {
            req.push_str(&format!("Authorization: {a}\r\n"));
        }
        let body = body.unwrap_or_default();
        if method == "POST" {
            req.push_str(&format!(
                "Content-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body);
        self.endpoint.exchange(req.as_bytes())
    }
}

fn parse_answer(status: u16, body: &str) -> Result<serde_json::Value, RegistryError> {
    if !(200..300).contains(&status) {
        let body: String = body.chars().take(300).collect();
        return Err(RegistryError::Status { status, body });
    }
    serde_json::from_str(body).map_err(|e| RegistryError::Protocol(format!("not JSON: {e}")))
}

fn id_of(v: &serde_json::Value) -> Result<u32, RegistryError> {
    v.get("id")
        .and_then(serde_json::Value::as_u64)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| RegistryError::Protocol(format!("no `id` in {v}")))
}

/// Percent-encode a path segment.
fn encode_path(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Standard base64 with padding.
pub(crate) fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                out.push(char::from(A[(n >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_auth_and_masking() {
        let r = SchemaRegistry::new(&RegistryConfig {
            url: "http://bob:s3cret@reg.local:8081/api/".into(),
            ..RegistryConfig::default()
        })
        .unwrap();
        assert_eq!(
            (r.endpoint.host.as_str(), r.endpoint.port, r.base.as_str()),
            ("reg.local", 8081, "/api")
        );
        assert_eq!(r.auth.as_deref(), Some("Basic Ym9iOnMzY3JldA=="));
        assert_eq!(r.url(), "http://bob:***@reg.local:8081/api/");
        assert!(!format!("{r:?}").contains("s3cret"));
        let cfg = RegistryConfig {
            url: "http://reg".into(),
            user: Some("u".into()),
            password: Some("pw".into()),
            ..RegistryConfig::default()
        };
        assert!(!format!("{cfg:?}").contains("pw\""));
        let r = SchemaRegistry::new(&cfg).unwrap();
        assert_eq!((r.endpoint.port, r.base.as_str()), (80, ""));
        assert_eq!(
            r.auth.as_deref(),
            Some(format!("Basic {}", base64(b"u:pw")).as_str())
        );
        for bad in ["reg:8081", "ftp://reg", "http://:80", "https://reg:x"] {
            let cfg = RegistryConfig {
                url: bad.into(),
                ..RegistryConfig::default()
            };
            assert!(SchemaRegistry::new(&cfg).is_err(), "{bad}");
        }
    }

    /// A registry on a local port answering each connection with the next
    /// of `statuses`.
    fn canned(statuses: &'static [u16]) -> SchemaRegistry {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for (conn, status) in listener.incoming().zip(statuses) {
                let Ok(mut c) = conn else { return };
                let _ = c.read(&mut [0u8; 4096]);
                let _ = write!(c, "HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\n[]");
            }
        });
        SchemaRegistry::new(&RegistryConfig {
            url: format!("http://127.0.0.1:{port}"),
            ..RegistryConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn the_probe_fails_on_refused_credentials_only() {
        let r = canned(&[200, 404, 403, 401, 503]);
        assert_eq!(r.probe(), Ok(()));
        assert_eq!(r.probe(), Ok(()), "a registry without GET /subjects");
        assert_eq!(r.probe(), Ok(()), "403: logged in, not allowed the list");
        let e = r.probe().unwrap_err();
        assert!(!e.is_transient() && e.to_string().contains("401"), "{e}");
        assert!(r.probe().unwrap_err().is_transient(), "503: an outage");
    }

    #[test]
    fn base64_matches_rfc_4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn https_urls_speak_tls_and_tls_files_need_one() {
        let r = SchemaRegistry::new(&RegistryConfig {
            url: "https://reg.local/".into(),
            ..RegistryConfig::default()
        })
        .unwrap();
        assert_eq!(r.endpoint.port, 443);
        assert!(r.endpoint.tls.is_some());
        let plain = SchemaRegistry::new(&RegistryConfig {
            url: "http://reg.local".into(),
            ..RegistryConfig::default()
        })
        .unwrap();
        assert!(plain.endpoint.tls.is_none());
        let files = |ca: &str| TlsFiles {
            ca: Some(ca.into()),
            ..TlsFiles::default()
        };
        let e = SchemaRegistry::new(&RegistryConfig {
            url: "http://reg.local".into(),
            tls: files("/etc/ssl/ca.pem"),
            ..RegistryConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("need an https://"), "{e}");
        let e = SchemaRegistry::new(&RegistryConfig {
            url: "https://reg.local".into(),
            tls: files("/nonexistent/ca.pem"),
            ..RegistryConfig::default()
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--schema-registry-ca /nonexistent/ca.pem: "),
            "{e}"
        );
        let e = SchemaRegistry::new(&RegistryConfig {
            url: "https://reg.local".into(),
            tls: TlsFiles {
                key: Some("/k.pem".into()),
                ..TlsFiles::default()
            },
            ..RegistryConfig::default()
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--schema-registry-cert and --schema-registry-key go together (mutual TLS needs both)"
        );
        assert!(!RegistryError::Tls(String::new()).is_transient());
    }

    #[test]
    fn transient_and_permanent_answers() {
        assert!(RegistryError::Unavailable(String::new()).is_transient());
        assert!(RegistryError::Status {
            status: 503,
            body: String::new()
        }
        .is_transient());
        assert!(!RegistryError::Status {
            status: 401,
            body: String::new()
        }
        .is_transient());
        assert!(!RegistryError::NotFound(1).is_transient());
    }

    #[test]
    fn an_unreachable_registry_is_transient() {
        // A port nothing listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let r = SchemaRegistry::new(&RegistryConfig {
            url: format!("http://127.0.0.1:{port}"),
            ..RegistryConfig::default()
        })
        .unwrap();
        let e = r.schema(1).unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert!(r.probe().unwrap_err().is_transient());
        // A bounded wait gives up with the outage's error.
        r.limit_waits(Duration::from_millis(300));
        let started = Instant::now();
        let e = r.schema_waiting(1).unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
