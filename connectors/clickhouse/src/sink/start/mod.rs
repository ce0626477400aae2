//! What a sink starts from: what the user asks for ([`spec`]), why it
//! could not start ([`error`]), the shards and replicas ([`topology`]),
//! the one topology resolver shared by `run` and `check` ([`discover`]),
//! the encoder factory and wire plan of a schema ([`encoder`]), and a
//! change stream's plan from the table's engine ([`change`]).

pub(crate) mod change;
pub(crate) mod create;
pub(crate) mod discover;
pub(crate) mod encoder;
pub(crate) mod error;
pub(crate) mod spec;
pub(crate) mod topology;
