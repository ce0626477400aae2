//! The secret files of a service spate talks to: the file holding its
//! password, and the TLS files (CA certificates, client certificate, its
//! key). One struct, [`TlsFiles`], for ClickHouse, the schema registry and
//! Kafka, and one way to read them, where they were three hand-written
//! sets of flags.
//!
//! [`TlsFlags<S>`] defines a service's flags for clap (`#[command(flatten)]`
//! in `crate::cli`); the marker `S` ([`ClickHouse`], [`Registry`],
//! [`Kafka`]) says their names, variables and help texts, which stay what
//! they were: a flag's id is its `--config` key. Kafka has only its
//! password file: its TLS files are librdkafka properties (`-X ssl.*`).
//!
//! Pure functions of the parsed flags; called on the main thread.

use crate::exit::Exit;
use clap::builder::ValueParser;
use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use std::marker::PhantomData;
use std::path::PathBuf;

/// A service's password file and TLS files, each optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// File whose first line is the service's password, instead of the
    /// password itself in a flag, variable or config file.
    pub password_file: Option<PathBuf>,
    /// PEM file of CA certificates trusted in addition to the system's
    /// roots.
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM, the chain) for mutual TLS; needs `key`.
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of `cert`.
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// The file `field` names, if set.
    #[must_use]
    pub fn get(&self, field: Field) -> Option<&PathBuf> {
        match field {
            Field::PasswordFile => self.password_file.as_ref(),
            Field::Ca => self.ca.as_ref(),
            Field::Cert => self.cert.as_ref(),
            Field::Key => self.key.as_ref(),
        }
    }

    /// The connector's TLS settings: the CA, certificate and key.
    #[must_use]
    pub fn tls(&self) -> spate_clickhouse::TlsFiles {
        spate_clickhouse::TlsFiles {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
    }

    /// The password: `given` (its flag, variable or config key) if set,
    /// else the first line of the password file (`flag` names that file's
    /// flag in an error); registered for redaction from all output.
    pub fn password(&self, given: Option<&String>, flag: &str) -> Result<Option<String>, Exit> {
        let password = match (given, &self.password_file) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(path)) => Some(crate::secret::read_file(flag, path)?),
            (None, None) => None,
        };
        if let Some(p) = &password {
            crate::secret::register(p);
        }
        Ok(password)
    }
}

/// Which of [`TlsFiles`]' fields a flag sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    PasswordFile,
    Ca,
    Cert,
    Key,
}

/// One file flag: its id (the `--config` key), long name (the id with `-`
/// for `_`), variable, help text and relations to other flags.
pub struct FileFlag {
    pub field: Field,
    pub id: &'static str,
    pub long: &'static str,
    pub env: &'static str,
    pub help: &'static str,
    /// The flag this one cannot be given with (the password itself).
    pub conflicts_with: Option<&'static str>,
    /// The flag this one needs (a certificate's key, a key's certificate).
    pub requires: Option<&'static str>,
}

/// A service whose secret files spate takes as flags.
pub trait Service {
    /// Its flags, in the order `--help` lists them.
    const FLAGS: &'static [FileFlag];
}

impl FileFlag {
    /// The flag as a command line gives it: `--` and the long name.
    #[must_use]
    pub fn flag(&self) -> String {
        format!("--{}", self.long)
    }

    fn arg(&self) -> Arg {
        let mut a = Arg::new(self.id)
            .long(self.long)
            .env(self.env)
            .value_name("FILE")
            .value_parser(ValueParser::path_buf())
            .help(self.help);
        if let Some(other) = self.conflicts_with {
            a = a.conflicts_with(other);
        }
        if let Some(other) = self.requires {
            a = a.requires(other);
        }
        a
    }
}

/// ClickHouse: `--password-file` and `--clickhouse-{ca,cert,key}`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClickHouse;

impl Service for ClickHouse {
    const FLAGS: &'static [FileFlag] = &[
        FileFlag {
            field: Field::PasswordFile,
            id: "password_file",
            long: "password-file",
            env: "SPATE_PASSWORD_FILE",
            help: "File holding the ClickHouse password (its first line; the trailing newline is dropped): keeps it out of `ps` and the environment. Instead of --password",
            conflicts_with: Some("password"),
            requires: None,
        },
        FileFlag {
            field: Field::Ca,
            id: "clickhouse_ca",
            long: "clickhouse-ca",
            env: "SPATE_CLICKHOUSE_CA",
            help: "PEM file of CA certificates trusted for https:// URLs, in addition to the system's root certificates (a private CA). Verification of the server's certificate cannot be turned off",
            conflicts_with: None,
            requires: None,
        },
        FileFlag {
            field: Field::Cert,
            id: "clickhouse_cert",
            long: "clickhouse-cert",
            env: "SPATE_CLICKHOUSE_CERT",
            help: "Client certificate (PEM, the chain) for mutual TLS with ClickHouse; needs --clickhouse-key",
            conflicts_with: None,
            requires: Some("clickhouse_key"),
        },
        FileFlag {
            field: Field::Key,
            id: "clickhouse_key",
            long: "clickhouse-key",
            env: "SPATE_CLICKHOUSE_KEY",
            help: "Private key (PEM) of --clickhouse-cert",
            conflicts_with: None,
            requires: Some("clickhouse_cert"),
        },
    ];
}

/// The schema registry (`spate run`, `check` and `gen`; issue 18):
/// `--schema-registry-{password-file,ca,cert,key}`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Registry;

impl Service for Registry {
    const FLAGS: &'static [FileFlag] = &[
        FileFlag {
            field: Field::PasswordFile,
            id: "schema_registry_password_file",
            long: "schema-registry-password-file",
            env: "SPATE_SCHEMA_REGISTRY_PASSWORD_FILE",
            help: "File holding the schema registry password (its first line): instead of --schema-registry-password",
            conflicts_with: Some("schema_registry_password"),
            requires: None,
        },
        FileFlag {
            field: Field::Ca,
            id: "schema_registry_ca",
            long: "schema-registry-ca",
            env: "SPATE_SCHEMA_REGISTRY_CA",
            help: "PEM file of CA certificates trusted for an https:// schema registry, in addition to the system's root certificates. Verification of the registry's certificate cannot be turned off",
            conflicts_with: None,
            requires: None,
        },
        FileFlag {
            field: Field::Cert,
            id: "schema_registry_cert",
            long: "schema-registry-cert",
            env: "SPATE_SCHEMA_REGISTRY_CERT",
            help: "Client certificate (PEM, the chain) for mutual TLS with the schema registry; needs --schema-registry-key",
            conflicts_with: None,
            requires: Some("schema_registry_key"),
        },
        FileFlag {
            field: Field::Key,
            id: "schema_registry_key",
            long: "schema-registry-key",
            env: "SPATE_SCHEMA_REGISTRY_KEY",
            help: "Private key (PEM) of --schema-registry-cert",
            conflicts_with: None,
            requires: Some("schema_registry_cert"),
        },
    ];
}

/// Kafka: `--kafka-password-file` (set as librdkafka's sasl.password); its
/// TLS files are `-X ssl.*` properties.
#[derive(Clone, Copy, Debug, Default)]
pub struct Kafka;

impl Service for Kafka {
    const FLAGS: &'static [FileFlag] = &[FileFlag {
        field: Field::PasswordFile,
        id: "kafka_password_file",
        long: "kafka-password-file",
        env: "SPATE_KAFKA_PASSWORD_FILE",
        help: "File holding the Kafka SASL password (its first line), set as librdkafka's sasl.password: instead of -X sasl.password=...",
        conflicts_with: None,
        requires: None,
    }];
}

/// The flags of service `S`'s [`TlsFiles`], for `#[command(flatten)]`.
#[derive(Clone, Debug, Default)]
pub struct TlsFlags<S> {
    pub files: TlsFiles,
    service: PhantomData<S>,
}

impl<S: Service> TlsFlags<S> {
    /// The flag that sets `field`, e.g. `--password-file` (for errors).
    #[must_use]
    pub fn flag(field: Field) -> String {
        S::FLAGS
            .iter()
            .find(|f| f.field == field)
            .map_or_else(String::new, FileFlag::flag)
    }

    /// The password: `given` if set, else the password file's first line.
    pub fn password(&self, given: Option<&String>) -> Result<Option<String>, Exit> {
        self.files.password(given, &Self::flag(Field::PasswordFile))
    }

    /// Each file set among `fields`, under its flag (`--clickhouse-ca`,
    /// ...), in the order `--help` lists them.
    #[must_use]
    pub fn named(&self, fields: &[Field]) -> Vec<(String, PathBuf)> {
        S::FLAGS
            .iter()
            .filter(|f| fields.contains(&f.field))
            .filter_map(|f| Some((f.flag(), self.files.get(f.field)?.clone())))
            .collect()
    }

    #[cfg(test)]
    pub fn new(files: TlsFiles) -> Self {
        Self {
            files,
            service: PhantomData,
        }
    }
}

impl<S: Service> FromArgMatches for TlsFlags<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = Self {
            files: TlsFiles::default(),
            service: PhantomData,
        };
        flags.update_from_arg_matches(m)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for f in S::FLAGS {
            let Some(path) = m.try_get_one::<PathBuf>(f.id).ok().flatten() else {
                continue;
            };
            let slot = match f.field {
                Field::PasswordFile => &mut self.files.password_file,
                Field::Ca => &mut self.files.ca,
                Field::Cert => &mut self.files.cert,
                Field::Key => &mut self.files.key,
            };
            *slot = Some(path.clone());
        }
        Ok(())
    }
}

impl<S: Service> Args for TlsFlags<S> {
    fn augment_args(cmd: Command) -> Command {
        S::FLAGS.iter().fold(cmd, |cmd, f| cmd.arg(f.arg()))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command as Sub};
    use clap::Parser;

    /// A flag's long name is its id with `-` for `_`, as clap derives it
    /// for the other flags: the id is the `--config` key.
    #[test]
    fn long_names_follow_the_ids() {
        for f in [ClickHouse::FLAGS, Registry::FLAGS, Kafka::FLAGS]
            .iter()
            .copied()
            .flatten()
        {
            assert_eq!(f.long, f.id.replace('_', "-"));
        }
    }

    /// The three services' flags land in their own `TlsFiles`.
    #[test]
    fn each_service_s_flags_fill_its_files() {
        let cli = Cli::try_parse_from([
            "spate",
            "run",
            "--brokers=b",
            "--topic=t",
            "--group=g",
            "--table=t",
            "--clickhouse-url=http://c",
            "--password-file=/ch/pw",
            "--clickhouse-cert=/ch/c",
            "--clickhouse-key=/ch/k",
            "--kafka-password-file=/k/pw",
            "--schema-registry-ca=/r/ca",
        ])
        .unwrap();
        let Sub::Run(a) = cli.command else {
            panic!("not run")
        };
        assert_eq!(
            a.clickhouse_files.files,
            TlsFiles {
                password_file: Some("/ch/pw".into()),
                ca: None,
                cert: Some("/ch/c".into()),
                key: Some("/ch/k".into()),
            }
        );
        assert_eq!(
            a.kafka_files.files,
            TlsFiles {
                password_file: Some("/k/pw".into()),
                ..TlsFiles::default()
            }
        );
        assert_eq!(
            a.registry_files.files,
            TlsFiles {
                ca: Some("/r/ca".into()),
                ..TlsFiles::default()
            }
        );
        assert_eq!(
            TlsFlags::<Registry>::flag(Field::PasswordFile),
            "--schema-registry-password-file"
        );
    }

    /// A certificate needs its key, and a password file excludes the
    /// password, as clap states it.
    #[test]
    fn relations_between_the_flags_hold() {
        let base = [
            "spate",
            "run",
            "--brokers=b",
            "--topic=t",
            "--group=g",
            "--table=t",
            "--clickhouse-url=http://c",
        ];
        let parse = |extra: &[&str]| {
            let argv: Vec<&str> = base.iter().chain(extra).copied().collect();
            Cli::try_parse_from(argv).err().map(|e| e.to_string())
        };
        let e = parse(&["--clickhouse-cert=/c"]).unwrap();
        assert!(e.contains("--clickhouse-key <FILE>"), "{e}");
        let e = parse(&["--schema-registry-key=/k"]).unwrap();
        assert!(e.contains("--schema-registry-cert <FILE>"), "{e}");
        let e = parse(&["--password=x", "--password-file=/p"]).unwrap();
        assert!(e.contains("cannot be used with"), "{e}");
        assert!(parse(&["--kafka-password-file=/p"]).is_none());
    }
}
