//! Routing by the message: a `--table` template with `{header:NAME}` or
//! `{field:/POINTER}` gives each message's table, which the drivers'
//! chains resolve per message ([`MessageRouter`], a
//! [`Router`](spate_core::pipeline::Router)).
//!
//! The tables such a pipeline can write are those its `--allow-tables`
//! lets through that exist when the pipelines start (each a sink of its
//! own, [`super::expand`]): one chain writes them all, through one writer,
//! so a partition whose messages go to several tables commits only as far
//! as every table took its rows. A message naming an allowed table that
//! does not exist waits for it under `--create-table-like`
//! ([`Routed::Wait`]: its partition holds, the pipelines start again with
//! the table made), and is a bad message without it. The resolved name is
//! matched against the allowlist as a whole, so a producer picks among
//! the allowed tables only.

use super::Template;
use spate_clickhouse::{FieldReader, FormatSpec};
use spate_core::pipeline::{Routed, Router};
use spate_core::record::Message;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// What every driver's router of one routing pipeline shares.
pub(crate) struct RouterSpec {
    pub template: Template,
    /// Which names may be written.
    pub may: super::MayName,
    /// Tables a message asked for whose making failed, and why.
    pub unmade: HashMap<String, String>,
    /// `--table-map`: a topic's table, whatever its messages say.
    pub map: HashMap<String, String>,
    /// The tables written, as `db.table`, in the chain's order.
    pub tables: HashMap<String, usize>,
    /// Under `--create-table-like`, while the pipelines can start again:
    /// where a missing table is asked for.
    pub wanted: Option<Wanted>,
    /// Why a missing table is not made (no `wanted`): the end of a bad
    /// message's reason.
    pub not_made: &'static str,
    /// A tombstone owes no row whatever its table (`--envelope
    /// debezium`): it is routed nowhere, not refused for lacking the
    /// header or field that would name its table.
    pub tombstones_owe_nothing: bool,
}

/// [`RouterSpec::not_made`] without `--create-table-like`.
pub(crate) const NO_TEMPLATE: &str = "no --create-table-like is given";

/// [`RouterSpec::not_made`] of a bounded run (`--until-end`), which does
/// not start the pipelines again to make a table.
pub(crate) const BOUNDED: &str = "a bounded run (--until-end) does not start again to create it";

/// The tables messages asked for that are not there yet, and the signal
/// that starts the pipelines again to make and write them.
#[derive(Clone)]
pub(crate) struct Wanted {
    pub tables: Arc<Mutex<BTreeSet<String>>>,
    pub restart: Arc<tokio::sync::Notify>,
}

impl RouterSpec {
    /// Where a message whose table is `name` goes.
    fn decide(&self, name: &str) -> Routed {
        let table = match spate_clickhouse::TableRef::parse(name) {
            Ok(t) => t.to_string(),
            Err(_) => {
                return Routed::Refused(format!(
                    "the message gives table name `{name}`, which is not [DB.]TABLE"
                ))
            }
        };
        if !self.may.allowed(&table) {
            return Routed::Refused(format!("table {table} is not allowed by --allow-tables"));
        }
        if let Some(&t) = self.tables.get(&table) {
            return Routed::Table(t);
        }
        if let Some(why) = self.unmade.get(&table) {
            return Routed::Refused(why.clone());
        }
        if !self.may.may_write(&table) {
            return Routed::Refused(format!(
                "the message gives table name `{name}`, which is not [DB.]TABLE as --table names it"
            ));
        }
        match &self.wanted {
            Some(wanted) => {
                let new =
                    (wanted.tables.lock().unwrap_or_else(|p| p.into_inner())).insert(table.clone());
                if new {
                    tracing::info!(%table, "a message asks for a table that is not there: starting the pipelines again to create it from --create-table-like");
                }
                wanted.restart.notify_one();
                Routed::Wait(table)
            }
            None => Routed::Refused(format!(
                "table {table} does not exist, and {}",
                self.not_made
            )),
        }
    }
}

/// Most resolved names a router remembers (a producer sending ever new
/// names must not grow it without bound).
const REMEMBERED: usize = 4096;

/// One driver's router of a routing pipeline.
pub(crate) struct MessageRouter {
    spec: Arc<RouterSpec>,
    /// Reads `{field:...}` values in the pipeline's format.
    fields: FieldReader,
    name: String,
    /// Per resolved name, where it goes: the allowlist's regex and the
    /// table lookup once per name, not per message.
    known: HashMap<Box<str>, Routed>,
}

impl MessageRouter {
    pub fn new(spec: Arc<RouterSpec>, format: &FormatSpec) -> Self {
        Self {
            spec,
            fields: FieldReader::new(format),
            name: String::with_capacity(64),
            known: HashMap::new(),
        }
    }
}

impl Router for MessageRouter {
    fn route(&mut self, msg: &Message<'_>) -> Routed {
        if msg.payload.is_none() && self.spec.tombstones_owe_nothing {
            return Routed::Nothing("tombstone");
        }
        self.name.clear();
        match self.spec.map.get(msg.topic) {
            Some(table) => self.name.push_str(table),
            None => {
                if let Err(why) =
                    (self.spec.template).resolve_message(msg, &mut self.fields, &mut self.name)
                {
                    return Routed::Refused(why);
                }
            }
        }
        if let Some(routed) = self.known.get(self.name.as_str()) {
            if let Routed::Wait(_) = routed {
                // Asked again: the restart may have been taken already.
                return self.spec.decide(&self.name);
            }
            return routed.clone();
        }
        let routed = self.spec.decide(&self.name);
        if self.known.len() >= REMEMBERED {
            self.known.clear();
        }
        self.known.insert(self.name.as_str().into(), routed.clone());
        routed
    }
}

/// The value of header `name` of `msg`, as text.
pub(super) fn header<'m>(msg: &Message<'m>, name: &str) -> Result<&'m str, String> {
    let headers = msg.headers;
    let found = headers.and_then(|h| {
        (0..h.count())
            .filter_map(|i| h.get(i))
            .find(|(n, _)| *n == name.as_bytes())
    });
    match found {
        Some((_, Some(value))) => std::str::from_utf8(value)
            .map_err(|_| format!("no table name: header {name} is not UTF-8 text")),
        Some((_, None)) => Err(format!("no table name: header {name} is null")),
        None => Err(format!("no table name: the message has no header {name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spate_core::record::Headers;

    #[derive(Debug)]
    struct Hs(Vec<(&'static [u8], Option<&'static [u8]>)>);

    impl Headers for Hs {
        fn count(&self) -> usize {
            self.0.len()
        }
        fn get(&self, i: usize) -> Option<(&[u8], Option<&[u8]>)> {
            self.0.get(i).copied()
        }
    }

    fn msg<'a>(payload: Option<&'a [u8]>, headers: Option<&'a dyn Headers>) -> Message<'a> {
        Message {
            topic: "ev",
            partition: 0,
            offset: 7,
            timestamp_ms: None,
            key: None,
            payload,
            headers,
        }
    }

    #[test]
    fn a_header_is_read_by_name() {
        let hs = Hs(vec![
            (b"other", Some(b"x")),
            (b"tenant", Some(b"acme")),
            (b"nul", None),
            (b"bin", Some(b"\xff")),
        ]);
        let m = msg(Some(b"{}"), Some(&hs));
        assert_eq!(header(&m, "tenant"), Ok("acme"));
        for (name, says) in [
            ("nope", "has no header nope"),
            ("nul", "null"),
            ("bin", "not UTF-8"),
        ] {
            let e = header(&m, name).unwrap_err();
            assert!(e.contains(says), "{name}: {e}");
        }
        assert!(header(&msg(None, None), "tenant").is_err());
    }

    fn spec(tables: &[&str], wanted: Option<Wanted>) -> Arc<RouterSpec> {
        Arc::new(RouterSpec {
            template: Template::parse("db.ev_{header:tenant}").unwrap(),
            may: super::super::MayName {
                shape: regex::Regex::new(r"^db\.ev_.+$").unwrap(),
                allow: Some(regex::Regex::new(r"^(?:db\.ev_(acme|globex|new|x|))$").unwrap()),
                template: None,
            },
            unmade: HashMap::from([(
                "db.ev_x".to_owned(),
                "table db.ev_x does not exist, and making it failed: no right".to_owned(),
            )]),
            map: HashMap::from([("audit".to_owned(), "db.ev_globex".to_owned())]),
            tables: (tables.iter().enumerate())
                .map(|(i, t)| ((*t).to_owned(), i))
                .collect(),
            wanted,
            not_made: NO_TEMPLATE,
            tombstones_owe_nothing: false,
        })
    }

    #[test]
    fn each_message_goes_to_its_allowed_table_or_is_refused_with_why() {
        let mut r = MessageRouter::new(
            spec(&["db.ev_acme", "db.ev_globex"], None),
            &FormatSpec::Json,
        );
        let route = |r: &mut MessageRouter, tenant: &'static [u8], topic: &'static str| {
            let hs = Hs(vec![(b"tenant", Some(tenant))]);
            let m = Message {
                topic,
                ..msg(Some(b"{}"), Some(&hs))
            };
            r.route(&m)
        };
        assert_eq!(route(&mut r, b"acme", "ev"), Routed::Table(0));
        assert_eq!(route(&mut r, b"globex", "ev"), Routed::Table(1));
        assert_eq!(route(&mut r, b"acme", "ev"), Routed::Table(0), "remembered");
        assert_eq!(
            route(&mut r, b"acme", "audit"),
            Routed::Table(1),
            "the map wins"
        );
        for (tenant, says) in [
            (
                &b"other"[..],
                "table db.ev_other is not allowed by --allow-tables",
            ),
            (b"x.y", "which is not [DB.]TABLE"),
            (b"a b`", "is not allowed"),
            (
                b"new",
                "table db.ev_new does not exist, and no --create-table-like is given",
            ),
            (b"", "no table name: header tenant is empty"),
            (b"x", "making it failed: no right"),
        ] {
            match route(&mut r, tenant, "ev") {
                Routed::Refused(why) => assert!(why.contains(says), "{why}"),
                other => panic!("{other:?}"),
            }
        }
        for (tenant, label) in [
            (&b"other"[..], "table_not_allowed"),
            (b"new", "table_missing"),
            (b"x.y", "table_unresolved"),
            (b"", "table_unresolved"),
            (b"x", "table_missing"),
        ] {
            let Routed::Refused(why) = route(&mut r, tenant, "ev") else {
                panic!()
            };
            assert_eq!(spate_core::policy::decode_reason(&why), label, "{why}");
        }
        let none = r.route(&msg(Some(b"{}"), None));
        let Routed::Refused(why) = none else {
            panic!("{none:?}")
        };
        assert_eq!(spate_core::policy::decode_reason(&why), "table_unresolved");
    }

    #[test]
    fn a_change_stream_s_tombstone_owes_nothing_and_needs_no_table() {
        let tombstone = msg(None, None);
        let mut r = MessageRouter::new(spec(&["db.ev_acme"], None), &FormatSpec::Json);
        assert!(
            matches!(r.route(&tombstone), Routed::Refused(why) if why.contains("no header tenant")),
            "a plain tombstone without the header has no table"
        );
        let mut debezium = Arc::into_inner(spec(&["db.ev_acme"], None)).unwrap();
        debezium.tombstones_owe_nothing = true;
        let mut r = MessageRouter::new(Arc::new(debezium), &FormatSpec::Json);
        assert_eq!(r.route(&tombstone), Routed::Nothing("tombstone"));
        let hs = Hs(vec![(b"tenant", Some(b"acme"))]);
        assert_eq!(
            r.route(&msg(Some(b"{}"), Some(&hs))),
            Routed::Table(0),
            "a change is routed"
        );
    }

    #[test]
    fn a_missing_allowed_table_is_asked_for_under_create_table_like() {
        let wanted = Wanted {
            tables: Arc::default(),
            restart: Arc::new(tokio::sync::Notify::new()),
        };
        let mut r = MessageRouter::new(
            spec(&["db.ev_acme"], Some(wanted.clone())),
            &FormatSpec::Json,
        );
        let hs = Hs(vec![(b"tenant", Some(b"new"))]);
        assert_eq!(
            r.route(&msg(Some(b"{}"), Some(&hs))),
            Routed::Wait("db.ev_new".into())
        );
        assert_eq!(
            wanted.tables.lock().unwrap().iter().collect::<Vec<_>>(),
            vec!["db.ev_new"]
        );
        let hs = Hs(vec![(b"tenant", Some(b"other"))]);
        assert!(
            matches!(r.route(&msg(Some(b"{}"), Some(&hs))), Routed::Refused(_)),
            "outside the allowlist nothing is made"
        );
        assert_eq!(wanted.tables.lock().unwrap().len(), 1);
    }
}
