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

pub(crate) mod message;

use crate::cli::{Envelope, MessageFormat, RunArgs};
use crate::exit::Exit;
use regex::Regex;
use spate_clickhouse::{CsvOptions, FieldPointer, FieldReader, FormatSpec, TableRef};
use spate_core::record::Message;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

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
    /// Per pipeline: the given pipeline whose messages name their table
    /// (a header or a field in its template), when it is one of its
    /// tables. Those pipelines read the same topics through one chain.
    pub by_message: Vec<Option<usize>>,
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

/// The topic patterns of the plan and the topics they matched, and the
/// tables of the pipelines whose messages name theirs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Watch {
    /// Per given pipeline with a pattern: its routing and what it matched.
    matched: Vec<(usize, BTreeSet<String>)>,
    /// Per given pipeline whose messages name their table: the tables it
    /// writes (they existed, and its allowlist lets them through).
    tables: Vec<(usize, BTreeSet<String>)>,
}

impl Watch {
    /// Whether any pipeline has a topic pattern to watch.
    pub fn is_empty(&self) -> bool {
        self.matched.is_empty() && self.tables.is_empty()
    }

    /// Whether any pipeline has a topic pattern.
    pub fn matches_topics(&self) -> bool {
        !self.matched.is_empty()
    }

    /// The given pipelines whose tables the watch lists again.
    pub fn table_owners(&self) -> Vec<usize> {
        self.tables.iter().map(|(i, _)| *i).collect()
    }

    /// What changed in the tables the pipelines whose messages name theirs
    /// may write, given each one's listing now (`listed[k]` for the k-th
    /// of [`table_owners`](Self::table_owners)).
    pub fn table_changes(
        &self,
        pipelines: &[(String, RunArgs)],
        listed: &[Vec<String>],
    ) -> Result<Option<String>, Exit> {
        let mut said = Vec::new();
        for ((i, before), listed) in self.tables.iter().zip(listed) {
            let routing = Routing::of(&pipelines[*i].1)?;
            let now = routing.writable(listed, &BTreeSet::new());
            let added: Vec<&String> = now.difference(before).collect();
            if !added.is_empty() {
                said.push(format!("new tables {}", join(&added)));
            }
        }
        Ok((!said.is_empty()).then(|| said.join("; ")))
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
    /// `--create-table-like`, as `db.table`.
    create_like: Option<String>,
}

/// Whether a table a message names may be written: the same test for the
/// tables listed at start and for a message's ([`message::RouterSpec`]),
/// so a table a message waits for is one the next start writes.
#[derive(Clone, Debug)]
pub(crate) struct MayName {
    /// The names the template can give (as `db.table`).
    shape: Regex,
    allow: Option<Regex>,
    /// `--create-table-like`'s table: never a message's.
    template: Option<String>,
}

impl MayName {
    pub(crate) fn allowed(&self, table: &str) -> bool {
        self.allow.as_ref().is_some_and(|a| a.is_match(table))
            && self.template.as_deref() != Some(table)
    }

    /// `table` (as `db.table`) is one the template can name, spelled as
    /// ClickHouse lists it, and allowed.
    pub(crate) fn may_write(&self, table: &str) -> bool {
        let canonical = TableRef::parse(table).is_ok_and(|t| t.to_string() == table);
        canonical && self.shape.is_match(table) && self.allowed(table)
    }
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
        let create_like = match &a.create_table_like {
            Some(like) => Some(
                TableRef::parse(like)
                    .map_err(|_| {
                        Exit::usage(format!("--create-table-like {like} is not [DB.]TABLE"))
                    })?
                    .to_string(),
            ),
            None => None,
        };
        let template = Template::parse(&a.table)?;
        if template.by_message() {
            if allow.is_none() {
                return Err(Exit::usage(format!(
                    "--table {}: a table named by a message's header or field needs --allow-tables, so a producer cannot pick any table",
                    a.table
                )));
            }
            if a.delivery == crate::cli::Delivery::ExactlyOnce {
                return Err(Exit::usage(format!(
                    "--table {}: exactly-once routes by topic only ({{topic}}, --table-map): its blocks are one partition's rows in one table",
                    a.table
                )));
            }
            template.fields_readable(a)?;
            if template.has_field() && a.envelope == Envelope::Upsert {
                return Err(Exit::usage(format!(
                    "--table {}: under --envelope upsert a tombstone deletes its key, and it has no field to name its table: route by {{topic}} or {{header:NAME}}",
                    a.table
                )));
            }
        }
        Ok(Self {
            patterns,
            names,
            template,
            map,
            allow,
            create_like,
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

    /// The tables a pipeline whose messages name theirs writes: of the
    /// `listed` ones and the `wanted` ones, those its template could give
    /// and its allowlist lets through, and its map's.
    fn writable(&self, listed: &[String], wanted: &BTreeSet<String>) -> BTreeSet<String> {
        let may = self.may_name();
        let mut out: BTreeSet<String> = (listed.iter().chain(wanted))
            .filter(|t| may.may_write(t))
            .cloned()
            .collect();
        out.extend(self.map.values().filter(|t| may.allowed(t)).cloned());
        out
    }

    /// What a table named by a message must be to be written.
    fn may_name(&self) -> MayName {
        MayName {
            shape: self.template.could_give(),
            allow: self.allow.clone(),
            template: self.create_like.clone(),
        }
    }

    /// The table of `topic`, as `db.table`, or why it has none that may be
    /// written.
    fn table(&self, topic: &str) -> Result<String, String> {
        let name = match self.map.get(topic) {
            Some(t) => t.clone(),
            // A dot in the topic would move the database/table split.
            None if topic.contains('.') && self.template.has_topic() => {
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
pub(crate) struct Template {
    text: String,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Topic,
    Header(String),
    Field(FieldPointer),
}

impl Template {
    pub(crate) fn parse(table: &str) -> Result<Self, Exit> {
        let mut parts = Vec::new();
        let mut rest = table;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                return Err(Exit::usage(format!("--table {table}: `{{` without `}}`")));
            };
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let name = &rest[open + 1..open + close];
            parts.push(match name.split_once(':') {
                None if name == "topic" => Part::Topic,
                Some(("header", h)) if !h.is_empty() => Part::Header(h.to_owned()),
                Some(("field", f)) => Part::Field(
                    FieldPointer::parse(f)
                        .map_err(|e| Exit::usage(format!("--table {table}: {e}")))?,
                ),
                _ => {
                    return Err(Exit::usage(format!(
                        "--table {table}: unknown placeholder {{{name}}} (spate knows {{topic}}, {{header:NAME}} and {{field:/POINTER}})"
                    )))
                }
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Self {
            text: table.to_owned(),
            parts,
        })
    }

    /// Whether the table comes from each message (a header or a field),
    /// not from its topic alone.
    pub(crate) fn by_message(&self) -> bool {
        (self.parts.iter()).any(|p| matches!(p, Part::Header(_) | Part::Field(_)))
    }

    fn has_topic(&self) -> bool {
        self.parts.contains(&Part::Topic)
    }

    fn has_field(&self) -> bool {
        (self.parts.iter()).any(|p| matches!(p, Part::Field(_)))
    }

    /// Whether each `{field:...}` can name a value of `a`'s messages:
    /// raw messages have none, a CSV field is one `--csv-columns` names
    /// (JSON, Avro and Protobuf are judged per message).
    fn fields_readable(&self, a: &RunArgs) -> Result<(), Exit> {
        let csv = FormatSpec::Csv(CsvOptions {
            columns: a.csv_columns.clone(),
            ..CsvOptions::default()
        });
        for part in &self.parts {
            let Part::Field(pointer) = part else { continue };
            let can = match a.format {
                MessageFormat::Raw => {
                    Err("--format raw has no fields: route by {topic} or {header:NAME}".to_owned())
                }
                MessageFormat::Csv => FieldReader::check(&csv, pointer),
                MessageFormat::Json | MessageFormat::Avro | MessageFormat::Protobuf => Ok(()),
            };
            can.map_err(|e| Exit::usage(format!("--table {}: {e}", self.text)))?;
        }
        Ok(())
    }

    /// The table of a topic (a template without header or field).
    fn resolve(&self, topic: &str) -> String {
        self.text.replace("{topic}", topic)
    }

    /// The table of `msg`, written into `out`, or why it has none.
    pub(crate) fn resolve_message(
        &self,
        msg: &Message<'_>,
        fields: &mut FieldReader,
        out: &mut String,
    ) -> Result<(), String> {
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Topic => out.push_str(msg.topic),
                Part::Header(name) => match message::header(msg, name)? {
                    "" => return Err(format!("no table name: header {name} is empty")),
                    value => out.push_str(value),
                },
                Part::Field(pointer) => {
                    let before = out.len();
                    (fields.read(msg.payload, pointer, out))
                        .map_err(|e| format!("no table name: {e}"))?;
                    if out.len() == before {
                        return Err(format!("no table name: field {} is empty", pointer.text));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a `db.table` name could come from this template: its text
    /// in place, each placeholder some non-empty value.
    fn could_give(&self) -> Regex {
        // Without a dot of its own, a name is in database `default` (unless
        // a value brings one).
        let dotted = (self.parts.iter()).any(|p| matches!(p, Part::Text(t) if t.contains('.')));
        let mut re = String::from(if dotted { "^" } else { r"^(?:default\.)?" });
        for part in &self.parts {
            match part {
                Part::Text(t) => re.push_str(&regex::escape(t)),
                _ => re.push_str(".+"),
            }
        }
        re.push('$');
        Regex::new(&re).expect("escaped text and .+ make a regex")
    }
}

/// Expand the routing pipelines of `pipelines` into one pipeline per
/// table; `list` gives the cluster's topics (asked once per pipeline with
/// a pattern).
#[cfg(test)]
pub(crate) fn expand(
    pipelines: &[(String, RunArgs)],
    list: &dyn Fn(&RunArgs) -> Result<Vec<String>, String>,
) -> Result<Plan, Exit> {
    let cluster = Cluster {
        topics: list,
        tables: &|_| Err("no table listing in this test".into()),
        wanted: &BTreeSet::new(),
    };
    expand_on(pipelines, &cluster)
}

/// What [`expand_on`] asks of the cluster, per given pipeline.
pub(crate) struct Cluster<'c> {
    /// Its Kafka cluster's topics (asked once per pipeline with a pattern).
    pub topics: &'c dyn Fn(&RunArgs) -> Result<Vec<String>, String>,
    /// Its ClickHouse server's tables, as `db.table` (asked once per
    /// pipeline whose messages name their table).
    pub tables: &'c dyn Fn(&RunArgs) -> Result<Vec<String>, String>,
    /// Tables messages asked for since the last start (`message::Wanted`),
    /// made from `--create-table-like` at this one.
    pub wanted: &'c BTreeSet<String>,
}

/// The Kafka cluster's topics, for `a`'s patterns.
pub(crate) fn list_topics(a: &RunArgs) -> Result<Vec<String>, String> {
    let v = crate::settings::validate(a).map_err(|e| e.message().to_owned())?;
    spate_kafka::list_topics(&v.kafka)
}

/// The tables of `a`'s ClickHouse, as `db.table`, for a template that
/// names them from the message. Blocks (its own runtime): call it from
/// the main thread, or from a blocking task.
pub(crate) fn list_tables(a: &RunArgs) -> Result<Vec<String>, String> {
    let v = crate::settings::validate(a).map_err(|e| e.message().to_owned())?;
    let spec = crate::settings::sink_spec(a, &v);
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting a runtime: {e}"))?;
    (io.block_on(spate_clickhouse::list_tables(&spec))).map_err(|e| e.to_string())
}

/// Expand the routing pipelines of `pipelines` into one pipeline per
/// table, from what `cluster` has.
pub(crate) fn expand_on(
    pipelines: &[(String, RunArgs)],
    cluster: &Cluster<'_>,
) -> Result<Plan, Exit> {
    let list = cluster.topics;
    let mut plan = Plan {
        pipelines: Vec::new(),
        origin: Vec::new(),
        routed: Vec::new(),
        by_message: Vec::new(),
        refused: Vec::new(),
        watch: Watch::default(),
    };
    for (i, (name, a)) in pipelines.iter().enumerate() {
        if !routes(a) {
            plan.pipelines.push((name.clone(), a.clone()));
            plan.origin.push(i);
            plan.routed.push(false);
            plan.by_message.push(None);
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
        if routing.template.by_message() {
            let listed = (cluster.tables)(a).map_err(|e| {
                Exit::failed(format!(
                    "listing the tables --table {} may name: {e}",
                    a.table
                ))
            })?;
            let mut wanted = cluster.wanted.clone();
            if a.create_table_like.is_none() {
                wanted.clear();
            }
            let tables = routing.writable(&listed, &wanted);
            plan.watch.tables.push((i, tables.clone()));
            // Under --create-table-like the template is one of the tables
            // too, which no message is routed to: the pipeline then reads
            // its topics (and makes a table a message asks for) before any
            // table of its exists.
            let tables: Vec<String> = (routing.create_like.iter().cloned())
                .chain(tables)
                .collect();
            if tables.is_empty() {
                for topic in topics {
                    plan.refused.push(Refused {
                        origin: i,
                        topic,
                        why: format!(
                            "no table that --table {} can name and --allow-tables lets through exists",
                            a.table
                        ),
                    });
                }
                continue;
            }
            let topics: Vec<String> = topics.into_iter().collect();
            for table in tables {
                let mut args = a.clone();
                args.table = table.clone();
                args.topics = topics.clone();
                plan.pipelines.push((format!("{name}/{table}"), args));
                plan.origin.push(i);
                plan.routed.push(true);
                plan.by_message.push(Some(i));
            }
            continue;
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
            plan.by_message.push(None);
        }
    }
    Ok(plan)
}

impl Plan {
    /// Per pipeline, the router of the given pipeline whose messages name
    /// their table, when it is one of its tables: one per given pipeline,
    /// shared by its tables, each table indexed in plan order. `wanted`:
    /// where a missing table is asked for, when the pipelines can start
    /// again (under `--create-table-like`).
    pub fn routers(
        &self,
        given: &[(String, RunArgs)],
        wanted: Option<&message::Wanted>,
        unmade: &HashMap<String, String>,
    ) -> Result<Vec<Option<Arc<message::RouterSpec>>>, Exit> {
        let mut specs: BTreeMap<usize, Arc<message::RouterSpec>> = BTreeMap::new();
        for &origin in self.by_message.iter().flatten() {
            if specs.contains_key(&origin) {
                continue;
            }
            let a = &given[origin].1;
            let routing = Routing::of(a)?;
            // The template's table is one of the chain's, never routed to.
            let tables = (self.pipelines.iter().zip(&self.by_message))
                .filter(|(_, o)| **o == Some(origin))
                .enumerate()
                .filter(|(_, ((_, p), _))| routing.create_like.as_ref() != Some(&p.table))
                .map(|(k, ((_, p), _))| (p.table.clone(), k))
                .collect();
            let spec = message::RouterSpec {
                may: routing.may_name(),
                unmade: unmade.clone(),
                template: routing.template,
                map: routing.map.into_iter().collect(),
                tables,
                wanted: wanted.filter(|_| a.create_table_like.is_some()).cloned(),
                not_made: if a.create_table_like.is_some() {
                    message::BOUNDED
                } else {
                    message::NO_TEMPLATE
                },
                tombstones_owe_nothing: a.envelope == Envelope::Debezium,
            };
            specs.insert(origin, Arc::new(spec));
        }
        Ok((self.by_message.iter())
            .map(|o| o.and_then(|o| specs.get(&o).cloned()))
            .collect())
    }

    /// Mark the topics of `pipelines[index]` refused (its table is missing)
    /// and drop it from the plan.
    pub fn refuse_pipeline(&mut self, index: usize, why: &str) {
        let (_, a) = self.pipelines.remove(index);
        let origin = self.origin.remove(index);
        self.routed.remove(index);
        if self.by_message.remove(index).is_some() {
            // Its topics feed the origin's other tables: a message naming
            // this one is a bad message as it comes (`message::RouterSpec`).
            if !self.origin.contains(&origin) {
                for topic in a.topics {
                    self.refused.push(Refused {
                        origin,
                        topic,
                        why: why.to_owned(),
                    });
                }
            }
            return;
        }
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
        for (table, extra, says) in [
            ("db.{header:tenant}", &[][..], "needs --allow-tables"),
            ("db.{field:/type}", &[][..], "needs --allow-tables"),
            ("db.{field:type}", &[][..], "is not a JSON pointer"),
            ("db.{header:}", &[][..], "unknown placeholder {header:}"),
            (
                "db.{field:/type}",
                &["--allow-tables", "db.*", "--format", "csv"][..],
                "named by --csv-columns, which is not given",
            ),
            (
                "db.{field:/type}",
                &[
                    "--allow-tables",
                    "db.*",
                    "--format",
                    "csv",
                    "--csv-columns",
                    "n,kind",
                ][..],
                "--csv-columns names no field type",
            ),
            (
                "db.{field:/type}",
                &[
                    "--allow-tables",
                    "db.*",
                    "--format",
                    "raw",
                    "--raw-column",
                    "v",
                ][..],
                "--format raw has no fields",
            ),
            (
                "db.{header:t}",
                &["--allow-tables", "db.*", "--delivery", "exactly-once"][..],
                "exactly-once routes by topic only",
            ),
            (
                "db.{field:/t}",
                &["--allow-tables", "db.*", "--envelope", "upsert"][..],
                "a tombstone deletes its key, and it has no field",
            ),
            ("db.{tpoic}", &[][..], "unknown placeholder {tpoic}"),
            ("db.{topic", &[][..], "without"),
        ] {
            let mut argv = vec!["--topic", "orders", "--table", table];
            argv.extend_from_slice(extra);
            let a = args(&argv);
            let Err(e) = expand(&[("p".into(), a)], &cluster) else {
                panic!("{table} was taken");
            };
            assert!(e.message().contains(says), "{table}: {}", e.message());
            assert_eq!(e.code(), 2);
        }
        // Every format with fields routes by one.
        for extra in [
            &["--format", "json"][..],
            &["--format", "avro", "--schema-registry", "http://r:8081"],
            &["--format", "protobuf", "--schema-registry", "http://r:8081"],
            &["--format", "csv", "--csv-columns", "n,type"],
        ] {
            let mut argv = vec!["--topic", "orders", "--table", "db.{field:/type}"];
            argv.extend_from_slice(&["--allow-tables", "db.*"]);
            argv.extend_from_slice(extra);
            if let Err(e) = Routing::of(&args(&argv)) {
                panic!("{extra:?}: {}", e.message());
            }
        }
    }

    #[test]
    fn a_template_naming_the_table_by_message_writes_every_allowed_table_there_is() {
        let a = args(&[
            "--topic",
            "^(orders|users)$",
            "--table",
            "db.ev_{header:tenant}",
            "--allow-tables",
            r"db\.ev_(acme|globex|new|x)",
            "--table-map",
            "audit=db.ev_x",
        ]);
        let listed = |_: &RunArgs| -> Result<Vec<String>, String> {
            Ok([
                "db.ev_acme",
                "db.ev_globex",
                "db.ev_denied",
                "other.ev_acme",
                "db.tmpl",
                "db.ev_x",
            ]
            .map(String::from)
            .to_vec())
        };
        let wanted = BTreeSet::from(["db.ev_new".to_owned(), "db.ev_nope".to_owned()]);
        let given = vec![("p".to_owned(), a.clone())];
        let on = |wanted: &BTreeSet<String>| {
            let cluster = Cluster {
                topics: &cluster,
                tables: &listed,
                wanted,
            };
            expand_on(&given, &cluster).unwrap()
        };
        let plan = on(&wanted);
        let topics = vec!["orders".to_owned(), "users".to_owned()];
        assert_eq!(
            tables(&plan),
            vec![
                ("p/db.ev_acme".into(), "db.ev_acme".into(), topics.clone()),
                ("p/db.ev_globex".into(), "db.ev_globex".into(), topics.clone()),
                ("p/db.ev_x".into(), "db.ev_x".into(), topics.clone()),
            ],
            "allowed and of the template's shape, or mapped; a wanted table only under --create-table-like"
        );
        assert_eq!(plan.by_message, vec![Some(0); 3]);
        let routers = plan.routers(&given, None, &HashMap::new()).unwrap();
        let spec = routers[0].clone().unwrap();
        assert!(routers
            .iter()
            .all(|r| Arc::ptr_eq(r.as_ref().unwrap(), &spec)));
        assert_eq!(spec.tables["db.ev_globex"], 1);

        let mut a = a;
        a.create_table_like = Some("db.tmpl".into());
        let given = vec![("p".to_owned(), a)];
        let cluster = Cluster {
            topics: &cluster,
            tables: &listed,
            wanted: &wanted,
        };
        let plan = expand_on(&given, &cluster).unwrap();
        assert_eq!(
            tables(&plan).into_iter().map(|t| t.1).collect::<Vec<_>>(),
            vec!["db.tmpl", "db.ev_acme", "db.ev_globex", "db.ev_new", "db.ev_x"],
            "a table a message asked for is made (db.ev_nope is not allowed); the template is one the chain's tables, first"
        );
        let routers = plan.routers(&given, None, &HashMap::new()).unwrap();
        let spec = routers[0].clone().unwrap();
        assert!(
            !spec.tables.contains_key("db.tmpl"),
            "no message is routed to the template"
        );
        assert_eq!(spec.tables["db.ev_acme"], 1);
        assert!(plan.refused.is_empty());
        // The watch sees a new table the allowlist lets through, only.
        let mut now = listed(&given[0].1).unwrap();
        now.push("db.ev_denied2".into());
        assert_eq!(
            plan.watch.table_changes(&given, &[now.clone()]).unwrap(),
            None
        );
        now.push("db.ev_new".into());
        assert_eq!(
            plan.watch.table_changes(&given, &[now]).unwrap(),
            None,
            "made at this start already"
        );
        now = listed(&given[0].1).unwrap();
        now.push("db.ev_new".into());
        let before = on(&BTreeSet::new());
        assert_eq!(
            before
                .watch
                .table_changes(&given, &[now])
                .unwrap()
                .as_deref(),
            Some("new tables db.ev_new")
        );
    }

    #[test]
    fn no_table_to_write_refuses_the_topics_of_a_template_naming_it_by_message() {
        let a = args(&[
            "--topic",
            "orders",
            "--table",
            "db.ev_{field:/t}",
            "--allow-tables",
            r"db\.ev_.*",
        ]);
        let cluster = Cluster {
            topics: &cluster,
            tables: &|_| Ok(vec!["db.other".into()]),
            wanted: &BTreeSet::new(),
        };
        let plan = expand_on(&[("p".into(), a)], &cluster).unwrap();
        assert!(plan.pipelines.is_empty());
        assert!(plan.refused[0]
            .why
            .contains("no table that --table db.ev_{field:/t} can name"));
        assert!(!plan.watch.is_empty(), "a table made later is looked for");
    }
}

#[cfg(test)]
mod by_message_tests {
    use super::tests::args;
    use super::*;

    fn plan_of(extra: &[&str], listed: &[&str]) -> Plan {
        let mut argv = vec!["--topic", "orders"];
        argv.extend_from_slice(extra);
        let listed: Vec<String> = listed.iter().map(|t| (*t).to_owned()).collect();
        let cluster = Cluster {
            topics: &|_| Ok(vec!["orders".to_owned()]),
            tables: &|_| Ok(listed.clone()),
            wanted: &BTreeSet::new(),
        };
        expand_on(&[("p".into(), args(&argv))], &cluster).unwrap()
    }

    fn tables(plan: &Plan) -> Vec<&str> {
        (plan.pipelines.iter())
            .map(|(_, a)| a.table.as_str())
            .collect()
    }

    #[test]
    fn with_no_table_yet_the_template_reads_the_topics_and_no_message_writes_it() {
        let plan = plan_of(
            &[
                "--table",
                "t.ev_{header:tenant}",
                "--allow-tables",
                r"t\.ev_.*",
                "--create-table-like",
                "t.ev_template",
            ],
            &["t.ev_template", "t.other"],
        );
        assert_eq!(
            tables(&plan),
            vec!["t.ev_template"],
            "the template, though the allowlist matches it, is no message's table"
        );
        assert!(plan.refused.is_empty(), "{:?}", plan.refused);
        let given = [("p".to_owned(), plan.pipelines[0].1.clone())];
        let routers = plan.routers(&given, None, &HashMap::new()).unwrap();
        assert!(routers[0].as_ref().unwrap().tables.is_empty());
    }

    #[test]
    fn a_template_without_a_database_names_tables_of_default() {
        let plan = plan_of(
            &[
                "--table",
                "ev_{header:tenant}",
                "--allow-tables",
                r"default\.ev_.*",
            ],
            &["default.ev_a", "other.ev_b", "default.`odd.name`"],
        );
        assert_eq!(tables(&plan), vec!["default.ev_a"]);
    }
}
