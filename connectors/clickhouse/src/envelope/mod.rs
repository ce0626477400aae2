//! Change data capture: messages that are changes of a source table's
//! rows, applied so the target table shows the source's current state.
//!
//! - `debezium`: Debezium change events in JSON (the envelope, with or
//!   without the `schema`/`payload` wrapper, or flattened by
//!   `ExtractNewRecordState`); Avro events through the registry are
//!   transcoded to JSON text first ([`AvroText`]);
//! - `upsert`: a keyed topic of plain values, a tombstone deleting its key;
//! - `target`: what the target table can take, read from its engine at
//!   start ([`ChangePlan`]), and every refusal;
//! - `doc`: the row document a change becomes.
//!
//! A change becomes one row of a `ReplacingMergeTree(ver[, is_deleted])`:
//! the row image (`after`; for a delete, the `before` image or the key),
//! `ver` = the change's version, the deleted column = 1 for a delete,
//! `_op` and `_source_<field>` columns from the event. Into a
//! `[Versioned]CollapsingMergeTree` (exactly-once only) an update becomes
//! two rows, the `before` image with `sign` = -1 (cancelling the row the
//! key's previous change wrote) then the `after` image with +1; a create
//! only the second, a delete only the first ([`Encoded::Rows`]). Each row
//! document is then encoded by the JSON [`RowEncoder`](crate::RowEncoder)
//! like any message, so every column rule of docs/rows.md holds.
//!
//! The version is the change's position in the source's log where the
//! connector has an ordered one (PostgreSQL's lsn, MySQL's binlog file and
//! position: [`debezium::position`]), else its Kafka offset: Debezium keys
//! a table's topic by the primary key, so every change of a key is in one
//! partition, in order. A replayed message has the same version, so a
//! replay does not move the current state (docs/cdc.md).
//!
//! [`ChangeEncoder`] is owned by one driver thread, like every encoder;
//! built per schema version by the sink's `EncoderFactory`.

mod debezium;
mod doc;
mod target;
mod truncate;
mod upsert;

pub(crate) use target::engine_full;
pub use target::{ChangePlan, ChangeRows, TableEngine, TableShape, DELETED_COLUMN, OFFSET_COLUMN};
pub use truncate::Truncator;

use crate::encode::RowError;
use crate::formats::AvroText;
use crate::schema::Column;
use crate::sink::ChRowEncoder;
use debezium::{Op, Shape};
use doc::{json_key, Doc};
use spate_core::record::Message;
use spate_core::sink::{EncodeFailure, Encoded, RowEncode};

/// The shape of a pipeline's messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EnvelopeKind {
    /// Each message is a row (no envelope).
    #[default]
    None,
    /// Debezium change events.
    Debezium,
    /// Keyed values, tombstones deleting their key.
    Upsert,
}

impl EnvelopeKind {
    /// As `--envelope` spells it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            EnvelopeKind::None => "none",
            EnvelopeKind::Debezium => "debezium",
            EnvelopeKind::Upsert => "upsert",
        }
    }
}

/// `--on-delete`: what a delete does to a table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnDelete {
    /// Write the deleted key with the deleted column set to 1; refused at
    /// start when the table has no deleted column.
    #[default]
    Apply,
    /// Leave deleted rows in the table (counted, logged at debug).
    Skip,
}

/// `--on-truncate`: what a Debezium truncate (`op` `t`) does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnTruncate {
    /// Stop, naming topic, partition and offset.
    #[default]
    Fail,
    /// Go on; the rows the source truncated stay in the table.
    Skip,
    /// Delete the rows of every change before it, in order with the
    /// inserts ([`Truncator`]); one-partition topics only.
    DeleteAll,
}

/// What a pipeline asks of its envelope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvelopeSpec {
    /// The envelope.
    pub kind: EnvelopeKind,
    /// Deletes.
    pub on_delete: OnDelete,
    /// Truncates.
    pub on_truncate: OnTruncate,
}

/// The column keys a change fills, as JSON text, for one schema version.
#[derive(Debug)]
struct Filled {
    /// Replacing: the version column.
    version: Option<Vec<u8>>,
    deleted: Option<Vec<u8>>,
    /// Collapsing: the sign column.
    sign: Option<Vec<u8>>,
    /// Whether deletes write anything.
    deletes: bool,
    op: Option<Vec<u8>>,
    /// `(source field, key of its _source_<field> column)`.
    source: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Prefix of the columns filled from a change's source fields.
pub const SOURCE_PREFIX: &str = "_source_";
/// The column filled with a change's operation letter.
pub const OP_COLUMN: &str = "_op";

impl Filled {
    fn new(plan: &ChangePlan, columns: &[Column]) -> Filled {
        let insertable = |c: &&Column| c.default_kind.is_insertable();
        let (version, deleted, sign) = match &plan.rows {
            ChangeRows::Replace { version, deleted } => (
                Some(json_key(version)),
                deleted.as_deref().map(json_key),
                None,
            ),
            ChangeRows::Collapse { sign, .. } => (None, None, Some(json_key(sign))),
        };
        Filled {
            deletes: match &plan.rows {
                ChangeRows::Replace { deleted, .. } => deleted.is_some(),
                ChangeRows::Collapse { .. } => plan.spec.on_delete == OnDelete::Apply,
            },
            version,
            deleted,
            sign,
            op: (columns.iter().filter(insertable))
                .find(|c| c.name == OP_COLUMN)
                .map(|c| json_key(&c.name)),
            source: (columns.iter().filter(insertable))
                .filter_map(|c| {
                    let field = c.name.strip_prefix(SOURCE_PREFIX)?;
                    (!field.is_empty()).then(|| (field.as_bytes().to_vec(), json_key(&c.name)))
                })
                .collect(),
        }
    }
}

/// A change stream's encoder: the envelope read, then the row document
/// encoded by the JSON encoder `inner`.
pub struct ChangeEncoder {
    plan: ChangePlan,
    inner: ChRowEncoder,
    filled: Filled,
    doc: Doc,
    /// `--format avro`: values (and upsert keys) are transcoded to JSON
    /// text first, into these buffers.
    avro: Option<AvroText>,
    value_text: Vec<u8>,
    key_text: Vec<u8>,
    /// `--on-truncate delete-all`: issues a truncate's delete (`None` in
    /// `spate check`, which never acts).
    truncator: Option<std::sync::Arc<Truncator>>,
    /// The version of the change being written (`fill`): its source
    /// position, else its Kafka offset ([`debezium::position`]).
    version: i64,
    /// Where the last message's last row starts in what it appended: a
    /// collapsing change appends two rows, and its shard is the last's.
    last_at: usize,
    /// What the last message was, for `spate check`.
    last: &'static str,
    /// Whether the last message made a row (its document is in `doc`).
    last_row: bool,
}

fn failure(e: RowError) -> EncodeFailure {
    EncodeFailure {
        column: e.column,
        value: Some(e.value),
        reason: e.reason,
    }
}

impl ChangeEncoder {
    /// The encoder of `plan` over `columns`, rows encoded by `inner`;
    /// with `avro`, messages are Confluent-framed Avro (read as JSON text).
    #[must_use]
    pub fn new(
        plan: ChangePlan,
        columns: &[Column],
        inner: ChRowEncoder,
        avro: Option<AvroText>,
    ) -> ChangeEncoder {
        ChangeEncoder {
            filled: Filled::new(&plan, columns),
            plan,
            inner,
            doc: Doc::default(),
            avro,
            value_text: Vec::new(),
            key_text: Vec::new(),
            truncator: None,
            version: 0,
            last_at: 0,
            last: "",
            last_row: false,
        }
    }

    /// The same, acting on truncates through `truncator`.
    #[must_use]
    pub fn with_truncator(mut self, truncator: Option<std::sync::Arc<Truncator>>) -> Self {
        self.truncator = truncator;
        self
    }

    /// What the last message was (`c (create)`, `tombstone`, ...) and
    /// the row document it made, if it made one: for `spate check`.
    #[must_use]
    pub fn last_change(&self) -> (&'static str, Option<&[u8]>) {
        (self.last, self.last_row.then(|| self.doc.text()))
    }

    /// `msg` with its Avro value (and, for upserts, key) as JSON text.
    fn transcoded(
        &mut self,
        msg: &Message<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Encoded, EncodeFailure> {
        let Some(avro) = self.avro.as_mut() else {
            return self.change(msg, out);
        };
        let (mut value, mut key) = (
            std::mem::take(&mut self.value_text),
            std::mem::take(&mut self.key_text),
        );
        let transcoded = (|| {
            if let Some(p) = msg.payload {
                avro.to_json(p, &mut value)?;
            }
            match (self.plan.spec.kind, msg.key) {
                (EnvelopeKind::Upsert, Some(k)) => avro.to_json(k, &mut key),
                _ => Ok(()),
            }
        })();
        let res = match transcoded {
            Ok(()) => {
                let upsert = self.plan.spec.kind == EnvelopeKind::Upsert;
                let text = Message {
                    payload: msg.payload.map(|_| &value[..]),
                    key: if upsert {
                        msg.key.map(|_| &key[..])
                    } else {
                        msg.key
                    },
                    ..*msg
                };
                self.change(&text, out)
            }
            Err(e) => Err(failure(e)),
        };
        self.value_text = value;
        self.key_text = key;
        res
    }

    fn change(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        match self.plan.spec.kind {
            EnvelopeKind::Debezium => self.debezium(msg, out),
            EnvelopeKind::Upsert => self.upsert(msg, out),
            EnvelopeKind::None => self.inner.encode(msg, out),
        }
    }

    /// The columns spate fills beyond the image, after it.
    fn fill(&mut self, op: Op) {
        let deleted = op == Op::Delete;
        if let Some(key) = &self.filled.version {
            self.doc.int_member(key, self.version);
        }
        if let Some(key) = &self.filled.deleted {
            self.doc.int_member(key, i64::from(deleted));
        }
        if let Some(key) = &self.filled.op {
            self.doc.member(key, op.json());
        }
    }

    /// `_source_<field>` from the envelope's `source` block.
    fn fill_source(&mut self, source: &[u8]) {
        if self.filled.source.is_empty() {
            return;
        }
        let (doc, wanted) = (&mut self.doc, &self.filled.source);
        // The block was validated with the whole message.
        let _ = crate::encode::json::scan_document(source, |key, value| {
            if let Some((_, k)) = wanted.iter().find(|(f, _)| f == key.raw) {
                doc.member(k, value);
            }
            Ok::<_, ()>(())
        });
    }

    /// `_source_<field>` from a flattened event's `__source_<field>` or
    /// `__<field>` members.
    fn fill_flattened(&mut self, row: &[u8]) {
        if self.filled.source.is_empty() {
            return;
        }
        let (doc, wanted) = (&mut self.doc, &self.filled.source);
        let _ = crate::encode::json::scan_document(row, |key, value| {
            if let Some(name) = key.raw.strip_prefix(b"__") {
                let field = name.strip_prefix(b"source_").unwrap_or(name);
                if let Some((_, k)) = wanted.iter().find(|(f, _)| f == field) {
                    doc.member(k, value);
                }
            }
            Ok::<_, ()>(())
        });
    }

    fn row(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        self.last_row = true;
        let row = Message {
            payload: Some(self.doc.finish()),
            ..*msg
        };
        self.inner.encode(&row, out)
    }

    fn debezium(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        (self.last, self.last_row) = ("tombstone", false);
        let Some(payload) = msg.payload else {
            return Ok(Encoded::Nothing {
                reason: "tombstone",
            });
        };
        self.last = "not a change";
        let Some(change) = debezium::parse(payload).map_err(failure)? else {
            self.last = "tombstone";
            return Ok(Encoded::Nothing {
                reason: "tombstone",
            });
        };
        self.last = change.op.label();
        match change.op {
            Op::Truncate => {
                return Ok(match self.plan.spec.on_truncate {
                    OnTruncate::Fail => Encoded::Stop {
                        reason: "a Debezium truncate (op \"t\"): with --on-truncate delete-all spate deletes the rows of the changes before it, with --on-truncate skip it goes on and the truncated rows stay",
                    },
                    OnTruncate::Skip => Encoded::Nothing { reason: "truncate" },
                    OnTruncate::DeleteAll => {
                        // The delete compares the rows' versions with its own.
                        self.set_version(msg, &change.shape)?;
                        Encoded::Barrier {
                            reason: "truncate_applied",
                        }
                    }
                });
            }
            Op::Message => return Ok(Encoded::Nothing { reason: "message" }),
            Op::Delete if !self.filled.deletes => return Ok(Encoded::Nothing { reason: "delete" }),
            _ => {}
        }
        if self.filled.sign.is_some() {
            return self.collapse(msg, change, out);
        }
        self.set_version(msg, &change.shape)?;
        let image = match change.shape {
            Shape::Envelope { image, .. } => image.unwrap_or(b"{}"),
            Shape::Flattened(row) => row,
        };
        self.start_doc(change.shape, image, change.op);
        self.row(msg, out)
    }

    /// The version of the change `msg` carries in `shape`, for `fill`: its
    /// source position, else its offset ([`debezium::position`]). Only a
    /// table that has a version column reads the position.
    fn set_version(&mut self, msg: &Message<'_>, shape: &Shape<'_>) -> Result<(), EncodeFailure> {
        self.version = match self.filled.version {
            Some(_) => (debezium::position(shape).map_err(failure)?).unwrap_or(msg.offset),
            None => msg.offset,
        };
        Ok(())
    }

    /// Start the row document of `image` (for a flattened event, the row
    /// itself) with the filled columns and the source fields of `shape`.
    fn start_doc(&mut self, shape: Shape<'_>, image: &[u8], op: Op) {
        self.doc.start();
        match shape {
            Shape::Envelope { source, .. } => {
                self.doc.members_of(image);
                self.fill(op);
                if let Some(source) = source {
                    self.fill_source(source);
                }
            }
            Shape::Flattened(row) => {
                // Validated by the parse.
                let _ = self.doc.members_without_added(row);
                self.fill(op);
                self.fill_flattened(row);
            }
        }
    }

    /// A change into a collapsing table: the cancel row of the key's
    /// previous state (`sign` = -1: the `before` image of an update or a
    /// delete), then the row of its new state (+1: the `after` image of a
    /// read, create or update); both or neither.
    fn collapse(
        &mut self,
        msg: &Message<'_>,
        change: debezium::Change<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Encoded, EncodeFailure> {
        let op = change.op;
        let no_before = |what: &str| {
            failure(RowError::new(
                None,
                "",
                format!("{what}: a collapsing table cancels the key's previous row with the `before` image (PostgreSQL: REPLICA IDENTITY FULL; flattened events carry none: use the envelope)"),
            ))
        };
        let (cancel, state) = match (change.shape, op) {
            (Shape::Envelope { image, before, .. }, Op::Update) => (
                Some(before.ok_or_else(|| no_before("an update without a `before` object"))?),
                image,
            ),
            (Shape::Envelope { image, .. }, Op::Delete) => (image, None),
            (Shape::Envelope { image, .. }, _) => (None, image),
            (Shape::Flattened(_), Op::Update) => {
                return Err(no_before("a flattened update (ExtractNewRecordState)"))
            }
            (Shape::Flattened(row), Op::Delete) => (Some(row), None),
            (Shape::Flattened(row), _) => (None, Some(row)),
        };
        let len = out.len();
        let mut rows = 0;
        let mut hashes = [None, None];
        for (image, sign) in [(cancel, -1), (state, 1)] {
            let Some(image) = image else { continue };
            self.start_doc(change.shape, image, op);
            if let Some(key) = &self.filled.sign {
                self.doc.int_member(key, sign);
            }
            let at = out.len();
            if let Err(e) = self.row(msg, out) {
                out.truncate(len);
                return Err(e);
            }
            // The encoder keeps the shard key's place in the row it wrote
            // last: hash each row right after writing it.
            if self.inner.routes_by_key() {
                hashes[rows] = self.inner.route_hash(&out[at..]);
            }
            self.last_at = at - len;
            rows += 1;
        }
        if rows == 2 && hashes[0] != hashes[1] {
            out.truncate(len);
            return Err(failure(RowError::new(
                None,
                "",
                "the update changes the shard key (--shard-key): its cancel row and its new row belong on different shards. A collapsing table needs a shard key that no update changes (its primary key columns)",
            )));
        }
        Ok(match rows {
            1 => Encoded::Row,
            n => Encoded::Rows(n as u32),
        })
    }

    fn upsert(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        self.last_row = false;
        self.last = match msg.payload {
            Some(_) => "upsert",
            None => "tombstone (delete)",
        };
        let Some(key) = msg.key else {
            return Err(failure(RowError::new(
                None,
                "",
                "an upsert message needs a key (a JSON object of the key columns)",
            )));
        };
        let key = upsert::object(key, "key")
            .map_err(failure)?
            .ok_or_else(|| failure(RowError::new(None, "", "the key's payload is null")))?;
        let value = match msg.payload {
            Some(v) => upsert::object(v, "value").map_err(failure)?,
            None => None,
        };
        let op = if value.is_some() {
            Op::Update
        } else {
            Op::Delete
        };
        if op == Op::Delete && !self.filled.deletes {
            return Ok(Encoded::Nothing { reason: "delete" });
        }
        self.version = msg.offset;
        self.doc.start();
        if let Some(value) = value {
            self.doc.members_of(value);
        }
        // The key's fields last: they are the row's identity.
        self.doc.members_of(key);
        self.fill(op);
        self.row(msg, out)
    }
}

impl RowEncode for ChangeEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        self.last_at = 0;
        self.transcoded(msg, out)
    }

    fn takes_tombstones(&self) -> bool {
        true
    }

    /// A truncate under `--on-truncate delete-all`, every change before it
    /// in: delete their rows.
    fn barrier(&mut self, msg: &Message<'_>) -> Result<(), String> {
        let (Some(truncator), Some(column)) = (&self.truncator, &self.plan.truncate_by) else {
            return Err(
                "a truncate, and this encoder cannot delete (spate check does not act)".into(),
            );
        };
        if msg.partition != 0 {
            return Err(format!("--on-truncate delete-all takes a topic of one partition, and this truncate is in partition {}: partitions were added since the start. spate waits for the rows of the truncate's partition only, and Debezium orders a truncate against no other partition; use --on-truncate skip and truncate the table yourself", msg.partition));
        }
        // The version of a replacing table (the truncate's own, of the
        // same kind as the rows'), a collapsing table's `_offset`.
        let below = match self.plan.rows {
            ChangeRows::Replace { .. } => self.version,
            ChangeRows::Collapse { .. } => msg.offset,
        };
        truncator.delete_below(column, below)
    }

    fn routes_by_key(&self) -> bool {
        self.inner.routes_by_key()
    }

    fn route_hash(&self, row: &[u8]) -> Option<u64> {
        // The rows of one change share their shard (checked in `collapse`).
        self.inner.route_hash(row.get(self.last_at..)?)
    }
}

#[cfg(test)]
mod tests;
