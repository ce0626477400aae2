//! Routing: which topics each pipeline reads and which table each topic
//! feeds, resolved from the flags and the cluster's topics at every start
//! of the pipelines.
//!
//! A pipeline routes when a `--topic` is a pattern (`^...`), `--table`
//! has a `{topic}` placeholder, or it has a `--table-map`,
//! `--allow-tables` or `--create-table-like`. Such a pipeline is expanded
//! into one pipeline per table, each with the topics that feed it and
//! everything else its own (schema, encoder, shards, batches, insert
//! workers, dead letters, exactly-once state): one slow table then pauses
//! only the partitions that feed it. A topic whose table cannot be
//! written (not allowed, not a table name, missing without a template)
//! is still read, by a pipeline of the same origin, and each of its
//! messages is a bad message under `--on-error` ([`Refused`]).
//!
//! Topic patterns are matched here against the cluster's topics, not
//! handed to librdkafka: the consumer subscribes to the names, and
//! [`Plan::watch`] lists the cluster again every `--topic-refresh`; a
//! topic that starts or stops matching starts the pipelines again,
//! drained and committed (`run::assemble`).
//!
//! Runs on the main thread before each start of the pipelines.

use crate::cli::RunArgs;
use crate::exit::Exit;
use regex::Regex;
use spate_clickhouse::TableRef;
use std::collections::{BTreeMap, BTreeSet};

/// The pipelines to run, once the routing pipelines are expanded.
pub(crate) struct Plan {
    /// One per table (a pipeline that does not route, as given).
    pub pipelines: Vec<(String, RunArgs)>,
    /// The index in the given pipelines each of `pipelines` comes from.
    pub origin: Vec<usize>,
    /// Whether each of `pipelines` has its table from routing (a template,
    /// the map, or a template to create it from): such a table is checked
    /// for at start, and created or its topics refused when missing.
    pub routed: Vec<bool>,
    /// Topics read whose messages are bad (their table cannot be written).
    pub refused: Vec<Refused>,
    /// What a topic listing must still give for this plan to hold.
    pub watch: Watch,
}

/// A topic whose table cannot be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The given pipeline it comes from.
    pub origin: usize,
    pub topic: String,
    /// Why, in the words of a bad message's error.
    pub why: String,
}

/// The topic patterns of the plan and the topics they matched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Watch {
    /// Per given pipeline with a pattern: its routing and what it matched.
    matched: Vec<(usize, BTreeSet<String>)>,
}

impl Watch {
    /// Whether any pipeline has a topic pattern to watch.
    pub fn is_empty(&self) -> bool {
        self.matched.is_empty()
    }

    /// What changed since the plan, given the cluster's topics now: the
    /// topics that match and did not, and those that no longer do.
    pub fn changes(
        &self,
        pipelines: &[(String, RunArgs)],
        topics: &[String],
    ) -> Result<Option<String>, Exit> {
        let mut said = Vec::new();
        for (i, before) in &self.matched {
            let now = Routing::of(&pipelines[*i].1)?.matching(&pipelines[*i].1, topics);
            let added: Vec<&String> = now.difference(before).collect();
            let gone: Vec<&String> = before.difference(&now).collect();
            if !added.is_empty() {
                said.push(format!("new {}", join(&added)));
            }
            if !gone.is_empty() {
                said.push(format!("gone {}", join(&gone)));
            }
        }
        Ok((!said.is_empty()).then(|| said.join("; ")))
    }
}

fn join(names: &[&String]) -> String {
    names
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `a` routes (see the module's text).
pub(crate) fn routes(a: &RunArgs) -> bool {
    a.topics.iter().any(|t| is_pattern(t))
        || a.table.contains('{')
        || !a.table_map.is_empty()
        || a.allow_tables.is_some()
        || a.create_table_like.is_some()
}

fn is_pattern(topic: &str) -> bool {
    topic.starts_with('^')
}

/// One pipeline's routing flags, parsed.
struct Routing {
    patterns: Vec<Regex>,
    names: Vec<String>,
    template: Template,
    map: BTreeMap<String, String>,
    allow: Option<Regex>,
}

impl Routing {
    fn of(a: &RunArgs) -> Result<Self, Exit> {
        let mut patterns = Vec::new();
        let mut names = Vec::new();
        for t in &a.topics {
            if is_pattern(t) {
                patterns.push(Regex::new(t).map_err(|e| Exit::usage(format!("--topic {t}: {e}")))?);
            } else {
                names.push(t.clone());
            }
        }
        let mut map = BTreeMap::new();
        for entry in &a.table_map {
            let Some((topic, table)) = entry.split_once('=') else {
                return Err(Exit::usage(format!(
                    "--table-map {entry}: expected TOPIC=DB.TABLE"
                )));
            };
            TableRef::parse(table).map_err(|_| {
                Exit::usage(format!("--table-map {entry}: {table} is not [DB.]TABLE"))
            })?;
            if map.insert(topic.to_owned(), table.to_owned()).is_some() {
                return Err(Exit::usage(format!(
                    "--table-map names topic {topic} twice"
                )));
            }
        }
        let allow = match &a.allow_tables {
            Some(r) => Some(
                Regex::new(&format!("^(?:{r})$"))
                    .map_err(|e| Exit::usage(format!("--allow-tables {r}: {e}")))?,
            ),
            None => None,
        };
        if let Some(like) = &a.create_table_like {
            TableRef::parse(like).map_err(|_| {
                Exit::usage(format!("--create-table-like {like} is not [DB.]TABLE"))
            })?;
        }
        Ok(Self {
            patterns,
            names,
            template: Template::parse(&a.table)?,
            map,
            allow,
        })
    }

    /// The topics `a` reads, of the cluster's `topics`: its names, and
    /// every topic a pattern matches but its own dead-letter topic.
    fn matching(&self, a: &RunArgs, topics: &[String]) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.names.iter().cloned().collect();
        out.extend(
            topics
                .iter()
                .filter(|t| self.patterns.iter().any(|p| p.is_match(t)))
                .filter(|t| a.dead_letter_topic.as_ref() != Some(*t))
                .cloned(),
        );
        out
    }

    /// The table of `topic`, as `db.table`, or why it has none that may be
    /// written.
    fn table(&self, topic: &str) -> Result<String, String> {
        let name = match self.map.get(topic) {
            Some(t) => t.clone(),
            // A dot in the topic would move the database/table split.
            None if topic.contains('.') && self.template.0.contains("{topic}") => {
                return Err(format!(
                    "topic {topic} gives table name `{}`, which is not [DB.]TABLE (map it with --table-map)",
                    self.template.resolve(topic)
                ))
            }
            None => self.template.resolve(topic),
        };
        let table = TableRef::parse(&name)
            .map_err(|_| format!("topic {topic} gives table name `{name}`, which is not [DB.]TABLE (map it with --table-map)"))?
            .to_string();
        match &self.allow {
            Some(allow) if !allow.is_match(&table) => Err(format!(
                "table {table} (of topic {topic}) is not allowed by --allow-tables"
            )),
            _ => Ok(table),
        }
    }
}

/// `--table`, with its placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Template(String);

impl Template {
    fn parse(table: &str) -> Result<Self, Exit> {
        let mut rest = table;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                return Err(Exit::usage(format!("--table {table}: `{{` without `}}`")));
            };
            let name = &rest[open + 1..open + close];
            match name {
                "topic" => {}
                n if n.starts_with("header:") || n.starts_with("field:") => {
                    return Err(Exit::usage(format!(
                        "--table {table}: spate does not route by a message's header or field yet; {{topic}} and --table-map are what it takes"
                    )))
                }
                n => {
                    return Err(Exit::usage(format!(
                        "--table {table}: unknown placeholder {{{n}}} (spate knows {{topic}})"
                    )))
                }
            }
            rest = &rest[open + close + 1..];
        }
        Ok(Self(table.to_owned()))
    }

    fn resolve(&self, topic: &str) -> String {
        self.0.replace("{topic}", topic)
    }
}

/// Expand the routing pipelines of `pipelines` into one pipeline per
/// table; `list` gives the cluster's topics (asked once per pipeline with
/// a pattern).
pub(crate) fn expand(
    pipelines: &[(String, RunArgs)],
    list: &dyn Fn(&RunArgs) -> Result<Vec<String>, String>,
) -> Result<Plan, Exit> {
    let mut plan = Plan {
        pipelines: Vec::new(),
        origin: Vec::new(),
        routed: Vec::new(),
        refused: Vec::new(),
        watch: Watch::default(),
    };
    for (i, (name, a)) in pipelines.iter().enumerate() {
        if !routes(a) {
            plan.pipelines.push((name.clone(), a.clone()));
            plan.origin.push(i);
            plan.routed.push(false);
            continue;
        }
        let routing = Routing::of(a)?;
        let listed = if routing.patterns.is_empty() {
            Vec::new()
        } else {
            list(a).map_err(|e| {
                Exit::failed(format!("listing the topics to match --topic patterns: {e}"))
            })?
        };
        let topics = routing.matching(a, &listed);
        if !routing.patterns.is_empty() {
            plan.watch.matched.push((i, topics.clone()));
        }
        let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for topic in topics {
            match routing.table(&topic) {
                Ok(table) => tables.entry(table).or_default().push(topic),
                Err(why) => plan.refused.push(Refused {
                    origin: i,
                    topic,
                    why,
                }),
            }
        }
        let templated = a.table.contains('{') || !a.table_map.is_empty();
        for (table, topics) in tables {
            let mut args = a.clone();
            args.table = table.clone();
            args.topics = topics;
            let name = if templated {
                format!("{name}/{table}")
            } else {
                name.clone()
            };
            plan.pipelines.push((name, args));
            plan.origin.push(i);
            plan.routed.push(templated || a.create_table_like.is_some());
        }
    }
    Ok(plan)
}

impl Plan {
    /// Mark the topics of `pipelines[index]` refused (its table is missing)
    /// and drop it from the plan.
    pub fn refuse_pipeline(&mut self, index: usize, why: &str) {
        let (_, a) = self.pipelines.remove(index);
        let origin = self.origin.remove(index);
        self.routed.remove(index);
        for topic in a.topics {
            self.refused.push(Refused {
                origin,
                topic,
                why: why.to_owned(),
            });
        }
    }

    /// The refused topics that go with `pipelines[index]`: those of its
    /// origin, given to the first pipeline of that origin (its error
    /// policy is theirs).
    pub fn refused_with(&self, index: usize) -> Vec<Refused> {
        let origin = self.origin[index];
        if self.origin.iter().position(|&o| o == origin) != Some(index) {
            return Vec::new();
        }
        (self.refused.iter())
            .filter(|r| r.origin == origin)
            .cloned()
            .collect()
    }

    /// Refused topics that no pipeline can read (every table of their
    /// origin is refused): they are not read at all.
    pub fn unread(&self) -> Vec<&Refused> {
        (self.refused.iter())
            .filter(|r| !self.origin.contains(&r.origin))
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    /// `spate run` flags with a broker, group and server, plus `extra`
    /// (the other routing tests use it too).
    pub(crate) fn args(extra: &[&str]) -> RunArgs {
        let mut argv = vec![
            "spate",
            "run",
            "--brokers",
            "b:9092",
            "--group",
            "g",
            "--clickhouse-url",
            "http://c:8123",
        ];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Run(a) => a,
            _ => unreachable!(),
        }
    }

    fn cluster(_: &RunArgs) -> Result<Vec<String>, String> {
        Ok(
            ["orders", "users", "users-dlq", "tenant.x", "audit", "ev_a"]
                .map(String::from)
                .to_vec(),
        )
    }

    fn tables(plan: &Plan) -> Vec<(String, String, Vec<String>)> {
        (plan.pipelines.iter())
            .map(|(n, a)| (n.clone(), a.table.clone(), a.topics.clone()))
            .collect()
    }

    #[test]
    fn a_pattern_with_a_topic_template_makes_one_pipeline_per_table() {
        let a = args(&[
            "--topic",
            "^(orders|users|tenant)",
            "--table",
            "db.{topic}",
            "--dead-letter-topic",
            "users-dlq",
            "--on-error",
            "dead-letter",
            "--table-map",
            "tenant.x=db.tenant_x",
        ]);
        let plan = expand(&[("p".into(), a)], &cluster).unwrap();
        assert_eq!(
            tables(&plan),
            vec![
                ("p/db.orders".into(), "db.orders".into(), vec!["orders".into()]),
                ("p/db.tenant_x".into(), "db.tenant_x".into(), vec!["tenant.x".into()]),
                ("p/db.users".into(), "db.users".into(), vec!["users".into()]),
            ],
            "the dead-letter topic matches the pattern and is left out; the map wins over the template"
        );
        assert!(plan.refused.is_empty());
        assert_eq!(plan.routed, vec![true; 3]);
    }

    #[test]
    fn tables_outside_the_allowlist_and_bad_names_are_refused() {
        let a = args(&[
            "--topic",
            "^(orders|users|tenant|audit)",
            "--topic",
            "ev_a",
            "--table",
            "db.{topic}",
            "--allow-tables",
            r"db\.(orders|ev_a|tenant.*)",
        ]);
        let plan = expand(&[("p".into(), a)], &cluster).unwrap();
        assert_eq!(
            tables(&plan).into_iter().map(|t| t.1).collect::<Vec<_>>(),
            vec!["db.ev_a".to_owned(), "db.orders".to_owned()]
        );
        let refused: Vec<(&str, &str)> = (plan.refused.iter())
            .map(|r| (r.topic.as_str(), r.why.as_str()))
            .collect();
        assert_eq!(
            refused,
            vec![
                ("audit", "table db.audit (of topic audit) is not allowed by --allow-tables"),
                ("tenant.x", "topic tenant.x gives table name `db.tenant.x`, which is not [DB.]TABLE (map it with --table-map)"),
                ("users", "table db.users (of topic users) is not allowed by --allow-tables"),
                ("users-dlq", "table db.users-dlq (of topic users-dlq) is not allowed by --allow-tables"),
            ],
            "a pattern matches anywhere in the name, as librdkafka's do"
        );
        assert_eq!(
            plan.refused_with(0).len(),
            4,
            "the first table's pipeline reads them"
        );
        assert!(plan.refused_with(1).is_empty());
    }

    #[test]
    fn a_dotted_topic_does_not_name_a_database() {
        let a = args(&["--topic", "tenant.x", "--table", "{topic}"]);
        let plan = expand(&[("p".into(), a)], &cluster).unwrap();
        assert!(
            plan.pipelines.is_empty(),
            "tenant.x is not database tenant, table x"
        );
        assert!(
            plan.refused[0].why.contains("not [DB.]TABLE"),
            "{:?}",
            plan.refused
        );
    }

    #[test]
    fn the_allowlist_matches_the_whole_name() {
        let a = args(&[
            "--topic",
            "orders",
            "--table",
            "db.{topic}",
            "--allow-tables",
            "db.order",
        ]);
        let plan = expand(&[("p".into(), a)], &cluster).unwrap();
        assert!(
            plan.pipelines.is_empty(),
            "db.order is a prefix of db.orders, not a match"
        );
        assert_eq!(plan.refused.len(), 1);
    }

    #[test]
    fn a_pipeline_that_does_not_route_is_kept_as_given() {
        let a = args(&["--topic", "orders", "--table", "db.t"]);
        let plan = expand(&[("p".into(), a)], &|_| Err("not asked".into())).unwrap();
        assert_eq!(
            tables(&plan),
            vec![("p".into(), "db.t".into(), vec!["orders".into()])]
        );
        assert_eq!(plan.routed, vec![false]);
        assert!(plan.watch.is_empty());
    }

    #[test]
    fn the_watch_says_which_topics_came_and_went() {
        let given = vec![(
            "p".to_owned(),
            args(&["--topic", "^ord", "--table", "db.t"]),
        )];
        let plan = expand(&given, &|_| Ok(vec!["orders".into(), "ordinal".into()])).unwrap();
        assert_eq!(
            tables(&plan)[0].2,
            vec!["orders".to_owned(), "ordinal".to_owned()]
        );
        let now = ["orders".to_owned(), "orders2".to_owned(), "x".to_owned()];
        assert_eq!(
            plan.watch.changes(&given, &now).unwrap().as_deref(),
            Some("new orders2; gone ordinal")
        );
        let same = ["ordinal".to_owned(), "orders".to_owned()];
        assert_eq!(plan.watch.changes(&given, &same).unwrap(), None);
    }

    #[test]
    fn placeholders_spate_cannot_fill_are_refused_at_start() {
        for (table, says) in [
            (
                "db.{header:tenant}",
                "does not route by a message's header or field yet",
            ),
            (
                "db.{field:/type}",
                "does not route by a message's header or field yet",
            ),
            ("db.{tpoic}", "unknown placeholder {tpoic}"),
            ("db.{topic", "without"),
        ] {
            let a = args(&["--topic", "orders", "--table", table]);
            let Err(e) = expand(&[("p".into(), a)], &cluster) else {
                panic!("{table} was taken");
            };
            assert!(e.message().contains(says), "{table}: {}", e.message());
        }
    }
}
