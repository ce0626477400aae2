//! `--format avro`: Avro in the Confluent wire format (magic byte 0, the
//! writer schema's id as 4 bytes big endian, then the Avro binary).
//!
//! - `schema`: writer schemas (JSON text) → [`schema::Schema`];
//! - `plan`: a schema compiled against the table's columns, and the per
//!   message decoder that runs it;
//! - `leaf`: the writers of single values (numbers, times, decimals...);
//! - `read`: Avro binary primitives, skipping and JSON text;
//! - `seek`: one value at a JSON pointer (`{field:...}` routing);
//! - `write`: Avro binary for producers of test and demo data.
//!
//! One [`AvroEncoder`] per driver thread: it keeps the plans it compiled,
//! one per schema id, and asks the pipeline's shared
//! [`SchemaRegistry`](super::SchemaRegistry) for ids it has not seen (the
//! registry caches them process-wide). An id the registry cannot be asked
//! about right now holds the driver until it can (see the registry).

mod leaf;
mod plan;
mod read;
mod schema;
mod seek;
mod write;

pub use schema::AvroSchemaError;
pub(crate) use seek::Seek;
pub use write::AvroWrite;

use super::registry::{SchemaRegistry, SchemaType};
use super::row::{payload, RowLayout, RowSlots};
use crate::encode::RowError;
use plan::{compile, Plan, Scratch};
use read::Reader;
use schema::Schema;
use spate_core::record::Message;
use std::collections::HashMap;
use std::sync::Arc;

/// The first byte of every Confluent-framed message.
pub const MAGIC: u8 = 0;

/// Decodes Confluent-framed Avro messages into rows.
#[derive(Debug)]
pub struct AvroEncoder {
    layout: RowLayout,
    slots: RowSlots,
    registry: Arc<SchemaRegistry>,
    /// Per schema id: its plan, or why it has none.
    plans: HashMap<u32, Result<Plan, String>>,
    scratch: Scratch,
}

/// The schema id of a Confluent-framed message, and where its body starts.
pub(crate) fn framing(b: &[u8]) -> Result<(u32, usize), RowError> {
    let head: String = b.iter().take(8).map(|c| format!("{c:02x}")).collect();
    match b {
        [MAGIC, a, b2, c, d, ..] => Ok((u32::from_be_bytes([*a, *b2, *c, *d]), 5)),
        [MAGIC, ..] => Err(RowError::new(
            None,
            &head,
            "shorter than the Confluent wire format header (5 bytes)",
        )),
        [m, ..] => Err(RowError::new(
            None,
            &head,
            format!("not the Confluent wire format: magic byte {m:#04x}, expected 0x00"),
        )),
        [] => Err(RowError::new(
            None,
            "",
            "an empty message, expected the Confluent wire format",
        )),
    }
}

impl AvroEncoder {
    pub(crate) fn new(layout: RowLayout, registry: Arc<SchemaRegistry>) -> Self {
        AvroEncoder {
            slots: RowSlots::new(&layout),
            layout,
            registry,
            plans: HashMap::new(),
            scratch: Scratch::default(),
        }
    }

    /// Append one row for `msg` to `out` (unchanged on error).
    pub fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), RowError> {
        let b = payload(msg)?;
        let (id, body) = framing(b)?;
        if !self.plans.contains_key(&id) {
            let plan = self.compile(id)?;
            self.plans.insert(id, plan);
        }
        let plan = match self.plans.get(&id) {
            Some(Ok(plan)) => plan,
            Some(Err(reason)) => return Err(RowError::new(None, &id.to_string(), reason.clone())),
            None => return Err(RowError::new(None, &id.to_string(), "internal: no plan")),
        };
        self.slots.clear();
        let mut r = Reader { b, pos: body };
        plan.decode(&mut r, &mut self.slots, &self.layout, &mut self.scratch)
            .map_err(|(col, f)| {
                let name = col.map(|c| self.layout.cols[c].name.as_str());
                let reason = match name {
                    Some(n) => format!("Avro field `{n}` (schema id {id}): {}", f.reason),
                    None => format!("{} (schema id {id}, at byte {})", f.reason, r.pos),
                };
                RowError::new(name, &f.value, reason)
            })?;
        read_whole(b, r.pos, id)?;
        self.slots.finish(&self.layout, msg, out)
    }

    /// Fetch (waiting out registry outages), parse and compile schema `id`.
    /// `Ok(Err(..))` is a permanent answer worth remembering; `Err` is not
    /// remembered (an id missing now may be registered later).
    fn compile(&self, id: u32) -> Result<Result<Plan, String>, RowError> {
        let plan = writer_schema(&self.registry, id)?
            .and_then(|s| compile(&s, &self.layout).map_err(|e| format!("schema id {id}: {e}")));
        if let Err(e) = &plan {
            tracing::warn!(schema_id = id, error = %e, "Avro writer schema unusable; its messages are bad messages");
        }
        Ok(plan)
    }

    /// Whether rows are routed by a shard key.
    pub fn has_shard_key(&self) -> bool {
        self.layout.has_shard_key()
    }

    /// The shard key hash of the row the last `encode` appended.
    pub fn key_hash(&self, row: &[u8]) -> Option<u64> {
        self.slots.key_hash(&self.layout, row)
    }
}

/// Confluent-framed Avro as JSON text, for readers of a message's whole
/// structure (the change envelopes of `crate::envelope`): the writer
/// schema's value, unions unwrapped, as [`read::to_json`] writes it. One
/// per driver thread; the schemas it parsed are kept per id.
#[derive(Debug)]
pub struct AvroText {
    schemas: WriterSchemas,
}

impl AvroText {
    /// A transcoder reading writer schemas from `registry`.
    #[must_use]
    pub fn new(registry: Arc<SchemaRegistry>) -> Self {
        AvroText {
            schemas: WriterSchemas::new(registry),
        }
    }

    /// Write the Avro message `b` as JSON text into `out` (cleared first).
    pub fn to_json(&mut self, b: &[u8], out: &mut Vec<u8>) -> Result<(), RowError> {
        out.clear();
        let (id, body) = framing(b)?;
        let schema = self.schemas.get(id)?;
        let mut r = Reader { b, pos: body };
        read::to_json(&schema.top, &schema.named, &mut r, out, 0).map_err(|f| {
            let reason = format!("{} (schema id {id}, at byte {})", f.reason, r.pos);
            RowError::new(None, &f.value, reason)
        })?;
        read_whole(b, r.pos, id)
    }
}

/// Writer schemas, each fetched and parsed once, for the walks that need
/// no plan ([`AvroText`], [`Seek`]).
#[derive(Debug)]
pub(crate) struct WriterSchemas {
    registry: Arc<SchemaRegistry>,
    /// Per id: the schema, or why it is unusable.
    parsed: HashMap<u32, Result<Schema, String>>,
}

impl WriterSchemas {
    pub(crate) fn new(registry: Arc<SchemaRegistry>) -> Self {
        WriterSchemas {
            registry,
            parsed: HashMap::new(),
        }
    }

    /// Schema `id` (fetched the first time, waiting out registry outages).
    pub(crate) fn get(&mut self, id: u32) -> Result<&Schema, RowError> {
        if !self.parsed.contains_key(&id) {
            let schema = writer_schema(&self.registry, id)?;
            self.parsed.insert(id, schema);
        }
        match self.parsed.get(&id) {
            Some(Ok(s)) => Ok(s),
            Some(Err(reason)) => Err(RowError::new(None, &id.to_string(), reason.clone())),
            None => Err(RowError::new(None, &id.to_string(), "internal: no schema")),
        }
    }
}

/// Writer schema `id`, fetched (waiting out registry outages) and parsed.
/// `Ok(Err(..))` is a permanent answer worth remembering; `Err` is not
/// remembered (an id missing now may be registered later).
fn writer_schema(registry: &SchemaRegistry, id: u32) -> Result<Result<Schema, String>, RowError> {
    let fetched = (registry.schema_waiting(id)).map_err(|e| e.for_message(id))?;
    Ok(match fetched.schema_type {
        SchemaType::Avro => {
            Schema::parse(&fetched.schema).map_err(|e| format!("schema id {id}: {e}"))
        }
        other => Err(format!("schema id {id} is a {other:?} schema, not Avro")),
    })
}

/// The message `b` of schema `id` was read to `pos`: nothing may follow.
fn read_whole(b: &[u8], pos: usize, id: u32) -> Result<(), RowError> {
    if pos == b.len() {
        return Ok(());
    }
    let reason = format!(
        "{} bytes after the Avro record (schema id {id})",
        b.len() - pos
    );
    Err(RowError::new(None, "", reason))
}

#[cfg(test)]
pub(crate) mod tests;
