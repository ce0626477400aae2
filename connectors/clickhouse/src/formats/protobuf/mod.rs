//! `--format protobuf`: Protobuf messages, either in the Confluent wire
//! format (magic byte 0, the schema id as 4 bytes big endian, the message
//! indexes as zig-zag varints, then the message) with the `.proto` text
//! fetched from the registry and compiled at run time (protox), or plain
//! messages of one type from a `FileDescriptorSet` file
//! (`--protobuf-descriptor FILE --protobuf-message NAME`).
//!
//! Descriptors come from prost-reflect; the wire decoding is `plan`'s. One
//! [`ProtobufEncoder`] per driver thread, with its plans per (schema id,
//! message indexes).

mod plan;
mod seek;

pub(crate) use seek::Seek;

use super::registry::{SchemaRegistry, SchemaType};
use super::row::{payload, RowLayout, RowSlots};
use crate::encode::RowError;
use plan::{compile, Lists, MsgPlan};
use prost_reflect::{DescriptorPool, MessageDescriptor};
use spate_core::record::Message;
use std::collections::HashMap;
use std::sync::Arc;

/// Where the message types come from.
#[derive(Clone, Debug)]
pub enum ProtobufSource {
    /// Confluent-framed messages; schemas from this registry.
    Registry(Arc<SchemaRegistry>),
    /// Plain messages of one type.
    Descriptor {
        /// The type, from a `FileDescriptorSet`.
        message: MessageDescriptor,
    },
}

impl ProtobufSource {
    /// Message `name` of the serialized `FileDescriptorSet` `set`.
    pub fn from_descriptor_set(set: &[u8], name: &str) -> Result<Self, String> {
        let pool =
            DescriptorPool::decode(set).map_err(|e| format!("not a FileDescriptorSet: {e}"))?;
        let message = pool
            .get_message_by_name(name.trim_start_matches('.'))
            .ok_or_else(|| format!("the descriptor set has no message {name}"))?;
        Ok(ProtobufSource::Descriptor { message })
    }
}

/// Compile `.proto` source text (imports: the well-known types only) into
/// a serialized `FileDescriptorSet` (for `--protobuf-descriptor` files and
/// tests).
pub fn compile_proto(name: &str, source: &str) -> Result<Vec<u8>, String> {
    Ok(compile_pool(name, source)?.encode_to_vec())
}

fn compile_pool(name: &str, source: &str) -> Result<DescriptorPool, String> {
    struct One(String, String);
    impl protox::file::FileResolver for One {
        fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
            if name == self.0 {
                protox::file::File::from_source(name, &self.1)
            } else {
                Err(protox::Error::file_not_found(name))
            }
        }
    }
    let mut chain = protox::file::ChainFileResolver::new();
    chain.add(One(name.to_owned(), source.to_owned()));
    chain.add(protox::file::GoogleFileResolver::new());
    let mut c = protox::Compiler::with_file_resolver(chain);
    c.include_imports(true);
    c.open_file(name).map_err(|e| e.to_string())?;
    Ok(c.descriptor_pool())
}

/// A compiled message and its number of list slots, or why there is none.
type Compiled = Result<(MsgPlan, usize), String>;

/// Decodes Protobuf messages into rows.
pub struct ProtobufEncoder {
    layout: RowLayout,
    slots: RowSlots,
    source: ProtobufSource,
    plans: ByType<(MsgPlan, usize)>,
    fixed: Option<(MsgPlan, usize)>,
    lists: Lists,
}

impl std::fmt::Debug for ProtobufEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtobufEncoder")
            .field("plans", &self.plans.compiled.len())
            .finish_non_exhaustive()
    }
}

fn zigzag(b: &[u8], pos: &mut usize) -> Option<i64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let c = *b.get(*pos)?;
        *pos += 1;
        n |= u64::from(c & 0x7f) << shift;
        if c & 0x80 == 0 {
            return Some((n >> 1) as i64 ^ -((n & 1) as i64));
        }
    }
    None
}

impl ProtobufEncoder {
    pub(crate) fn new(layout: RowLayout, source: ProtobufSource) -> Self {
        let fixed = match &source {
            ProtobufSource::Descriptor { message } => Some(compile(message, &layout)),
            ProtobufSource::Registry(_) => None,
        };
        ProtobufEncoder {
            slots: RowSlots::new(&layout),
            layout,
            source,
            plans: ByType::new(),
            fixed,
            lists: Lists::new(0),
        }
    }

    /// Append one row for `msg` to `out` (unchanged on error).
    pub fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), RowError> {
        let b = payload(msg)?;
        let ((plan, lists), body) = match (&self.fixed, &self.source) {
            (Some(fixed), _) => (fixed, 0),
            (None, ProtobufSource::Registry(registry)) => {
                let layout = &self.layout;
                let (plan, _, at) =
                    (self.plans).get(b, |id, indexes| plan_of(registry, layout, id, indexes))?;
                (plan, at)
            }
            (None, ProtobufSource::Descriptor { .. }) => {
                return Err(RowError::new(None, "", "internal: no Protobuf plan"));
            }
        };
        let lists = *lists;
        if self.lists.items_len() != lists {
            self.lists = Lists::new(lists);
        }
        self.slots.clear();
        self.lists.clear();
        plan.decode_message(&b[body..], &mut self.slots, &mut self.lists)
            .map_err(|(col, f)| {
                let name = col.map(|c| self.layout.cols[c].name.as_str());
                let reason = match name {
                    Some(n) => format!("Protobuf field `{n}`: {}", f.reason),
                    None => f.reason,
                };
                RowError::new(name, &f.value, reason)
            })?;
        self.slots.finish(&self.layout, msg, out)
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

/// The plan of schema `id`'s message at `indexes` over `layout`, or why
/// there is none (logged: its messages are bad messages).
fn plan_of(
    registry: &SchemaRegistry,
    layout: &RowLayout,
    id: u32,
    indexes: &[i64],
) -> Result<Compiled, RowError> {
    let plan = descriptor(registry, id, indexes)?.map(|m| compile(&m, layout));
    if let Err(e) = &plan {
        tracing::warn!(schema_id = id, error = %e, "Protobuf schema unusable; its messages are bad messages");
    }
    Ok(plan)
}

/// What was compiled per message type of Confluent-framed messages (per
/// schema id and message indexes), or why nothing could be: at most
/// [`MAX_TYPES`], so a producer sending ever new indexes cannot grow it.
pub(crate) struct ByType<T> {
    compiled: HashMap<(u32, Vec<i64>), Result<T, String>>,
    /// The last message's indexes (their buffer, reused).
    indexes: Vec<i64>,
}

impl<T> ByType<T> {
    pub(crate) fn new() -> Self {
        ByType {
            compiled: HashMap::new(),
            indexes: Vec::new(),
        }
    }

    /// The entry of framed message `b`'s type (made by `compile` the
    /// first time; an `Err` of it is not kept), its schema id, and where
    /// the message starts in `b`.
    pub(crate) fn get(
        &mut self,
        b: &[u8],
        compile: impl FnOnce(u32, &[i64]) -> Result<Result<T, String>, RowError>,
    ) -> Result<(&T, u32, usize), RowError> {
        let (id, at) = super::avro::framing(b)?;
        let at = message_indexes(b, at, &mut self.indexes)?;
        let key = (id, std::mem::take(&mut self.indexes));
        if !self.compiled.contains_key(&key) {
            if self.compiled.len() >= MAX_TYPES {
                self.compiled.clear();
            }
            let entry = compile(id, &key.1)?;
            self.compiled.insert(key.clone(), entry);
        }
        self.indexes = key.1.clone();
        match &self.compiled[&key] {
            Ok(t) => Ok((t, id, at)),
            Err(reason) => Err(RowError::new(None, &id.to_string(), reason.clone())),
        }
    }
}

/// Most message indexes a Confluent header may hold (nesting depth).
const MAX_INDEXES: i64 = 64;

/// Most (schema id, message indexes) a driver keeps compiled ([`ByType`]).
const MAX_TYPES: usize = 1024;

/// Read the message indexes after the Confluent header (at `at`) into
/// `indexes`; where the message starts.
fn message_indexes(b: &[u8], mut at: usize, indexes: &mut Vec<i64>) -> Result<usize, RowError> {
    let bad = || RowError::new(None, "", "bad message indexes after the Confluent header");
    let n = zigzag(b, &mut at).ok_or_else(bad)?;
    // A count past the nesting any schema has, or below 0, is not a
    // Confluent header (and an empty list would name no message).
    if !(0..=MAX_INDEXES).contains(&n) {
        return Err(RowError::new(
            None,
            &n.to_string(),
            format!("{n} message indexes after the Confluent header (0 to {MAX_INDEXES})"),
        ));
    }
    indexes.clear();
    if n == 0 {
        indexes.push(0);
    }
    for _ in 0..n {
        indexes.push(zigzag(b, &mut at).ok_or_else(bad)?);
    }
    Ok(at)
}

/// The message type of schema `id` at `indexes`, fetched (waiting out
/// registry outages) and compiled. `Ok(Err(..))` is a permanent answer
/// worth remembering; `Err` is not remembered.
fn descriptor(
    registry: &SchemaRegistry,
    id: u32,
    indexes: &[i64],
) -> Result<Result<MessageDescriptor, String>, RowError> {
    let fetched = (registry.schema_waiting(id)).map_err(|e| e.for_message(id))?;
    if fetched.schema_type != SchemaType::Protobuf {
        return Ok(Err(format!(
            "schema id {id} is a {:?} schema, not Protobuf",
            fetched.schema_type
        )));
    }
    let name = format!("schema-{id}.proto");
    Ok(compile_pool(&name, &fetched.schema)
        .map_err(|e| format!("schema id {id}: {e}"))
        .and_then(|pool| {
            let file = pool
                .get_file_by_name(&name)
                .ok_or("the compiled schema has no file")?;
            let (&first, nested) = indexes.split_first().ok_or("no message indexes")?;
            let mut m = usize::try_from(first)
                .ok()
                .and_then(|i| file.messages().nth(i));
            for &i in nested {
                m = m.and_then(|m| {
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| m.child_messages().nth(i))
                });
            }
            m.ok_or_else(|| format!("schema id {id} has no message at indexes {indexes:?}"))
        }))
}

#[cfg(test)]
pub(crate) mod tests;
