//! The insert's type guard (docs/rows.md, "The insert's type check"). A
//! server that does not convert a batch's values to the table's types
//! refuses a batch encoded for a column's old type after
//! `ALTER … MODIFY COLUMN` (Native before 23.3, see
//! [`ServerFeatures::native_converts_types`]: a bad cast) or stores it
//! misread with no error (every RowBinary format: the rows are read
//! misaligned). The schema re-read ([`super::live`]) sees a change within
//! 10 s; the guard closes most of that window. For such servers an insert
//! worker asks the replica it sends to for the table's columns:
//! - before each attempt ([`TypeGuard::before`]): if a column it sends
//!   changed type or went away, the schema is re-read at once and the batch
//!   re-encoded for it before it is sent; while spate cannot apply the
//!   change (replicas disagree), the worker waits, reported as a stall;
//! - after the server confirmed a RowBinary insert
//!   ([`TypeGuard::after`]; a Native block of another type is refused,
//!   not misread): a change there means the ALTER committed while the
//!   insert was on its way, possibly first. The insert is logged by topic,
//!   partition and offsets and counted in `spate_schema_races_total`;
//!   under at-least-once a copy encoded for the new types is inserted as
//!   well, or, if none can be made, the chunk fails unacknowledged and its
//!   messages are read again (under exactly-once a copy would be a
//!   duplicate, so only the log says it). A check the replica does not
//!   answer there is never taken for clean: it is asked again every
//!   second, reported in the stall table (so `/readyz` names it after
//!   `--stall-timeout`), until it answers or the drain deadline abandons
//!   the chunk (unacknowledged: it replays). A slow replica so delays the
//!   chunk's acknowledgement, never fails the pipeline. If the schema
//!   version the insert was encoded for is gone meanwhile (the table
//!   changed), under at-least-once the chunk fails unacknowledged (its
//!   messages are read again); under exactly-once an error names its
//!   offsets (a replay would be dropped as a duplicate).
//!
//! The guard is a value an insert worker makes per insert
//! ([`TypeGuard::of`]) and asks before and after each attempt; the
//! re-encoding it calls for is the worker's (it owns the bytes). Touched
//! by insert workers (tokio tasks), one check per attempt.

use super::version::LiveSchema;
use crate::schema::{Column, ServerFeatures};
use crate::sink::insert::outcome::{Attempt, Prepared};
use crate::sink::insert::pace::Pace;
use crate::sink::insert::settings::DEDUP_TOKEN;
use crate::sink::insert::shard::Replica;
use crate::sink::insert::target::InsertTarget;
use crate::types::ChType;
use prometheus::IntCounterVec;
use spate_core::error::{FatalError, Fault};
use spate_core::sink::Chunk;
use std::time::Duration;

/// How long a worker waits for the replica's columns before it goes on
/// without the check (the insert then meets the same server; short, so a
/// frozen server costs each attempt little more than its own timeout).
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a worker waits before it checks again while spate cannot
/// apply the change it saw, or after a check went unanswered.
const WAIT_FOR_AGREEMENT: Duration = Duration::from_secs(1);

/// Whether inserts in `format` need the check on a server with `features`.
fn guarded(format: &str, features: ServerFeatures) -> bool {
    !(format == "Native" && features.native_converts_types)
}

/// Each column of `sent` (name and the type it was encoded for) that the
/// table as it is now (`now`) has with another type, or no longer takes,
/// described for the log: `` `a` UInt32 -> UInt64 ``.
pub(crate) fn changed(sent: &[(String, ChType)], now: &[Column]) -> Vec<String> {
    sent.iter()
        .filter_map(|(name, ty)| {
            match now
                .iter()
                .find(|c| &c.name == name && c.default_kind.is_insertable())
            {
                Some(c) if &c.ty == ty => None,
                Some(c) => Some(format!("`{name}` {ty} -> {}", c.ty)),
                None => Some(format!("`{name}` gone")),
            }
        })
        .collect()
}

/// The columns `columns` (an insert's column list) with their types in
/// `schema` (the version the insert was made for).
pub(crate) fn sent_types(columns: &[String], schema: &[Column]) -> Vec<(String, ChType)> {
    columns
        .iter()
        .filter_map(|name| {
            let c = schema.iter().find(|c| &c.name == name)?;
            Some((name.clone(), c.ty.clone()))
        })
        .collect()
}

/// `extra` (an insert's settings) for a copy made for schema `version`:
/// the deduplication token gets the version, or the server would drop the
/// copy as a repeat of the insert it replaces.
pub(crate) fn copy_settings(extra: &[(String, String)], version: u64) -> Vec<(String, String)> {
    extra
        .iter()
        .map(|(k, v)| match k.as_str() {
            DEDUP_TOKEN => (k.clone(), format!("{v}-schema{version}")),
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

/// The type guard of one sink's inserts.
pub(crate) struct TypeGuard<'a> {
    live: &'a LiveSchema,
    /// Exactly-once: a copy would be a duplicate, so none is made.
    exactly_once: bool,
    /// `spate_schema_races_total`, and the table's label in it.
    races: (&'a IntCounterVec, &'a str),
}

/// What a confirmed insert calls for ([`TypeGuard::after`]).
pub(crate) enum After {
    /// Nothing changed: the insert stands.
    Clean,
    /// A column it sent changed type while it was on its way: insert a
    /// copy encoded for the new types too (spate uses them now); `change`
    /// and `ranges` are for the log.
    Copy { change: String, ranges: String },
    /// The chunk ends here unacknowledged: failed (its messages are read
    /// again) or abandoned at the drain deadline.
    Stop(Attempt),
}

impl<'a> TypeGuard<'a> {
    /// The guard of a sink following `live` (none when it does not follow
    /// the table's changes).
    pub(crate) fn of(
        live: Option<&'a LiveSchema>,
        exactly_once: bool,
        races: (&'a IntCounterVec, &'a str),
    ) -> Option<Self> {
        Some(TypeGuard {
            live: live?,
            exactly_once,
            races,
        })
    }

    /// Whether inserts of `prepared` need the check on this server.
    fn applies(&self, prepared: &Prepared) -> bool {
        guarded(prepared.query.format, self.live.features())
    }

    /// What changed on `replica` among the columns `prepared` sends
    /// (`Err`: why it is not known: the replica did not answer in time,
    /// or the version is gone).
    async fn changed_on<C: InsertTarget>(
        &self,
        replica: &Replica<C>,
        prepared: &Prepared,
    ) -> Result<Vec<String>, String> {
        let version = (self.live.get(prepared.for_version))
            .ok_or_else(|| format!("schema version {} is gone", prepared.for_version))?;
        let sent = sent_types(&prepared.query.columns, &version.columns);
        let asked = (replica.client).columns(&prepared.query.db, &prepared.query.table);
        match tokio::time::timeout(CHECK_TIMEOUT, asked).await {
            Ok(Ok(now)) => Ok(changed(&sent, &now)),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the type guard could not read the columns");
                Err(format!("reading the columns failed: {e}"))
            }
            Err(_) => Err(format!(
                "the columns were not read within {CHECK_TIMEOUT:?}"
            )),
        }
    }

    /// [`changed_on`](Self::changed_on) after a confirmed insert, asked
    /// again every [`WAIT_FOR_AGREEMENT`] while unanswered (reported failing
    /// in the stall table meanwhile). `Err(Ok(why))`: the version the
    /// insert was encoded for is gone; `Err(Err(stop))`: abandoned at the
    /// drain deadline.
    async fn changed_after<C: InsertTarget>(
        &self,
        replica: &Replica<C>,
        prepared: &Prepared,
        pace: &mut Pace,
    ) -> Result<Vec<String>, Result<String, Attempt>> {
        let mut reported = false;
        loop {
            match self.changed_on(replica, prepared).await {
                Ok(change) => {
                    if reported {
                        pace.cleared();
                    }
                    return Ok(change);
                }
                Err(e) if self.live.get(prepared.for_version).is_none() => return Err(Ok(e)),
                Err(why) => {
                    pace.failing(&format!(
                        "the type check after an insert on {}: {why}",
                        replica.url
                    ));
                    reported = true;
                }
            }
            if pace.pause(WAIT_FOR_AGREEMENT).await.is_err() {
                return Err(Err(Attempt::Abandoned));
            }
        }
    }

    /// A confirmed insert whose type check cannot be made (`why`: its
    /// schema version is gone, the table changed): never taken for clean. At-least-once fails the chunk unacknowledged (its
    /// messages are read again, as when no copy can be made); exactly-once
    /// names its offsets in an error and goes on.
    fn unchecked(&self, chunk: &Chunk, url: &str, why: &str, pace: &Pace) -> After {
        let ranges = chunk.describe_ranges();
        if self.exactly_once {
            tracing::error!(
                ranges = %ranges,
                replica = url,
                why,
                "the type check after an insert cannot be made: if the table's column types changed meanwhile, \
                 ClickHouse may have stored it misread; exactly-once inserts no copy (it would be a duplicate)"
            );
            return After::Clean;
        }
        After::Stop(Attempt::Failed(FatalError::new(
            pace.context(),
            format!(
                "the type check after the insert of {ranges} on {url} cannot be made ({why}); \
                 if the table's column types changed meanwhile, ClickHouse may have stored it \
                 misread: its messages are read again"
            ),
            Fault::External,
        )))
    }

    /// `replica` has `change` among the columns `prepared` sends: wait until
    /// spate uses a newer schema version (re-read at once; while replicas
    /// disagree, checked every second and reported as a stall). `Err`:
    /// abandoned at the drain deadline, or a change spate cannot encode.
    async fn await_new_version(
        &self,
        prepared: &Prepared,
        change: &str,
        url: &str,
        pace: &mut Pace,
    ) -> Result<(), Attempt> {
        let live = self.live;
        for round in 0u64.. {
            if live.version() != prepared.for_version {
                return Ok(());
            }
            tokio::select! {
                _ = live.refresh_now() => {}
                () = pace.deadline() => return Err(Attempt::Abandoned),
            }
            if live.version() != prepared.for_version {
                return Ok(());
            }
            if let Some(problem) = live.lasting_problem() {
                return Err(Attempt::Failed(FatalError::new(
                    pace.context(),
                    format!(
                        "the table's columns changed ({change}) in a way spate cannot encode: {problem}"
                    ),
                    Fault::User,
                )));
            }
            let why = format!(
                "replica {url} has changed columns ({change}) that spate does not use yet: {}",
                live.problem()
                    .unwrap_or_else(|| "the re-read has not seen them".into())
            );
            pace.failing(&why);
            if round == 0 {
                tracing::warn!(problem = %why, "waiting before the insert");
            }
            pace.pause(WAIT_FOR_AGREEMENT).await?;
        }
        Ok(())
    }

    /// Before an attempt on `replica`: whether `prepared` matches the
    /// table's types there. `Ok(Some(change))`: spate now uses a newer
    /// version (waiting while it cannot apply a change the replica already
    /// has): re-encode, and ask again. `Err`: abandoned at the drain
    /// deadline, or failed (a change spate cannot encode).
    pub(crate) async fn before<C: InsertTarget>(
        &self,
        replica: &Replica<C>,
        prepared: &Prepared,
        pace: &mut Pace,
    ) -> Result<Option<String>, Attempt> {
        if !self.applies(prepared) {
            return Ok(None);
        }
        let Ok(change) = self.changed_on(replica, prepared).await else {
            return Ok(None);
        };
        if change.is_empty() {
            return Ok(None);
        }
        let change = change.join(", ");
        self.await_new_version(prepared, &change, &replica.url, pace)
            .await?;
        Ok(Some(change))
    }

    /// After `replica` confirmed `prepared` in a format without types on
    /// the wire (RowBinary: a Native block of another type is refused by
    /// servers that do not convert it): if a column it sent has another
    /// type there now, the insert may be stored misread. Logged and
    /// counted; under at-least-once, a copy for the new types (once spate
    /// uses them) is called for; if none can be made, the worker fails
    /// the chunk unacknowledged so that its messages are read again
    /// (`Recovery::StartAgain`).
    pub(crate) async fn after<C: InsertTarget>(
        &self,
        chunk: &Chunk,
        replica: &Replica<C>,
        prepared: &Prepared,
        pace: &mut Pace,
    ) -> After {
        if !self.applies(prepared) || prepared.query.format == "Native" {
            return After::Clean;
        }
        let change = match self.changed_after(replica, prepared, pace).await {
            Ok(change) => change,
            Err(Ok(why)) => return self.unchecked(chunk, &replica.url, &why, pace),
            Err(Err(stop)) => return After::Stop(stop),
        };
        if change.is_empty() {
            return After::Clean;
        }
        let (ranges, change) = (chunk.describe_ranges(), change.join(", "));
        self.races.0.with_label_values(&[self.races.1]).inc();
        if self.exactly_once {
            tracing::error!(
                ranges = %ranges,
                change = %change,
                "an insert landed while the table's column types changed: ClickHouse may have stored it misread; \
                 exactly-once inserts no copy (it would be a duplicate)"
            );
            return After::Clean;
        }
        match self
            .await_new_version(prepared, &change, &replica.url, pace)
            .await
        {
            Ok(()) => After::Copy { change, ranges },
            Err(stop) => After::Stop(stop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::DefaultKind;
    use crate::types::parse_type;

    fn col(name: &str, ty: &str) -> Column {
        Column::plain(name, parse_type(ty).unwrap())
    }

    fn sent(cols: &[(&str, &str)]) -> Vec<(String, ChType)> {
        (cols.iter())
            .map(|(n, t)| ((*n).to_owned(), parse_type(t).unwrap()))
            .collect()
    }

    #[test]
    fn only_servers_that_convert_native_blocks_skip_the_check() {
        let old = ServerFeatures::from_version("18.16.1").unwrap();
        let new = ServerFeatures::from_version("26.9.1").unwrap();
        assert!(guarded("Native", old));
        assert!(!guarded("Native", new));
        assert!(guarded("RowBinary", new));
        assert!(guarded("RowBinaryWithDefaults", new));
    }

    #[test]
    fn a_changed_type_or_a_gone_column_is_named_and_added_columns_are_not() {
        let was = sent(&[("i", "UInt64"), ("a", "UInt32"), ("s", "String")]);
        let now = vec![
            col("i", "UInt64"),
            col("a", "UInt64"),
            col("b", "UInt16"),
            Column {
                default_kind: DefaultKind::Materialized,
                ..col("s", "String")
            },
        ];
        assert_eq!(
            changed(&was, &now),
            vec!["`a` UInt32 -> UInt64".to_owned(), "`s` gone".to_owned()]
        );
        assert!(changed(&was[..1], &now).is_empty());
    }

    #[test]
    fn the_sent_types_come_from_the_insert_columns() {
        let schema = vec![col("i", "UInt64"), col("a", "UInt32"), col("b", "UInt8")];
        let cols = vec!["a".to_owned(), "i".to_owned()];
        assert_eq!(
            sent_types(&cols, &schema),
            sent(&[("a", "UInt32"), ("i", "UInt64")])
        );
    }

    #[test]
    fn a_copy_gets_a_token_of_its_own() {
        let extra = vec![
            (DEDUP_TOKEN.to_owned(), "s0-p1:10-19".to_owned()),
            ("other".to_owned(), "1".to_owned()),
        ];
        let copy = copy_settings(&extra, 3);
        assert_eq!(copy[0].1, "s0-p1:10-19-schema3");
        assert_eq!(copy[1], extra[1]);
        assert!(copy_settings(&[], 3).is_empty());
    }
}

#[cfg(test)]
#[path = "guard_after_tests.rs"]
mod after_tests;
