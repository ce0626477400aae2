//! Why a broker connection failed, in one line: which endpoint and which
//! step (name lookup, TCP connect, TLS handshake, certificate
//! verification, SASL authentication), from what librdkafka reports; and
//! the startup probe that turns a failure that cannot clear (a wrong CA, a
//! wrong password) into an error instead of librdkafka's retries forever.
//!
//! librdkafka reports a broker failure as an error event
//! (`"<proto>://<host>:<port>/<id>: <what> (after Nms in state S)"`) with a
//! code (`__AUTHENTICATION`, `__SSL`, `__TRANSPORT`, `__RESOLVE`); it
//! repeats an identical one at most every 30 s. rdkafka hands the event to
//! the client context's `error` callback inside `BaseConsumer::poll`, on
//! whichever thread polls: the context records it in a [`FailureLog`]
//! behind a mutex, which the poller ([`probe`], the source, `spate check`)
//! reads afterwards. Nothing here blocks while holding the mutex.

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The step of connecting to a broker that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Step {
    /// Resolving the host name.
    Resolve,
    /// Opening the TCP connection, or the connection closing under it.
    Tcp,
    /// The TLS handshake (protocol mismatch, a client certificate the
    /// broker wants or refuses, ...).
    TlsHandshake,
    /// Verifying the broker's certificate against the CA.
    CertificateVerification,
    /// SASL authentication (mechanism, user name, password).
    Sasl,
}

impl Step {
    /// A failure of this step does not clear by retrying: the
    /// configuration (or the broker's) has to change.
    #[must_use]
    pub fn is_configuration(self) -> bool {
        matches!(
            self,
            Step::TlsHandshake | Step::CertificateVerification | Step::Sasl
        )
    }

    /// What to look at in the configuration.
    fn hint(self) -> &'static str {
        match self {
            Step::Resolve => "check the host name in --brokers",
            Step::Tcp => "check --brokers and that the broker listens there",
            Step::TlsHandshake => {
                "check security.protocol (SSL/SASL_SSL against a TLS listener, \
                 PLAINTEXT/SASL_PLAINTEXT against a plain one) and, if the broker \
                 requires one, the client certificate (ssl.certificate.location, \
                 ssl.key.location)"
            }
            Step::CertificateVerification => {
                "check ssl.ca.location: it must name the CA that signed the broker's certificate"
            }
            Step::Sasl => "check sasl.mechanism, sasl.username and sasl.password",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Resolve => "name lookup",
            Step::Tcp => "TCP connection",
            Step::TlsHandshake => "TLS handshake",
            Step::CertificateVerification => "TLS certificate verification",
            Step::Sasl => "SASL authentication",
        })
    }
}

/// One broker connection failure, as librdkafka reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectFailure {
    /// `host:port` of the broker.
    pub endpoint: String,
    /// librdkafka's name of the connection's protocol (`ssl`,
    /// `sasl_ssl`, `plaintext`, `sasl_plaintext`).
    pub protocol: String,
    /// What failed.
    pub step: Step,
    /// librdkafka's explanation, without its "(after Nms in state S)".
    pub detail: String,
}

impl ConnectFailure {
    /// One occurrence is enough to know the configuration is wrong: a
    /// certificate that does not verify, a SASL refusal, a TLS handshake
    /// the peer answered with an error. (A handshake cut off by a
    /// disconnect might be a broker restarting: it counts only if it
    /// persists.)
    #[must_use]
    pub fn is_definite(&self) -> bool {
        match self.step {
            Step::CertificateVerification | Step::Sasl => true,
            Step::TlsHandshake => !self.detail.contains("Disconnected"),
            Step::Resolve | Step::Tcp => false,
        }
    }
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Kafka broker {} ({}): {} failed: {}; {}",
            self.endpoint,
            self.protocol,
            self.step,
            self.detail,
            self.step.hint()
        )
    }
}

/// The failure an error event describes, if it is about one broker's
/// connection. `reason` is librdkafka's text
/// (`"ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: ..."`).
#[must_use]
pub fn classify(code: Option<RDKafkaErrorCode>, reason: &str) -> Option<ConnectFailure> {
    // A log line ("FAIL" facility) starts with the thread's name.
    let reason = match reason.strip_prefix("[thrd:") {
        Some(rest) => rest.split_once("]: ").map_or(rest, |(_, r)| r),
        None => reason,
    };
    let (name, what) = reason.split_once(": ")?;
    // librdkafka leaves the protocol out of a plaintext broker's name.
    let (protocol, rest) = name.split_once("://").unwrap_or(("plaintext", name));
    let endpoint = rest.rsplit_once('/').map_or(rest, |(e, _)| e);
    if !endpoint.contains(':') || endpoint.contains(' ') {
        // "GroupCoordinator" and other logical brokers: no endpoint.
        return None;
    }
    let (detail, state) = match what.rfind(" (after ") {
        Some(i) => (&what[..i], state_of(&what[i..])),
        None => (what, None),
    };
    let mut step = step_of(code, &detail.to_ascii_lowercase())?;
    let mut detail = detail.trim().to_string();
    if step == Step::Tcp
        && state.as_deref() == Some("APIVERSION_QUERY")
        && !protocol.contains("ssl")
    {
        // Closed at the first request: a TLS listener spoken to in plain.
        step = Step::TlsHandshake;
        detail.push_str(
            " at the first request, without TLS (a TLS listener needs \
             security.protocol=SSL or SASL_SSL)",
        );
    }
    Some(ConnectFailure {
        endpoint: endpoint.to_string(),
        protocol: protocol.to_string(),
        step,
        detail,
    })
}

/// `STATE` of librdkafka's suffix `" (after Nms in state STATE[, ...])"`.
fn state_of(suffix: &str) -> Option<String> {
    let (_, rest) = suffix.split_once(" in state ")?;
    let end = rest.find([',', ')']).unwrap_or(rest.len());
    Some(rest[..end].to_string())
}

/// The step a failure's (lower-cased) text and code point to.
fn step_of(code: Option<RDKafkaErrorCode>, lower: &str) -> Option<Step> {
    Some(
        if lower.contains("certificate verify failed") || lower.contains("could not be verified") {
            Step::CertificateVerification
        } else if code == Some(RDKafkaErrorCode::Authentication) || lower.contains("sasl") {
            Step::Sasl
        } else if code == Some(RDKafkaErrorCode::SSL) || lower.contains("ssl") {
            Step::TlsHandshake
        } else if code == Some(RDKafkaErrorCode::Resolve) || lower.starts_with("failed to resolve")
        {
            Step::Resolve
        } else if code == Some(RDKafkaErrorCode::BrokerTransportFailure)
            || lower.starts_with("connect to")
            || lower.contains("disconnected")
            || lower.contains("connection")
        {
            Step::Tcp
        } else {
            return None;
        },
    )
}

/// One broker's failures of one step, as they kept coming.
#[derive(Clone, Debug)]
struct Seen {
    failure: ConnectFailure,
    /// The first of an unbroken series (no gap longer than [`GAP`]).
    first: Instant,
    last: Instant,
}

/// librdkafka repeats an identical broker error at most every 30 s: a
/// failure not seen again for longer than this has stopped.
const GAP: Duration = Duration::from_secs(45);

/// The broker failures seen, per endpoint and step.
#[derive(Debug, Default)]
pub struct FailureLog {
    seen: HashMap<(String, Step), Seen>,
    /// In the order first seen, for a stable report.
    order: Vec<(String, Step)>,
}

impl FailureLog {
    /// Record an error event; returns the failure if it was one.
    pub fn record(
        &mut self,
        code: Option<RDKafkaErrorCode>,
        reason: &str,
        now: Instant,
    ) -> Option<ConnectFailure> {
        let failure = classify(code, reason)?;
        let key = (failure.endpoint.clone(), failure.step);
        match self.seen.get_mut(&key) {
            Some(s) => {
                if now.saturating_duration_since(s.last) > GAP {
                    s.first = now;
                }
                s.last = now;
                s.failure = failure.clone();
            }
            None => {
                self.order.push(key.clone());
                self.seen.insert(
                    key,
                    Seen {
                        failure: failure.clone(),
                        first: now,
                        last: now,
                    },
                );
            }
        }
        Some(failure)
    }

    /// Every failure seen, one per endpoint and step, first seen first.
    #[must_use]
    pub fn all(&self) -> Vec<ConnectFailure> {
        self.order
            .iter()
            .filter_map(|k| self.seen.get(k))
            .map(|s| s.failure.clone())
            .collect()
    }

    /// The first configuration failure (TLS, certificate, SASL) that has
    /// kept coming for at least `persist` and is still coming at `now`.
    #[must_use]
    pub fn persisting(&self, now: Instant, persist: Duration) -> Option<ConnectFailure> {
        self.order
            .iter()
            .filter_map(|k| self.seen.get(k))
            .filter(|s| s.failure.step.is_configuration())
            .find(|s| {
                now.saturating_duration_since(s.last) <= GAP
                    && s.last.saturating_duration_since(s.first) >= persist
            })
            .map(|s| s.failure.clone())
    }
}

/// A consumer context that keeps a [`FailureLog`] of what its `error`
/// callback saw.
pub trait Diagnosed: ConsumerContext {
    /// The log the `error` callback fills.
    fn failure_log(&self) -> &Mutex<FailureLog>;
}

/// Record an error event in `log` (for a context's `error` callback).
pub fn record_error(log: &Mutex<FailureLog>, error: &KafkaError, reason: &str) {
    log.lock().unwrap_or_else(PoisonError::into_inner).record(
        error.rdkafka_error_code(),
        reason,
        Instant::now(),
    );
}

/// What a [`probe`] found.
#[derive(Debug)]
pub enum Probe {
    /// A broker answered a metadata request: `(id, host:port)` of each
    /// broker it named.
    Answered(Vec<(i32, String)>),
    /// A broker connection failed in a way `stop` accepted.
    Failed(ConnectFailure),
    /// No broker answered by the deadline; the last error of the request
    /// and every connection failure seen.
    NoAnswer(String, Vec<ConnectFailure>),
}

/// Ask the brokers for metadata until one answers, `stop` accepts a
/// failure the context recorded, or `deadline` passes. Serves the
/// consumer's queue between attempts (so the `error` callback runs), which
/// is only right before the consumer subscribes or is assigned anything.
pub fn probe<C: Diagnosed>(
    consumer: &BaseConsumer<C>,
    deadline: Duration,
    stop: impl Fn(&ConnectFailure) -> bool,
) -> Probe {
    let started = Instant::now();
    let attempt = Duration::from_millis(500);
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        let last = match consumer.fetch_metadata(None, attempt.min(left)) {
            Ok(md) => {
                let brokers = md
                    .brokers()
                    .iter()
                    .map(|b| (b.id(), format!("{}:{}", b.host(), b.port())))
                    .collect();
                return Probe::Answered(brokers);
            }
            Err(e) => e.to_string(),
        };
        while consumer.poll(Duration::ZERO).is_some() {}
        let seen = consumer
            .context()
            .failure_log()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .all();
        if let Some(f) = seen.iter().find(|f| stop(f)) {
            return Probe::Failed(f.clone());
        }
        if started.elapsed() >= deadline {
            return Probe::NoAnswer(last, seen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode as C;

    /// librdkafka 2.12's texts, as the test brokers produced them.
    const CASES: &[(Option<C>, &str, &str, &str, Step)] = &[
        (
            Some(C::SSL),
            "ssl://127.0.0.1:22093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured or root CA certificates are installed (install ca-certificates package) (after 3ms in state SSL_HANDSHAKE)",
            "127.0.0.1:22093",
            "ssl",
            Step::CertificateVerification,
        ),
        (
            Some(C::Authentication),
            "sasl_ssl://127.0.0.1:22095/bootstrap: SASL authentication error: SASL SCRAM authentication failed: broker responded with invalid-proof (after 32ms in state AUTH_REQ, 1 identical error(s) suppressed)",
            "127.0.0.1:22095",
            "sasl_ssl",
            Step::Sasl,
        ),
        (
            Some(C::BrokerTransportFailure),
            "127.0.0.1:22199/bootstrap: Connect to ipv4#127.0.0.1:22199 failed: Connection refused (after 0ms in state CONNECT)",
            "127.0.0.1:22199",
            "plaintext",
            Step::Tcp,
        ),
        (
            Some(C::BrokerTransportFailure),
            "ssl://127.0.0.1:22092/bootstrap: SSL handshake failed: Disconnected: connection reset by peer: connecting to a PLAINTEXT broker listener? (after 2ms in state SSL_HANDSHAKE)",
            "127.0.0.1:22092",
            "ssl",
            Step::TlsHandshake,
        ),
        (
            // stunnel with verify = 2, and no client certificate.
            Some(C::SSL),
            "ssl://127.0.0.1:22180/bootstrap: Receive failed: error:0A00045C:SSL routines::tlsv13 alert certificate required: SSL alert number 116 (after 3ms in state UP)",
            "127.0.0.1:22180",
            "ssl",
            Step::TlsHandshake,
        ),
        (
            // The "FAIL" log line of a plaintext client at a TLS listener.
            None,
            "[thrd:127.0.0.1:22093/bootstrap]: 127.0.0.1:22093/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 1ms in state APIVERSION_QUERY)",
            "127.0.0.1:22093",
            "plaintext",
            Step::TlsHandshake,
        ),
        (
            Some(C::Resolve),
            "sasl_ssl://nohost.invalid:9092/bootstrap: Failed to resolve 'nohost.invalid:9092': Name or service not known (after 2ms in state CONNECT)",
            "nohost.invalid:9092",
            "sasl_ssl",
            Step::Resolve,
        ),
    ];

    #[test]
    fn each_failure_names_its_endpoint_and_step() {
        for (code, reason, endpoint, protocol, step) in CASES {
            let f = classify(*code, reason).unwrap_or_else(|| panic!("{reason}"));
            assert_eq!(&f.endpoint, endpoint, "{reason}");
            assert_eq!(&f.protocol, protocol, "{reason}");
            assert_eq!(f.step, *step, "{reason}");
            assert!(!f.detail.contains("(after "), "{}", f.detail);
            let line = f.to_string();
            if f.endpoint == "127.0.0.1:22093" && f.protocol == "plaintext" {
                assert!(line.contains("security.protocol=SSL"), "{line}");
            }
            assert!(!line.contains('\n'));
            assert!(
                line.starts_with(&format!("Kafka broker {endpoint} ")),
                "{line}"
            );
        }
    }

    #[test]
    fn events_about_no_broker_are_not_failures() {
        assert_eq!(
            classify(Some(C::AllBrokersDown), "1/1 brokers are down"),
            None
        );
        assert_eq!(
            classify(
                Some(C::BrokerTransportFailure),
                "GroupCoordinator: Disconnected (after 5ms in state UP)"
            ),
            None
        );
    }

    #[test]
    fn a_configuration_failure_persists_only_while_it_keeps_coming() {
        let (code, reason) = (Some(C::Authentication), CASES[1].1);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let persist = Duration::from_secs(60);
        let mut log = FailureLog::default();
        log.record(code, reason, at(0));
        log.record(code, reason, at(30));
        assert_eq!(log.persisting(at(30), persist), None, "30 s < 60 s");
        log.record(code, reason, at(60));
        let f = log.persisting(at(61), persist).expect("60 s of failures");
        assert_eq!(f.step, Step::Sasl);
        assert_eq!(log.persisting(at(200), persist), None, "stopped coming");
        // A failure after a long quiet spell starts a new series.
        log.record(code, reason, at(300));
        assert_eq!(log.persisting(at(300), persist), None);
        // Connection refused is an outage, never a configuration failure.
        let mut tcp = FailureLog::default();
        for s in [0, 30, 60, 90] {
            tcp.record(
                Some(C::BrokerTransportFailure),
                "plaintext://h:1/bootstrap: Connect to ipv4#1.2.3.4:1 failed: Connection refused",
                at(s),
            );
        }
        assert_eq!(tcp.persisting(at(90), persist), None);
        assert_eq!(tcp.all().len(), 1);
    }
}
