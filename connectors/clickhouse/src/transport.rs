//! [`Transport`]: the one HTTP(S) connection pool every [`crate::ChClient`]
//! of a sink shares, and the TLS it speaks for `https://` URLs.
//!
//! Built once at start on the caller's thread ([`Transport::new`], from
//! the [`TlsFiles`] the user named); insert workers, discovery, the
//! readiness probe and `spate check` then share it through cloned clients
//! (tokio tasks on the I/O runtime). TLS is rustls with the `ring`
//! provider: the server's certificate is verified against the system's
//! root certificates (`rustls-native-certs`: `/etc/ssl/certs`, or
//! `SSL_CERT_FILE`/`SSL_CERT_DIR`) plus the `--clickhouse-ca` file, and a
//! client certificate is presented when `--clickhouse-cert` and
//! `--clickhouse-key` are given. There is no way to turn verification off.
//!
//! Secrets rotate without a restart: [`TlsSettings::reload`] reads the TLS
//! files again and the connections made after it use them (open ones keep
//! the settings they were made with), and a [`SharedSecret`] password is
//! read by every request as it is sent.
//!
//! [`describe_tls`] turns a failed request's error chain into one line
//! naming the TLS failure (unknown CA, a server asking for a client
//! certificate, ...), so a start-up failure says what to fix.

use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};
use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

/// TCP keepalive on pooled connections (the clickhouse crate's default).
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);
/// Idle pooled connections are closed before the server's 3 s keep-alive
/// timeout closes them under a request (the clickhouse crate's default).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

/// The TLS files the user named. Paths, not secrets: the key file's
/// contents are read here and never printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of CA certificates trusted in addition to the system's.
    pub ca: Option<PathBuf>,
    /// PEM file of the client certificate chain (mutual TLS).
    pub cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub key: Option<PathBuf>,
}

/// The flags that name an endpoint's TLS files, for errors and hints
/// (ClickHouse: `--clickhouse-ca`...; the schema registry has its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsFlags {
    /// The CA file's flag.
    pub ca: &'static str,
    /// The client certificate's flag.
    pub cert: &'static str,
    /// The client key's flag.
    pub key: &'static str,
}

impl TlsFlags {
    /// `--clickhouse-ca`, `--clickhouse-cert`, `--clickhouse-key`.
    pub const CLICKHOUSE: TlsFlags = TlsFlags {
        ca: "--clickhouse-ca",
        cert: "--clickhouse-cert",
        key: "--clickhouse-key",
    };
}

/// Why the TLS settings could not be built (a configuration error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{flag} {}: {message}", path.display())]
    File {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Only one of the client certificate and key flags was given.
    #[error("{} and {} go together (mutual TLS needs both)", .0.cert, .0.key)]
    HalfClientIdentity(TlsFlags),
    /// rustls refused the settings (e.g. a key that does not match).
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The TLS settings of a sink: its files, and the rustls settings built
/// from them, shared by every [`Transport`] made from a clone. Read when
/// the first transport is built (a bad file fails the start), and again on
/// [`TlsSettings::reload`], after which each new connection uses the new
/// settings; connections already open keep theirs.
#[derive(Clone, Default)]
pub struct TlsSettings {
    files: TlsFiles,
    live: Arc<RwLock<Option<Arc<ClientConfig>>>>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.files.fmt(f)
    }
}

impl TlsSettings {
    /// Settings for `files`, read on first use.
    #[must_use]
    pub fn new(files: TlsFiles) -> Self {
        Self {
            files,
            live: Arc::default(),
        }
    }

    /// The files these settings are read from.
    #[must_use]
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The settings in force, read from the files if none are yet.
    fn current(&self) -> Result<Arc<ClientConfig>, TlsError> {
        if let Some(c) = self
            .live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Ok(c.clone());
        }
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = live.as_ref() {
            return Ok(c.clone());
        }
        let c = Arc::new(client_config(&self.files, TlsFlags::CLICKHOUSE)?);
        *live = Some(c.clone());
        Ok(c)
    }

    /// Read the files again (a renewed certificate, key or CA). On success
    /// every connection made from now on uses them; on failure (a file
    /// half-written, a key that does not match its certificate) the
    /// settings in force stay, and the error says which file is wrong.
    pub fn reload(&self) -> Result<(), TlsError> {
        let c = Arc::new(client_config(&self.files, TlsFlags::CLICKHOUSE)?);
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = Some(c);
        Ok(())
    }
}

/// hyper-rustls' connector made anew for each connection from the TLS
/// settings in force, so a reload reaches the next connection.
#[derive(Clone)]
struct Connector {
    http: HttpConnector,
    tls: TlsSettings,
}

type Connecting = <HttpsConnector<HttpConnector> as tower_service::Service<http::Uri>>::Future;

impl tower_service::Service<http::Uri> for Connector {
    type Response = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
    type Error = Box<dyn StdError + Send + Sync>;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::<http::Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        match self.tls.current() {
            // HTTP/1.1 only: no ALPN, as HttpsConnectorBuilder::enable_http1 leaves it.
            Ok(config) => HttpsConnector::from((self.http.clone(), config)).call(uri),
            Err(e) => Box::pin(std::future::ready(Err(e.into()))),
        }
    }
}

/// The HTTP(S) client shared by every `ChClient` of a sink: a
/// `clickhouse::Client` prototype holding the connection pool. Cheap to
/// clone; clones share the pool.
#[derive(Clone, Debug)]
pub struct Transport {
    base: clickhouse::Client,
}

impl Transport {
    /// A transport for `http://` and `https://` URLs with the given TLS
    /// settings. Reads their files (and the system's roots) now, unless
    /// another transport of the same settings did, so a bad file fails at
    /// start.
    pub fn new(tls: &TlsSettings) -> Result<Self, TlsError> {
        tls.current()?;
        let mut http = HttpConnector::new();
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.enforce_http(false);
        let connector = Connector {
            http,
            tls: tls.clone(),
        };
        let hyper = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector);
        Ok(Self {
            base: clickhouse::Client::with_http_client(hyper),
        })
    }

    /// A transport with the system's roots only and no client certificate.
    pub fn system() -> Result<Self, TlsError> {
        Self::new(&TlsSettings::default())
    }

    /// A fresh client configuration over the shared pool.
    pub(crate) fn client(&self) -> clickhouse::Client {
        self.base.clone()
    }
}

/// The system's root certificates, read and parsed once per process:
/// every pipeline (hundreds when routing to a table per topic) builds its
/// client settings from them, and reading the store costs milliseconds
/// each time. Unreadable entries are skipped, as every TLS client does; a
/// missing store only matters for `https://` URLs, where the handshake
/// then fails with "unknown issuer". The CA file of `--ca` is not cached:
/// a reload reads it again.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: std::sync::OnceLock<RootCertStore> = std::sync::OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        roots
    })
}

/// rustls' client settings: system roots plus the CA file, and the client
/// identity when both halves are given; errors name the files by `flags`.
/// Shared by every TLS endpoint (ClickHouse here, the schema registry).
pub(crate) fn client_config(files: &TlsFiles, flags: TlsFlags) -> Result<ClientConfig, TlsError> {
    let mut roots = system_roots().clone();
    if let Some(ca) = &files.ca {
        let certs = read_certs(flags.ca, ca)?;
        for cert in certs {
            roots.add(cert).map_err(|e| file_error(flags.ca, ca, e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(match (&files.cert, &files.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = read_certs(flags.cert, cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| file_error(flags.key, key, format!("no private key: {e}")))?;
            builder.with_client_auth_cert(chain, key)?
        }
        _ => return Err(TlsError::HalfClientIdentity(flags)),
    })
}

fn read_certs(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(flag, path, e))?;
    if certs.is_empty() {
        return Err(file_error(flag, path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

fn file_error(flag: &'static str, path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        flag,
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// A secret (a password): its `Debug` and `Display` print `***`, so no
/// log line, error or `{:?}` of a settings struct can show it. Read it
/// with [`Secret::expose`] where it is sent, and nowhere else.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret's text, for the request that sends it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// A password that may be replaced while clients use it
/// (`--password-file` rotating): every request reads the one current when
/// it is sent. Clones share it; prints as `***`.
#[derive(Clone, Debug, Default)]
pub struct SharedSecret(Arc<RwLock<Secret>>);

impl SharedSecret {
    /// Share `secret`.
    #[must_use]
    pub fn new(secret: Secret) -> Self {
        Self(Arc::new(RwLock::new(secret)))
    }

    /// The password now in force.
    #[must_use]
    pub fn current(&self) -> Secret {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replace the password for every request sent from now on.
    pub fn replace(&self, secret: Secret) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = secret;
    }
}

/// If a TLS failure is somewhere in `err`'s chain, one line saying what
/// failed and what to do about it (the ClickHouse flags).
pub(crate) fn describe_tls(err: &(dyn StdError + 'static)) -> Option<String> {
    describe_tls_for(err, TlsFlags::CLICKHOUSE)
}

/// [`describe_tls`], the hints naming `flags`.
pub(crate) fn describe_tls_for(err: &(dyn StdError + 'static), flags: TlsFlags) -> Option<String> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(line) = describe_one(e, flags) {
            return Some(line);
        }
        next = e.source();
    }
    None
}

/// `e` itself, or the errors inside its `io::Error` wrappers, whose
/// `source()` skips the error they wrap (hyper-rustls wraps tokio-rustls'
/// `io::Error`, which wraps rustls' error, in another `io::Error`).
fn describe_one(mut e: &(dyn StdError + 'static), flags: TlsFlags) -> Option<String> {
    loop {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(explain(tls, flags));
        }
        if is_handshake_eof(e) {
            return Some(format!(
                "TLS error: the server closed the connection during the handshake (it may require a client certificate: {} and {}, or not trust the one given)",
                flags.cert, flags.key
            ));
        }
        e = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
}

/// tokio-rustls' error when the server hangs up mid-handshake, as
/// ClickHouse (OpenSSL) does when a required client certificate is missing.
fn is_handshake_eof(e: &(dyn StdError + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|io| {
        io.kind() == std::io::ErrorKind::UnexpectedEof && io.to_string() == "tls handshake eof"
    })
}

/// One line for a rustls error, with a hint naming `flags`.
pub(crate) fn explain(e: &rustls::Error, flags: TlsFlags) -> String {
    use rustls::Error as E;
    let hint = match e {
        E::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "the server's certificate is not signed by a trusted CA: name its CA with {}",
            flags.ca
        ),
        E::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "the server's certificate does not name the host of the URL".into(),
        E::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired".into(),
        E::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::HandshakeFailure
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied,
        ) => format!("the server refused the handshake: it may require a client certificate ({} and {}) or not trust the one given", flags.cert, flags.key),
        E::InvalidMessage(_) => "the server did not answer with TLS: is this an HTTPS port?".into(),
        _ => String::new(),
    };
    if hint.is_empty() {
        format!("TLS error: {e}")
    } else {
        format!("TLS error: {e} ({hint})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_an_identity_and_missing_files_are_config_errors() {
        let files = TlsFiles {
            cert: Some("/nonexistent/cert.pem".into()),
            ..TlsFiles::default()
        };
        assert!(matches!(
            Transport::new(&TlsSettings::new(files.clone())),
            Err(TlsError::HalfClientIdentity(TlsFlags::CLICKHOUSE))
        ));
        let files = TlsFiles {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsFiles::default()
        };
        let e = Transport::new(&TlsSettings::new(files.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--clickhouse-ca /nonexistent/ca.pem: "),
            "{e}"
        );
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let path = std::env::temp_dir().join(format!("spate-tls-empty-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let files = TlsFiles {
            ca: Some(path.clone()),
            ..TlsFiles::default()
        };
        let e = Transport::new(&TlsSettings::new(files.clone()))
            .unwrap_err()
            .to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(e.contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?} {:?}", Some(&s)), "*** *** Some(***)");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn tls_errors_are_found_inside_io_errors() {
        let inner = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, inner);
        let line = describe_tls(&io).unwrap();
        // As hyper-rustls returns it: wrapped once more.
        let twice = std::io::Error::other(io);
        assert!(describe_tls(&twice).unwrap().contains("UnknownIssuer"));
        assert!(
            line.contains("UnknownIssuer") && line.contains("--clickhouse-ca"),
            "{line}"
        );
        let alert = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        let line = describe_tls(&alert).unwrap();
        assert!(line.contains("--clickhouse-cert"), "{line}");
        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        assert!(describe_tls(&eof).unwrap().contains("client certificate"));
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(describe_tls(&plain), None);
    }
}
