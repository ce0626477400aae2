//! The Kafka part of `spate run --help` and `spate check --help` (clap's
//! `after_long_help`): the security recipes users copy for managed Kafka
//! services, and every librdkafka property spate sets (a `-X` value wins)
//! or refuses, from the lists the Kafka source itself applies
//! ([`spate_kafka::DEFAULTS`], [`spate_kafka::REFUSED`]), so the help
//! cannot drift from what spate does. Built once when the command line is
//! parsed, on the main thread.

use std::fmt::Write as _;

/// Recipes, each a heading and the `-X` lines to copy.
const RECIPES: &str = "\
Kafka security: librdkafka properties, as -X KEY=VALUE or in the [kafka] table of --config.
The system's root certificates are found by default (public CAs); a private CA goes in
ssl.ca.location. Keep secrets out of command lines: use the config file or SPATE_PROPERTY.

  Confluent Cloud (SASL_SSL + PLAIN; an API key and secret):
    -X security.protocol=SASL_SSL -X sasl.mechanism=PLAIN
    -X sasl.username=API_KEY -X sasl.password=API_SECRET

  Amazon MSK, SASL/SCRAM (brokers on port 9096; the secret from AWS Secrets Manager):
    -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512
    -X sasl.username=USER -X sasl.password=PASSWORD

  Amazon MSK, mutual TLS (brokers on port 9094; a certificate from AWS Private CA):
    -X security.protocol=SSL
    -X ssl.certificate.location=client.pem -X ssl.key.location=client.key

  Aiven (mutual TLS: the project's CA, the service's access certificate and key):
    -X security.protocol=SSL -X ssl.ca.location=ca.pem
    -X ssl.certificate.location=service.cert -X ssl.key.location=service.key

  Redpanda (Redpanda Cloud: SASL_SSL + SCRAM-SHA-256; self-hosted: as its listener says):
    -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-256
    -X sasl.username=USER -X sasl.password=PASSWORD

  A self-signed or private CA (add the SASL lines above for SASL_SSL):
    -X security.protocol=SSL -X ssl.ca.location=/etc/spate/kafka-ca.pem

  An encrypted private key: -X ssl.key.password=PASSPHRASE. OAUTHBEARER (OIDC):
    -X security.protocol=SASL_SSL -X sasl.mechanism=OAUTHBEARER
    -X sasl.oauthbearer.method=oidc -X sasl.oauthbearer.client.id=ID
    -X sasl.oauthbearer.client.secret=SECRET -X sasl.oauthbearer.token.endpoint.url=URL

A broker that fails the TLS handshake, certificate verification or SASL at start stops
spate (exit 2) with one line naming the broker and the step; `spate check` prints one
such line per broker.
";

/// The text after `run`'s and `check`'s options.
pub fn after_long_help() -> String {
    let mut out = String::from(RECIPES);
    out.push_str("\nlibrdkafka properties spate sets (a -X value wins):\n");
    for (key, value) in spate_kafka::DEFAULTS {
        let _ = writeln!(out, "  {key} = {value}");
    }
    out.push_str("\nlibrdkafka properties spate refuses (-X or [kafka] is an error):\n");
    for (key, why) in spate_kafka::REFUSED {
        let _ = writeln!(out, "  {key}: {why}");
    }
    out.push_str(
        "\n`spate check` also sets, after -X: enable.auto.commit=false, \
         enable.auto.offset.store=false,\nallow.auto.create.topics=false and \
         enable.partition.eof=true (it commits nothing and creates no topic).\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use crate::cli::Cli;
    use clap::CommandFactory;

    fn long_help(subcommand: &str) -> String {
        let mut cli = Cli::command();
        let sub = cli
            .find_subcommand_mut(subcommand)
            .unwrap_or_else(|| panic!("no subcommand {subcommand}"));
        sub.render_long_help().to_string()
    }

    #[test]
    fn run_help_names_every_property_spate_sets_or_refuses() {
        for sub in ["run", "check"] {
            let help = long_help(sub);
            for (key, _) in spate_kafka::DEFAULTS.iter().chain(spate_kafka::REFUSED) {
                assert!(
                    help.contains(&format!("  {key}")),
                    "{sub} --help lacks {key}"
                );
            }
            for check_sets in [
                "allow.auto.create.topics=false",
                "enable.partition.eof=true",
            ] {
                assert!(help.contains(check_sets), "{sub} --help lacks {check_sets}");
            }
        }
    }

    #[test]
    fn run_help_shows_the_recipes() {
        let help = long_help("run");
        for want in [
            "Confluent Cloud (SASL_SSL + PLAIN",
            "sasl.mechanism=PLAIN",
            "Amazon MSK, SASL/SCRAM",
            "sasl.mechanism=SCRAM-SHA-512",
            "Amazon MSK, mutual TLS",
            "Aiven (mutual TLS",
            "ssl.certificate.location=service.cert -X ssl.key.location=service.key",
            "Redpanda",
            "sasl.mechanism=SCRAM-SHA-256",
            "A self-signed or private CA",
            "ssl.ca.location=/etc/spate/kafka-ca.pem",
        ] {
            assert!(help.contains(want), "run --help lacks {want:?}:\n{help}");
        }
    }
}
