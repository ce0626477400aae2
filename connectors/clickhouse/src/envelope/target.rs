//! What a change stream can do to the target table, read from the table
//! itself (`system.tables.engine_full`), never from a flag that could
//! disagree with it: [`TableEngine::parse`] reads the engine and its
//! sorting key, [`ChangePlan::resolve`] decides which columns spate fills
//! (version, deleted flag) or refuses to start, with the reason. Start-up
//! code only; no I/O but [`engine_full`].

use super::{EnvelopeKind, EnvelopeSpec, OnDelete, OnTruncate};
use crate::client::ChClient;
use crate::schema::Column;
use crate::types::ChType;

/// The target table's engine, as far as a change stream cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableEngine {
    /// `[Replicated]ReplacingMergeTree([ver[, is_deleted]])`.
    Replacing {
        /// The version column.
        version: Option<String>,
        /// The `is_deleted` column (23.2+).
        is_deleted: Option<String>,
    },
    /// `[Replicated]CollapsingMergeTree(sign)` or
    /// `[Replicated]VersionedCollapsingMergeTree(sign, ver)`.
    Collapsing {
        /// The engine's name.
        engine: String,
        /// The sign column.
        sign: Option<String>,
        /// The version column (`VersionedCollapsingMergeTree`).
        version: Option<String>,
    },
    /// Any other engine.
    Other {
        /// Its name.
        engine: String,
    },
}

/// The engine and the sorting key of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableShape {
    /// The engine.
    pub engine: TableEngine,
    /// The columns of `ORDER BY` (old-syntax tables: the primary key
    /// argument), as written; expressions stay as their text.
    pub sorting_key: Vec<String>,
    /// A `Replicated` engine.
    pub replicated: bool,
}

/// Split `s` at top-level commas (outside parentheses and quotes).
fn split_args(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                continue;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '`' | '"') => quote = Some(c),
            (None, '(' | '[') => depth += 1,
            (None, ')' | ']') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(cur.trim().to_owned());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_owned());
    }
    out
}

/// `(a, b)` or `a` → `[a, b]` / `[a]`; backquotes removed.
fn key_columns(s: &str) -> Vec<String> {
    let s = s.trim();
    let inner = match s.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        Some(inner) => inner,
        None => s,
    };
    split_args(inner)
        .into_iter()
        .map(|c| c.trim_matches('`').to_owned())
        .filter(|c| !c.is_empty())
        .collect()
}

/// The text of the parenthesised group opening at `s[0] == '('`, and the
/// rest after its `)`.
fn group(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0;
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '`' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return Some((&s[1..i], &s[i + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

impl TableShape {
    /// Read `engine_full` (as `system.tables` prints it).
    #[must_use]
    pub fn parse(engine_full: &str) -> TableShape {
        let s = engine_full.trim();
        let name_end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        let name = &s[..name_end];
        let rest = s[name_end..].trim_start();
        let (args, rest) = match rest.starts_with('(') {
            true => group(rest).map_or((Vec::new(), rest), |(a, r)| (split_args(a), r)),
            false => (Vec::new(), rest),
        };
        let bare = name.strip_prefix("Replicated").unwrap_or(name);
        // A Replicated engine's first two arguments are its ZooKeeper path
        // and replica name (string literals), when given.
        let params: &[String] = match name.starts_with("Replicated")
            && args.first().is_some_and(|a| a.starts_with('\''))
        {
            true => args.get(2..).unwrap_or_default(),
            false => &args,
        };
        let order_by = rest.find("ORDER BY ").map(|at| {
            let tail = rest[at + "ORDER BY ".len()..].trim_start();
            let end = match tail.starts_with('(') {
                true => group(tail).map_or(tail.len(), |(g, _)| g.len() + 2),
                false => tail.find(char::is_whitespace).unwrap_or(tail.len()),
            };
            key_columns(&tail[..end])
        });
        // Old syntax (no ORDER BY): (date, primary key, granularity[, ver]).
        let old = order_by.is_none() && params.len() >= 3;
        let (sorting_key, params) = match (order_by, old) {
            (Some(k), _) => (k, params),
            (None, true) => (key_columns(&params[1]), &params[3..]),
            (None, false) => (Vec::new(), params),
        };
        let column = |i: usize| params.get(i).map(|p| p.trim_matches('`').to_owned());
        let engine = match bare {
            "ReplacingMergeTree" => TableEngine::Replacing {
                version: column(0),
                is_deleted: column(1),
            },
            "CollapsingMergeTree" => TableEngine::Collapsing {
                engine: name.to_owned(),
                sign: column(0),
                version: None,
            },
            "VersionedCollapsingMergeTree" => TableEngine::Collapsing {
                engine: name.to_owned(),
                sign: column(0),
                version: column(1),
            },
            _ => TableEngine::Other {
                engine: name.to_owned(),
            },
        };
        TableShape {
            engine,
            sorting_key,
            replicated: name.starts_with("Replicated"),
        }
    }
}

/// The `engine_full` of `db.table`.
pub(crate) async fn engine_full(
    client: &ChClient,
    db: &str,
    table: &str,
) -> Result<String, String> {
    use crate::sink::exactly_once::sql::{table_row, untsv};
    let row = table_row(client, (db, table), "replaceAll(engine_full, '\\t', ' ')").await?;
    Ok(untsv(&row))
}

/// Which columns a change stream fills in the target table, beyond the
/// row image, and how many rows a change makes: resolved once at start
/// from the table's shape and columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangePlan {
    /// The envelope and its switches.
    pub spec: EnvelopeSpec,
    /// The rows a change makes.
    pub rows: ChangeRows,
    /// `--on-truncate delete-all`: the column by which a truncate deletes
    /// the rows of the changes before it: the version (compared with the
    /// truncate's own), or a collapsing table's `_offset`.
    pub truncate_by: Option<String>,
    /// The table's engine is `Replicated` (a mutation on one replica of a
    /// shard reaches the others).
    pub replicated: bool,
}

impl ChangePlan {
    /// Whether changes cancel and rewrite rows of a collapsing table,
    /// whose rows of a key must keep their order.
    #[must_use]
    pub fn collapses(&self) -> bool {
        matches!(self.rows, ChangeRows::Collapse { .. })
    }
}

/// The column spate fills with a message's Kafka offset (docs/rows.md).
pub const OFFSET_COLUMN: &str = "_offset";

/// How a change becomes rows of the target table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeRows {
    /// A `ReplacingMergeTree`: one row per change, the last version of a
    /// key winning.
    Replace {
        /// Filled with the change's version: its position in the source's
        /// log where the connector has one, else its Kafka offset.
        version: String,
        /// Filled with 1 for a delete, 0 otherwise: the engine's
        /// `is_deleted`, else a column named [`DELETED_COLUMN`]; `None`
        /// under `--on-delete skip` with neither.
        deleted: Option<String>,
    },
    /// A `[Versioned]CollapsingMergeTree`: a change cancels the key's
    /// previous row (the `before` image, `sign` = -1) and writes its new
    /// one (the `after` image, +1); a create only the new one, a delete
    /// only the cancel row. Exactly-once only: a replayed cancel row
    /// would cancel once too often.
    Collapse {
        /// The sign column.
        sign: String,
        /// `VersionedCollapsingMergeTree`'s version column: not filled,
        /// the images carry it (the cancel row the previous row's).
        version: Option<String>,
    },
}

impl ChangeRows {
    /// What start-up logs and `spate check` print of it.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            ChangeRows::Replace { version, deleted } => format!(
                "a row per change, `{version}` = its log position (PostgreSQL lsn, MySQL binlog) or Kafka offset, deletes {}",
                deleted
                    .as_deref()
                    .map_or("skipped".to_owned(), |d| format!("marked by `{d}` = 1"))
            ),
            ChangeRows::Collapse { sign, version } => format!(
                "a cancel row (`{sign}` = -1, the before image) and a state row (+1, the after image) per update{}",
                version
                    .as_deref()
                    .map_or(String::new(), |v| format!(", `{v}` from the images"))
            ),
        }
    }

    /// The deleted column, if deletes are marked by one.
    #[must_use]
    pub fn deleted(&self) -> Option<&str> {
        match self {
            ChangeRows::Replace { deleted, .. } => deleted.as_deref(),
            ChangeRows::Collapse { .. } => None,
        }
    }
}

/// The column that marks deletes in a table whose engine has no
/// `is_deleted` (servers before 23.2): read with `FINAL WHERE _deleted = 0`.
pub const DELETED_COLUMN: &str = "_deleted";

fn is_wide_integer(ty: &ChType) -> bool {
    matches!(
        ty,
        ChType::UInt64
            | ChType::Int64
            | ChType::UInt128
            | ChType::Int128
            | ChType::UInt256
            | ChType::Int256
    )
}

impl ChangePlan {
    /// The plan for `spec` into a table of `shape` with `columns`, routed
    /// to `shards` shards by `shard_key` (empty: batches spread), written
    /// exactly-once or not. `Err`: why spate refuses to start.
    pub fn resolve(
        spec: EnvelopeSpec,
        shape: &TableShape,
        columns: &[Column],
        (shards, shard_key): (usize, &[String]),
        exactly_once: bool,
    ) -> Result<ChangePlan, String> {
        let rows = match &shape.engine {
            TableEngine::Replacing {
                version: Some(v),
                is_deleted,
            } => replacing(spec, v, is_deleted.clone(), columns)?,
            TableEngine::Replacing { version: None, .. } => {
                return Err("the table is a ReplacingMergeTree without a version column: it keeps the last row inserted, and spate inserts batches concurrently, so an older change could win. Create it as ReplacingMergeTree(ver) with `ver UInt64` (spate fills it)".into())
            }
            TableEngine::Collapsing {
                engine,
                sign,
                version,
            } => collapsing(spec, engine, (sign, version), columns, exactly_once)?,
            TableEngine::Other { engine } => {
                return Err(format!("the table's engine is {engine}, which keeps every row: a change stream needs ReplacingMergeTree(ver[, is_deleted]) (or, exactly-once, [Versioned]CollapsingMergeTree) so the table shows the source's current state"))
            }
        };
        if shards > 1 {
            if shard_key.is_empty() {
                return Err(format!("the table has {shards} shards and no --shard-key: every change of a key must land on one shard, so route by (part of) the table's ORDER BY ({})", shape.sorting_key.join(", ")));
            }
            if let Some(k) = shard_key.iter().find(|k| !shape.sorting_key.contains(k)) {
                return Err(format!("--shard-key column `{k}` is not in the table's ORDER BY ({}): every change of a key must land on one shard, so the shard key must be (part of) the sorting key", shape.sorting_key.join(", ")));
            }
        }
        let truncate_by = match spec.on_truncate {
            OnTruncate::DeleteAll => Some(truncate_by(&rows, columns)?),
            _ => None,
        };
        Ok(ChangePlan {
            spec,
            rows,
            truncate_by,
            replicated: shape.replicated,
        })
    }
}

/// The column a truncate deletes by: the version of a replacing table,
/// `_offset` of a collapsing one (which must have it).
fn truncate_by(rows: &ChangeRows, columns: &[Column]) -> Result<String, String> {
    if let ChangeRows::Replace { version, .. } = rows {
        return Ok(version.clone());
    }
    let ok = columns.iter().any(|c| {
        c.name == OFFSET_COLUMN
            && c.default_kind.is_insertable()
            && is_wide_integer(c.ty.strip_low_cardinality())
    });
    match ok {
        true => Ok(OFFSET_COLUMN.to_owned()),
        false => Err(format!("--on-truncate delete-all deletes the rows of the changes before a truncate by the Kafka offset spate fills in each row: a collapsing table needs an `{OFFSET_COLUMN} UInt64` column for it")),
    }
}

fn replacing(
    spec: EnvelopeSpec,
    version: &str,
    is_deleted: Option<String>,
    columns: &[Column],
) -> Result<ChangeRows, String> {
    let column = |name: &str| columns.iter().find(|c| c.name == name);
    let ver = column(version)
        .ok_or_else(|| format!("the version column `{version}` is not a column of the table"))?;
    if !is_wide_integer(ver.ty.strip_low_cardinality()) || !ver.default_kind.is_insertable() {
        return Err(format!(
            "the version column `{version}` is {}: spate fills it with the change's position in the source's log or its Kafka offset, so it must be an insertable UInt64 (or another integer of 64 bits or more)",
            ver.ty
        ));
    }
    let deleted = match is_deleted {
        Some(d) => Some(d),
        None => column(DELETED_COLUMN).map(|c| c.name.clone()),
    };
    if let Some(d) = &deleted {
        let c = column(d)
            .ok_or_else(|| format!("the deleted column `{d}` is not a column of the table"))?;
        let ok = matches!(c.ty, ChType::UInt8 | ChType::Bool) && c.default_kind.is_insertable();
        if !ok {
            return Err(format!("the deleted column `{d}` is {}: spate fills it with 1 for a delete, so it must be an insertable UInt8", c.ty));
        }
    }
    if deleted.is_none() && spec.on_delete == OnDelete::Apply {
        return Err(format!("the table has no way to mark a delete: its engine has no is_deleted column (ReplacingMergeTree(ver, is_deleted), ClickHouse 23.2+) and it has no `{DELETED_COLUMN} UInt8` column (read with FINAL WHERE {DELETED_COLUMN} = 0). Add one, or pass --on-delete skip to keep deleted rows"));
    }
    Ok(ChangeRows::Replace {
        version: version.to_owned(),
        deleted,
    })
}

fn collapsing(
    spec: EnvelopeSpec,
    engine: &str,
    (sign, version): (&Option<String>, &Option<String>),
    columns: &[Column],
    exactly_once: bool,
) -> Result<ChangeRows, String> {
    if spec.kind == EnvelopeKind::Upsert {
        return Err(format!("the table's engine is {engine}, which needs the key's previous row to cancel it, and an upsert topic carries only the new value: use ReplacingMergeTree(ver[, is_deleted])"));
    }
    if !exactly_once {
        return Err(format!("the table's engine is {engine}: an update cancels the key's previous row (sign = -1) and writes the new one (+1), and a cancel row replayed after a restart would cancel once too often. Collapsing targets need --delivery exactly-once (or use ReplacingMergeTree(ver[, is_deleted]))"));
    }
    let column = |name: &str| columns.iter().find(|c| c.name == name);
    let Some(sign) = sign else {
        return Err(format!(
            "the table's engine is {engine} without its sign column"
        ));
    };
    let s = column(sign)
        .ok_or_else(|| format!("the sign column `{sign}` is not a column of the table"))?;
    if s.ty != ChType::Int8 || !s.default_kind.is_insertable() {
        return Err(format!(
            "the sign column `{sign}` is {}: spate fills it with -1 and 1, so it must be an insertable Int8",
            s.ty
        ));
    }
    if let Some(v) = version {
        let c = column(v)
            .ok_or_else(|| format!("the version column `{v}` is not a column of the table"))?;
        if c.default_kind != crate::schema::DefaultKind::None {
            return Err(format!("the version column `{v}` has a default: a VersionedCollapsingMergeTree's version comes from the change's images (the cancel row carries the previous row's), so it must be a plain column of the source table, without DEFAULT"));
        }
    }
    Ok(ChangeRows::Collapse {
        sign: sign.clone(),
        version: version.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{EnvelopeKind, OnTruncate};
    use crate::schema::DefaultKind;
    use crate::types::parse_type;

    fn col(name: &str, ty: &str) -> Column {
        Column {
            name: name.into(),
            ty: parse_type(ty).unwrap(),
            default_kind: DefaultKind::None,
            default_expression: String::new(),
        }
    }

    fn spec(on_delete: OnDelete) -> EnvelopeSpec {
        EnvelopeSpec {
            kind: EnvelopeKind::Debezium,
            on_delete,
            on_truncate: OnTruncate::Fail,
        }
    }

    #[test]
    fn engines_parse_in_both_syntaxes_and_replicated() {
        let s = TableShape::parse(
            "ReplacingMergeTree(ver, is_deleted) ORDER BY id SETTINGS index_granularity = 8192",
        );
        assert_eq!(
            s.engine,
            TableEngine::Replacing {
                version: Some("ver".into()),
                is_deleted: Some("is_deleted".into())
            }
        );
        assert_eq!(s.sorting_key, vec!["id"]);
        let s = TableShape::parse("ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/t', '{replica}', ver) PARTITION BY tuple() ORDER BY (tenant, id) SETTINGS index_granularity = 8192");
        assert_eq!(
            s.engine,
            TableEngine::Replacing {
                version: Some("ver".into()),
                is_deleted: None
            }
        );
        assert_eq!(s.sorting_key, vec!["tenant", "id"]);
        let s = TableShape::parse("ReplacingMergeTree(d, (id, d), 8192, ver)");
        assert_eq!(s.sorting_key, vec!["id", "d"]);
        assert!(
            matches!(s.engine, TableEngine::Replacing { version: Some(ref v), .. } if v == "ver")
        );
        let s = TableShape::parse("ReplacingMergeTree ORDER BY id");
        assert_eq!(
            s.engine,
            TableEngine::Replacing {
                version: None,
                is_deleted: None
            }
        );
        assert!(matches!(
            TableShape::parse("VersionedCollapsingMergeTree(sign, ver) ORDER BY id").engine,
            TableEngine::Collapsing { .. }
        ));
        assert!(
            matches!(TableShape::parse("MergeTree ORDER BY id").engine, TableEngine::Other { ref engine } if engine == "MergeTree")
        );
    }

    #[test]
    fn plans_fill_the_engine_columns_and_refusals_say_why() {
        let cols = vec![
            col("id", "UInt64"),
            col("ver", "UInt64"),
            col("is_deleted", "UInt8"),
        ];
        let modern = TableShape::parse("ReplacingMergeTree(ver, is_deleted) ORDER BY id");
        let p =
            ChangePlan::resolve(spec(OnDelete::Apply), &modern, &cols, (1, &[]), false).unwrap();
        assert_eq!(
            p.rows,
            ChangeRows::Replace {
                version: "ver".into(),
                deleted: Some("is_deleted".into())
            }
        );

        let old = TableShape::parse("ReplacingMergeTree(ver) ORDER BY id");
        let soft = vec![
            col("id", "UInt64"),
            col("ver", "UInt64"),
            col("_deleted", "UInt8"),
        ];
        let p = ChangePlan::resolve(spec(OnDelete::Apply), &old, &soft, (1, &[]), false).unwrap();
        assert_eq!(p.rows.deleted(), Some("_deleted"));

        let bare = vec![col("id", "UInt64"), col("ver", "UInt64")];
        let e =
            ChangePlan::resolve(spec(OnDelete::Apply), &old, &bare, (1, &[]), false).unwrap_err();
        assert!(
            e.contains("no way to mark a delete") && e.contains("--on-delete skip"),
            "{e}"
        );
        let p = ChangePlan::resolve(spec(OnDelete::Skip), &old, &bare, (1, &[]), false).unwrap();
        assert_eq!(p.rows.deleted(), None);

        let small = vec![
            col("id", "UInt64"),
            col("ver", "UInt32"),
            col("_deleted", "UInt8"),
        ];
        let e =
            ChangePlan::resolve(spec(OnDelete::Apply), &old, &small, (1, &[]), false).unwrap_err();
        assert!(e.contains("`ver` is UInt32"), "{e}");

        for (engine, needle) in [
            ("ReplacingMergeTree ORDER BY id", "without a version column"),
            (
                "CollapsingMergeTree(sign) ORDER BY id",
                "need --delivery exactly-once",
            ),
            ("MergeTree ORDER BY id", "keeps every row"),
        ] {
            let e = ChangePlan::resolve(
                spec(OnDelete::Apply),
                &TableShape::parse(engine),
                &cols,
                (1, &[]),
                false,
            )
            .unwrap_err();
            assert!(e.contains(needle), "{engine}: {e}");
        }

        let e = ChangePlan::resolve(spec(OnDelete::Apply), &modern, &cols, (2, &[]), false)
            .unwrap_err();
        assert!(e.contains("2 shards and no --shard-key"), "{e}");
        let e = ChangePlan::resolve(
            spec(OnDelete::Apply),
            &modern,
            &cols,
            (2, &["ver".into()]),
            false,
        )
        .unwrap_err();
        assert!(
            e.contains("`ver` is not in the table's ORDER BY (id)"),
            "{e}"
        );
        ChangePlan::resolve(
            spec(OnDelete::Apply),
            &modern,
            &cols,
            (2, &["id".into()]),
            false,
        )
        .unwrap();
    }

    #[test]
    fn collapsing_tables_take_exactly_once_debezium_streams_only() {
        let cols = vec![
            col("id", "UInt64"),
            col("sign", "Int8"),
            col("ver", "UInt64"),
        ];
        let plain = TableShape::parse("CollapsingMergeTree(sign) ORDER BY id");
        let versioned = TableShape::parse(
            "ReplicatedVersionedCollapsingMergeTree('/t/{shard}', '{replica}', sign, ver) ORDER BY id",
        );
        assert_eq!(
            versioned.engine,
            TableEngine::Collapsing {
                engine: "ReplicatedVersionedCollapsingMergeTree".into(),
                sign: Some("sign".into()),
                version: Some("ver".into())
            }
        );
        let p = ChangePlan::resolve(spec(OnDelete::Apply), &plain, &cols, (1, &[]), true).unwrap();
        assert_eq!(
            p.rows,
            ChangeRows::Collapse {
                sign: "sign".into(),
                version: None
            }
        );
        let p =
            ChangePlan::resolve(spec(OnDelete::Apply), &versioned, &cols, (1, &[]), true).unwrap();
        assert_eq!(
            p.rows,
            ChangeRows::Collapse {
                sign: "sign".into(),
                version: Some("ver".into())
            }
        );
        let old = TableShape::parse("CollapsingMergeTree(d, (id, d), 8192, sign)");
        assert!(
            matches!(old.engine, TableEngine::Collapsing { sign: Some(ref s), .. } if s == "sign")
        );

        let e =
            ChangePlan::resolve(spec(OnDelete::Apply), &plain, &cols, (1, &[]), false).unwrap_err();
        assert!(
            e.contains("cancel once too often") && e.contains("--delivery exactly-once"),
            "{e}"
        );
        let upsert = EnvelopeSpec {
            kind: EnvelopeKind::Upsert,
            ..spec(OnDelete::Apply)
        };
        let e = ChangePlan::resolve(upsert, &plain, &cols, (1, &[]), true).unwrap_err();
        assert!(
            e.contains("an upsert topic carries only the new value"),
            "{e}"
        );
        let wide = vec![col("id", "UInt64"), col("sign", "Int16")];
        let e =
            ChangePlan::resolve(spec(OnDelete::Apply), &plain, &wide, (1, &[]), true).unwrap_err();
        assert!(e.contains("`sign` is Int16"), "{e}");
        let mut defaulted = cols.clone();
        defaulted[2].default_kind = DefaultKind::Default;
        let e = ChangePlan::resolve(
            spec(OnDelete::Apply),
            &versioned,
            &defaulted,
            (1, &[]),
            true,
        )
        .unwrap_err();
        assert!(e.contains("`ver` has a default"), "{e}");
        let e =
            ChangePlan::resolve(spec(OnDelete::Apply), &plain, &cols, (2, &[]), true).unwrap_err();
        assert!(e.contains("2 shards and no --shard-key"), "{e}");
    }

    #[test]
    fn a_truncate_deletes_by_the_column_that_holds_the_offset() {
        let delete_all = EnvelopeSpec {
            on_truncate: OnTruncate::DeleteAll,
            ..spec(OnDelete::Apply)
        };
        let cols = vec![
            col("id", "UInt64"),
            col("ver", "UInt64"),
            col("is_deleted", "UInt8"),
            col("sign", "Int8"),
        ];
        let replacing = TableShape::parse("ReplacingMergeTree(ver, is_deleted) ORDER BY id");
        let p = ChangePlan::resolve(delete_all, &replacing, &cols, (1, &[]), false).unwrap();
        assert_eq!(p.truncate_by.as_deref(), Some("ver"));
        let p =
            ChangePlan::resolve(spec(OnDelete::Apply), &replacing, &cols, (1, &[]), false).unwrap();
        assert_eq!(p.truncate_by, None);
        let collapsing = TableShape::parse("CollapsingMergeTree(sign) ORDER BY id");
        let e = ChangePlan::resolve(delete_all, &collapsing, &cols, (1, &[]), true).unwrap_err();
        assert!(e.contains("needs an `_offset UInt64` column"), "{e}");
        let mut with_offset = cols.clone();
        with_offset.push(col("_offset", "UInt64"));
        let p = ChangePlan::resolve(delete_all, &collapsing, &with_offset, (1, &[]), true).unwrap();
        assert_eq!(p.truncate_by.as_deref(), Some("_offset"));
        assert!(!p.replicated);
        let replicated =
            TableShape::parse("ReplicatedCollapsingMergeTree('/t', 'r', sign) ORDER BY id");
        assert!(replicated.replicated);
    }
}
