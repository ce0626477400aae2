//! Secrets that rotate: the password and TLS files spate was started with
//! are read again every [`POLL`], and a file whose contents changed is
//! applied to the running clients without a restart and without leaving
//! the consumer group (Kubernetes rewrites a mounted Secret in place;
//! cert-manager renews certificates before they expire):
//!
//! - `--password-file`: every ClickHouse request sends the new password
//!   from then on (the sink's clients and the dead-letter table's);
//! - `--clickhouse-{ca,cert,key}`: each new ClickHouse connection uses the
//!   new CA, certificate and key; open connections keep theirs;
//! - `--kafka-password-file`: librdkafka's consumer (and the dead-letter
//!   producer) authenticates with the new password from its next broker
//!   connection on (`rd_kafka_sasl_set_credentials`);
//! - librdkafka's own TLS files (`-X ssl.ca.location`,
//!   `ssl.certificate.location`, `ssl.key.location`) and the schema
//!   registry's files are read only when their client is made (librdkafka
//!   has no way to reload them): a change stops the pipelines as SIGTERM
//!   does (drained, committed) and starts them again in this process, with
//!   new clients. A static member (`group.instance.id`, as the Kubernetes
//!   manifests set it) rejoins with its partitions and no rebalance; a
//!   dynamic one leaves and rejoins (one rebalance).
//!
//! Each change is logged (the flag and file, never the contents) and
//! counted in `spate_secret_reloads_total{file, outcome}`, where outcome is
//! `reloaded`, `refused` (unreadable, empty, or a key that does not match
//! its certificate: the secret in force stays, and the next change is
//! tried again) or `restarted`.
//!
//! A tokio task on the I/O runtime; it ends with the runtime.

use crate::cli::RunArgs;
use crate::settings::Validated;
use crate::tls_files::Field;
use prometheus::{IntCounterVec, Opts, Registry};
use spate_clickhouse::Secret;
use spate_core::metrics::Metrics;
use spate_kafka::{KafkaSourceConfig, SaslCredentials};
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// How often the files are read again. Kubernetes takes up to a minute or
/// two to update a mounted Secret, so this adds little to a rotation.
pub(crate) const POLL: Duration = Duration::from_secs(2);

/// What a change of a watched file does.
pub(crate) enum Apply {
    /// Apply it to the running clients; the error says why it was not.
    Live(Box<dyn FnMut() -> Result<(), String> + Send>),
    /// The client reads the file only when it is made: stop the pipelines
    /// (drained and committed, as at SIGTERM) and start them again in this
    /// process (`crate::run::assemble`), with new clients.
    Restart(Arc<Notify>),
}

/// A set of files applied together (a certificate and its key), each
/// under the flag that names it.
pub(crate) struct Watch {
    /// Each file's flag, for logs and the metric's `file` label.
    flags: Vec<String>,
    paths: Vec<PathBuf>,
    apply: Apply,
    /// Each file's contents as last seen (`None`: unreadable then).
    seen: Vec<Option<u64>>,
    /// A file is missing or unreadable now (logged once per stretch).
    unreadable: bool,
}

impl Watch {
    /// Watch the `(flag, path)` files, applied together, from their
    /// contents in `baseline` (as they were when read at start), or as
    /// they are now.
    pub(crate) fn new(named: Vec<(String, PathBuf)>, apply: Apply, baseline: &Baseline) -> Self {
        let (flags, paths): (Vec<String>, Vec<PathBuf>) = named.into_iter().unzip();
        let seen = paths
            .iter()
            .map(|p| baseline.0.get(p).copied().unwrap_or_else(|| fingerprint(p)))
            .collect();
        Self {
            flags,
            paths,
            apply,
            seen,
            unreadable: false,
        }
    }
}

/// The secret files' contents as they were before a start read them, so
/// that a change made while the start ran is still seen as one.
#[derive(Default)]
pub(crate) struct Baseline(HashMap<PathBuf, Option<u64>>);

impl Baseline {
    /// Every secret file the pipelines name, as it is now.
    pub(crate) fn of(pipelines: &[(String, RunArgs)]) -> Self {
        let mut all = HashMap::new();
        for (_, a) in pipelines {
            let files = (a.clickhouse_files.named(ALL).into_iter())
                .chain(a.registry_files.named(ALL))
                .chain(a.kafka_files.named(ALL))
                .map(|(_, path)| path);
            let kafka = (a.properties.iter())
                .filter(|(k, _)| KAFKA_TLS_FILES.contains(&k.as_str()))
                .map(|(_, v)| PathBuf::from(v));
            for path in files.chain(kafka) {
                let seen = fingerprint(&path);
                all.insert(path, seen);
            }
        }
        Self(all)
    }
}

/// Every file a service's flags name.
const ALL: &[Field] = &[Field::PasswordFile, Field::Ca, Field::Cert, Field::Key];
/// Its TLS files.
const TLS: &[Field] = &[Field::Ca, Field::Cert, Field::Key];
/// Its password file.
const PASSWORD: &[Field] = &[Field::PasswordFile];

/// A file's contents, hashed (the secret itself is not kept).
fn fingerprint(path: &PathBuf) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

/// `spate_secret_reloads_total` so far, by `(file, outcome)`, carried into
/// the counter at each start so that it never goes back (the process now
/// keeps one registry across starts again, so this is a backstop).
#[derive(Clone, Default)]
pub(crate) struct ReloadTotals(Arc<Mutex<BTreeMap<(String, String), u64>>>);

/// `spate_secret_reloads_total{file, outcome}`.
#[derive(Clone)]
pub(crate) struct Reloads {
    counter: IntCounterVec,
    totals: ReloadTotals,
}

impl Reloads {
    /// The counter on `metrics`, starting from `totals`.
    pub(crate) fn of(metrics: &Metrics, totals: &ReloadTotals) -> Self {
        let counter = metrics.extension(|registry: &Registry| {
            let c = IntCounterVec::new(
                Opts::new(
                    "spate_secret_reloads_total",
                    "Changes of a password or TLS file seen while running, by the flag naming the \
                     file and outcome: reloaded, refused (the secret in force stays), restarted (the \
                     pipelines started again in the process, with new clients)",
                ),
                &["file", "outcome"],
            )
            .expect("a valid metric");
            // Registered once per registry (extension); a clash is a bug.
            registry
                .register(Box::new(c.clone()))
                .expect("spate_secret_reloads_total registered once");
            c
        });
        let carried = totals.0.lock().unwrap_or_else(PoisonError::into_inner);
        for ((file, outcome), n) in carried.iter() {
            let series = counter.with_label_values(&[file.as_str(), outcome.as_str()]);
            series.inc_by(n.saturating_sub(series.get()));
        }
        drop(carried);
        Reloads {
            counter,
            totals: totals.clone(),
        }
    }

    /// Make the series of `file` and `outcome` exist (at 0 or what was
    /// carried), so that the first change shows as an increase.
    fn declare(&self, file: &str, outcome: &str) {
        self.counter.with_label_values(&[file, outcome]);
    }

    fn count(&self, file: &str, outcome: &str) {
        self.counter.with_label_values(&[file, outcome]).inc();
        let mut totals = self.totals.0.lock().unwrap_or_else(PoisonError::into_inner);
        *totals
            .entry((file.to_owned(), outcome.to_owned()))
            .or_default() += 1;
    }
}

/// Look at every watch once: apply, log and count what changed (each
/// changed file under its flag).
pub(crate) fn check(watches: &mut [Watch], reloads: &Reloads) {
    for w in watches.iter_mut() {
        let now: Vec<Option<u64>> = w.paths.iter().map(fingerprint).collect();
        if now.iter().any(Option::is_none) {
            // Mid-swap, or removed: keep what is in force, look again later.
            if !w.unreadable {
                let (flags, files) = (w.flags.join(","), names(&w.paths));
                tracing::warn!(%flags, %files, "a secret file cannot be read; the secret in force stays until it can");
                w.unreadable = true;
            }
            continue;
        }
        w.unreadable = false;
        let changed: Vec<usize> = (0..now.len()).filter(|&i| now[i] != w.seen[i]).collect();
        if changed.is_empty() {
            continue;
        }
        w.seen = now;
        let flags: Vec<&str> = changed.iter().map(|&i| w.flags[i].as_str()).collect();
        let paths: Vec<PathBuf> = changed.iter().map(|&i| w.paths[i].clone()).collect();
        let (label, files) = (flags.join(","), names(&paths));
        let outcome = match &mut w.apply {
            Apply::Restart(restart) => {
                tracing::warn!(flags = %label, %files, "a secret file changed; its client reads it only when made: the pipelines stop (drained and committed) and start again in this process with new clients");
                restart.notify_one();
                "restarted"
            }
            Apply::Live(apply) => match apply() {
                Ok(()) => {
                    tracing::info!(flags = %label, %files, "a secret file changed; reloaded (new connections and requests use it)");
                    "reloaded"
                }
                Err(e) => {
                    tracing::warn!(flags = %label, %files, error = %e, "a secret file changed but cannot be used; the secret in force stays");
                    "refused"
                }
            },
        };
        for flag in flags {
            reloads.count(flag, outcome);
        }
    }
}

fn names(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(",")
}

/// Check `watches` every [`POLL`] on `io` (on its blocking threads: a TLS
/// reload reads the system's root certificates) until the runtime ends;
/// the counter's series of every watched file exist from now on.
pub(crate) fn spawn(
    io: &tokio::runtime::Handle,
    watches: Vec<Watch>,
    metrics: &Metrics,
    totals: &ReloadTotals,
) {
    let reloads = Reloads::of(metrics, totals);
    for w in &watches {
        let outcomes: &[&str] = match w.apply {
            Apply::Live(_) => &["reloaded", "refused"],
            Apply::Restart(_) => &["restarted"],
        };
        for (flag, outcome) in w
            .flags
            .iter()
            .flat_map(|f| outcomes.iter().map(move |o| (f, o)))
        {
            reloads.declare(flag, outcome);
        }
    }
    if watches.is_empty() {
        return;
    }
    let mut watches = Some(watches);
    io.spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (mut w, r) = (watches.take().unwrap_or_default(), reloads.clone());
            match tokio::task::spawn_blocking(move || {
                check(&mut w, &r);
                w
            })
            .await
            {
                Ok(w) => watches = Some(w),
                // The runtime is shutting down (or a check panicked): stop.
                Err(_) => return,
            }
        }
    });
}

/// The watches of a `spate run` process: each pipeline's ClickHouse
/// password and TLS files (applied to its sink's clients through the
/// shared handles in `validated`), the Kafka password file (applied to
/// `kafka_clients`: the consumer and any dead-letter producer), and the
/// files read only when a client is made (librdkafka's TLS files, the
/// registry's), whose change notifies `restart`.
pub(crate) fn watches(
    pipelines: &[(String, RunArgs)],
    validated: &[Validated],
    kafka: &KafkaSourceConfig,
    kafka_clients: Vec<SaslCredentials>,
    restart: Option<&Arc<Notify>>,
    baseline: &Baseline,
) -> Vec<Watch> {
    let mut all = Vec::new();
    // Without a start again (a bounded run), the files only new clients
    // read are not watched: the run ends on its own.
    let at_start = |all: &mut Vec<Watch>, named: Vec<(String, PathBuf)>| {
        if let Some(r) = restart {
            all.push(Watch::new(named, Apply::Restart(r.clone()), baseline));
        }
    };
    for ((_, a), v) in pipelines.iter().zip(validated) {
        // `--password` given: the file is not read (nor watched).
        if let (None, Some(shared)) = (&a.password, &v.password) {
            let shared = shared.clone();
            all.extend(password_watch(
                a.clickhouse_files.named(PASSWORD),
                move |line| {
                    shared.replace(Secret::new(line));
                    Ok(())
                },
                baseline,
            ));
        }
        let named = a.clickhouse_files.named(TLS);
        if !named.is_empty() {
            let tls = v.tls.clone();
            all.push(Watch::new(
                named,
                Apply::Live(Box::new(move || tls.reload().map_err(|e| e.to_string()))),
                baseline,
            ));
        }
        let named = a.registry_files.named(ALL);
        if !named.is_empty() {
            at_start(&mut all, named);
        }
    }
    let user = kafka.property("sasl.username").map(str::to_owned);
    all.extend(password_watch(
        pipelines[0].1.kafka_files.named(PASSWORD),
        move |line| {
            let user = user
                .as_deref()
                .ok_or("no -X sasl.username to go with the password")?;
            for client in &kafka_clients {
                client
                    .set(user, &line)
                    .map_err(|e| format!("the {}: {e}", client.what))?;
            }
            Ok(())
        },
        baseline,
    ));
    for key in KAFKA_TLS_FILES {
        // `ssl.ca.location` may be `probe` or a directory: files only.
        if let Some(path) = kafka
            .property(key)
            .map(PathBuf::from)
            .filter(|p| p.is_file())
        {
            at_start(&mut all, vec![(format!("-X {key}"), path)]);
        }
    }
    all
}

/// A watch of the password file in `named` (none if it is not set) that
/// hands its first line, read as at start, to `apply`.
fn password_watch(
    named: Vec<(String, PathBuf)>,
    mut apply: impl FnMut(String) -> Result<(), String> + Send + 'static,
    baseline: &Baseline,
) -> Option<Watch> {
    let (flag, path) = named.first()?.clone();
    let read = move || {
        let line = crate::secret::read_file(&flag, &path).map_err(|e| e.message().to_owned())?;
        apply(line)
    };
    Some(Watch::new(named, Apply::Live(Box::new(read)), baseline))
}

/// librdkafka's TLS file properties (read when the client is made).
const KAFKA_TLS_FILES: [&str; 4] = [
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn counted(r: &Reloads, file: &str, outcome: &str) -> u64 {
        r.counter.with_label_values(&[file, outcome]).get()
    }

    #[test]
    fn a_change_is_applied_once_and_a_refusal_keeps_trying_the_next_change() {
        let dir = std::env::temp_dir().join(format!("spate-rotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&cert, "c1").unwrap();
        std::fs::write(&key, "k1").unwrap();
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = applied.clone();
        let (c, k) = (cert.clone(), key.clone());
        let apply = Apply::Live(Box::new(move || {
            let pair = (
                std::fs::read_to_string(&c).unwrap(),
                std::fs::read_to_string(&k).unwrap(),
            );
            seen.lock().unwrap().push(pair.clone());
            // A certificate and key of different generations do not match.
            if pair.0[1..] == pair.1[1..] {
                Ok(())
            } else {
                Err("the key does not match the certificate".into())
            }
        }));
        let mut watches = vec![Watch::new(
            vec![
                ("--clickhouse-cert".into(), cert.clone()),
                ("--clickhouse-key".into(), key.clone()),
            ],
            apply,
            &Baseline::default(),
        )];
        let metrics = Metrics::new();
        let totals = ReloadTotals::default();
        let r = Reloads::of(&metrics, &totals);

        check(&mut watches, &r);
        assert!(applied.lock().unwrap().is_empty(), "nothing changed yet");

        // The certificate is rewritten before its key: refused, kept.
        std::fs::write(&cert, "c2").unwrap();
        check(&mut watches, &r);
        assert_eq!(counted(&r, "--clickhouse-cert", "refused"), 1);
        assert_eq!(
            counted(&r, "--clickhouse-key", "refused"),
            0,
            "only the changed file counts"
        );
        // The same contents are not tried again.
        check(&mut watches, &r);
        assert_eq!(applied.lock().unwrap().len(), 1);
        // The key follows: applied.
        std::fs::write(&key, "k2").unwrap();
        check(&mut watches, &r);
        assert_eq!(counted(&r, "--clickhouse-key", "reloaded"), 1);
        assert_eq!(counted(&r, "--clickhouse-cert", "reloaded"), 0);
        assert_eq!(
            applied.lock().unwrap().last().unwrap(),
            &("c2".to_owned(), "k2".to_owned())
        );

        // A file gone (mid-swap) changes nothing; back, unchanged, nothing.
        std::fs::remove_file(&key).unwrap();
        check(&mut watches, &r);
        std::fs::write(&key, "k2").unwrap();
        check(&mut watches, &r);
        assert_eq!(applied.lock().unwrap().len(), 2);
        assert!(metrics.encode_text().contains(
            "spate_secret_reloads_total{file=\"--clickhouse-key\",outcome=\"reloaded\"} 1"
        ));
        // A start again's registry goes on from the counts so far.
        let r2 = Reloads::of(&Metrics::new(), &totals);
        assert_eq!(counted(&r2, "--clickhouse-key", "reloaded"), 1);
        assert_eq!(counted(&r2, "--clickhouse-cert", "refused"), 1);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_file_read_only_when_a_client_is_made_asks_for_a_start_again() {
        let dir = std::env::temp_dir().join(format!("spate-rotate-r-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "a").unwrap();
        let restart = Arc::new(Notify::new());
        let mut watches = vec![Watch::new(
            vec![("-X ssl.ca.location".into(), ca.clone())],
            Apply::Restart(restart.clone()),
            &Baseline::default(),
        )];
        let r = Reloads::of(&Metrics::new(), &ReloadTotals::default());
        let asked = || {
            let notified = restart.notified();
            tokio::pin!(notified);
            // A stored permit makes it ready at the first poll.
            notified.as_mut().enable()
        };
        check(&mut watches, &r);
        assert!(!asked(), "nothing changed");
        std::fs::write(&ca, "b").unwrap();
        check(&mut watches, &r);
        assert_eq!(counted(&r, "-X ssl.ca.location", "restarted"), 1);
        assert!(asked(), "the start again was asked for");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Which files each flag set watches, and how a change applies.
    #[test]
    fn the_watches_of_a_run_cover_every_secret_file() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        let dir = std::env::temp_dir().join(format!("spate-rotate-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = |name: &str| {
            let p = dir.join(name);
            std::fs::write(&p, format!("{name}-contents\n")).unwrap();
            p.display().to_string()
        };
        let (pw, kpw, ca, cert, key, kca, rca) = (
            f("pw"),
            f("kpw"),
            f("ca"),
            f("cert"),
            f("key"),
            f("kca"),
            f("rca"),
        );
        let argv = [
            "spate",
            "run",
            "--brokers",
            "b:9092",
            "--group",
            "g",
            "--topic",
            "t",
            "--table",
            "db.t",
            "--clickhouse-url",
            "https://ch:8443",
            "--password-file",
            &pw,
            "--clickhouse-ca",
            &ca,
            "--clickhouse-cert",
            &cert,
            "--clickhouse-key",
            &key,
            "--kafka-password-file",
            &kpw,
            "-X",
            "sasl.username=u",
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            &format!("ssl.ca.location={kca}"),
            "--format",
            "avro",
            "--schema-registry",
            "https://r:8081",
            "--schema-registry-password-file",
            &rca,
        ];
        let Command::Run(a) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not run");
        };
        let v = crate::settings::validate(&a).unwrap();
        let restart = Arc::new(Notify::new());
        let pipelines = vec![("main".to_owned(), a)];
        let baseline = Baseline::of(&pipelines);
        // A change after the baseline and before the watch is still seen.
        std::fs::write(dir.join("key"), "key-rotated\n").unwrap();
        let w = watches(
            &pipelines,
            std::slice::from_ref(&v),
            &v.kafka,
            Vec::new(),
            Some(&restart),
            &baseline,
        );
        let pending: Vec<bool> = (w[1].seen.iter().zip(&w[1].paths))
            .map(|(seen, p)| *seen != fingerprint(p))
            .collect();
        assert_eq!(
            pending,
            vec![false, false, true],
            "the key's change is pending"
        );
        // A bounded run watches no file that only a start again applies.
        let bounded = watches(
            &pipelines,
            std::slice::from_ref(&v),
            &v.kafka,
            Vec::new(),
            None,
            &baseline,
        );
        assert!(bounded.iter().all(|w| matches!(w.apply, Apply::Live(_))));
        assert_eq!(bounded.len(), 3);
        let kinds: Vec<(Vec<&str>, &str)> = w
            .iter()
            .map(|w| {
                let kind = match w.apply {
                    Apply::Live(_) => "live",
                    Apply::Restart(_) => "restart",
                };
                (w.flags.iter().map(String::as_str).collect(), kind)
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                (vec!["--password-file"], "live"),
                (
                    vec!["--clickhouse-ca", "--clickhouse-cert", "--clickhouse-key"],
                    "live"
                ),
                (vec!["--schema-registry-password-file"], "restart"),
                (vec!["--kafka-password-file"], "live"),
                (vec!["-X ssl.ca.location"], "restart"),
            ]
        );
        // The ClickHouse password file reaches the shared password.
        let mut w = w;
        std::fs::write(dir.join("pw"), "rotated-pw\n").unwrap();
        check(
            &mut w,
            &Reloads::of(&Metrics::new(), &ReloadTotals::default()),
        );
        assert_eq!(
            v.password.as_ref().unwrap().current().expose(),
            "rotated-pw"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
