//! The ClickHouse 18.16 server over HTTPS (`scripts/clickhouse-https.sh`):
//! its URLs, the test CA and client certificate, and the password user.

use super::env::skip_requested;

/// Addresses and files of the HTTPS test server, from `build/services.env`.
#[derive(Clone, Debug)]
pub struct HttpsCh {
    /// `https://` URL that requires a client certificate.
    pub mtls_url: String,
    /// `https://` URL (stunnel) that asks for none.
    pub tls_url: String,
    /// `http://` URL of the same server as `mtls_url`: set-up and checks.
    pub plain_url: String,
    /// The CA that signed the server and client certificates.
    pub ca: String,
    /// A CA that signed neither.
    pub other_ca: String,
    /// The client certificate and its key.
    pub cert: String,
    pub key: String,
    /// A user with a password, and the file holding the password.
    pub user: String,
    pub password_file: String,
}

fn need(name: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not set: run `scripts/services.sh up` and `source build/services.env`"
            )
        })
}

/// The HTTPS server; `None` only when `SPATE_SKIP_INTEGRATION=1`.
pub fn https_clickhouse() -> Option<HttpsCh> {
    if skip_requested() {
        return None;
    }
    Some(HttpsCh {
        mtls_url: need("SPATE_TEST_CLICKHOUSE_HTTPS_URL"),
        tls_url: need("SPATE_TEST_CLICKHOUSE_TLS_URL"),
        plain_url: need("SPATE_TEST_CLICKHOUSE_HTTPS_PLAIN_URL"),
        ca: need("SPATE_TEST_CLICKHOUSE_HTTPS_CA"),
        other_ca: need("SPATE_TEST_CLICKHOUSE_HTTPS_OTHER_CA"),
        cert: need("SPATE_TEST_CLICKHOUSE_HTTPS_CLIENT_CERT"),
        key: need("SPATE_TEST_CLICKHOUSE_HTTPS_CLIENT_KEY"),
        user: need("SPATE_TEST_CLICKHOUSE_HTTPS_USER"),
        password_file: need("SPATE_TEST_CLICKHOUSE_HTTPS_PASSWORD_FILE"),
    })
}

impl HttpsCh {
    /// `--clickhouse-ca`, `--clickhouse-cert`, `--clickhouse-key`.
    pub fn mtls_args(&self) -> Vec<String> {
        [
            "--clickhouse-ca",
            &self.ca,
            "--clickhouse-cert",
            &self.cert,
            "--clickhouse-key",
            &self.key,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// The password user's password.
    pub fn password(&self) -> String {
        std::fs::read_to_string(&self.password_file)
            .unwrap_or_else(|e| panic!("{}: {e}", self.password_file))
            .trim()
            .to_owned()
    }
}
