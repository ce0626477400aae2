//! The per-driver chains of `spate run`: the factory the runtime calls
//! once on each driver thread to build that thread's encoding chain, one
//! [`EncodeChain`] per pipeline (its own encoder, batch limits and shard
//! slots), put behind [`TopicChains`] when the process runs several
//! pipelines so each message goes to its topic's chain.
//!
//! Topics a route reads whose table cannot be written get a chain of
//! their own over the route's shards, whose every message is a bad
//! message ([`Refuse`]).
//!
//! The tables of a pipeline whose messages name their table (a header or
//! a field) share one chain, over all their shards, with the router that
//! picks each message's table (`crate::routing::message`).
//!
//! The factory is built on the main thread and called on the driver
//! threads; the chains it builds send sealed batches into the shard
//! queues of the routes they were built from.

use super::sinks::Route;
use crate::routing::message::MessageRouter;
use spate_core::pipeline::{
    BuildError, Chain, ChainCtx, ChainFactory, EncodeChain, SinkOptions, TopicChains,
};
use spate_core::record::Message;
use spate_core::sink::{EncodeFailure, Encoded, RowEncode};
use std::collections::HashMap;
use std::sync::Arc;

/// The chain factory over every pipeline's route (in pipeline order).
pub(super) fn factory(routes: Vec<Route>) -> ChainFactory {
    Box::new(move |ctx: ChainCtx| {
        let mut chains = Vec::with_capacity(routes.len());
        let mut topics: Vec<Vec<String>> = Vec::with_capacity(routes.len());
        let build = |route: &Route| {
            route.encoders.build().map_err(|e| BuildError::Chain {
                thread: ctx.thread,
                reason: e.to_string(),
            })
        };
        let mut i = 0;
        while i < routes.len() {
            let route = &routes[i];
            let ctx = ChainCtx {
                options: SinkOptions {
                    limits: route.limits,
                },
                ..ctx.clone()
            };
            if let Some(spec) = &route.router {
                // This route and the next ones of the same router: one
                // chain over their tables.
                let mut tables = Vec::new();
                while let Some(r) = routes.get(i) {
                    if !r.router.as_ref().is_some_and(|s| Arc::ptr_eq(s, spec)) {
                        break;
                    }
                    tables.push((build(r)?, r.slots.clone()));
                    i += 1;
                }
                let router = Box::new(MessageRouter::new(spec.clone(), route.encoders.format()));
                let chain =
                    EncodeChain::routed(tables, &ctx, router, route.refused_rejections.clone())
                        .with_rejections(route.rejections.clone());
                chains.push(Box::new(chain) as Box<dyn Chain>);
                topics.push(route.topics.clone());
                continue;
            }
            i += 1;
            let encoder = build(route)?;
            let mut chain = EncodeChain::with_slots(encoder, &ctx, route.slots.clone())
                .with_rejections(route.rejections.clone());
            if let Some(plans) = &route.plans {
                chain = chain.exactly_once(plans.clone());
            }
            chains.push(Box::new(chain) as Box<dyn Chain>);
            topics.push(route.topics.clone());
            if !route.refused.is_empty() {
                // Their offsets are covered in the route's first shard as
                // its own bad messages are.
                let refuse = Refuse(route.refused.clone());
                let chain = EncodeChain::with_slots(refuse, &ctx, route.slots.clone())
                    .with_rejections(route.refused_rejections.clone());
                chains.push(Box::new(chain) as Box<dyn Chain>);
                topics.push(route.refused.keys().cloned().collect());
            }
        }
        if chains.len() == 1 {
            return Ok(chains.remove(0));
        }
        Ok(Box::new(TopicChains::new(chains, &topics)) as Box<dyn Chain>)
    })
}

/// The encoder of topics whose table cannot be written
/// (`crate::routing::Refused`): every message of theirs is a bad message,
/// for the route's error policy, with the reason the topic has.
struct Refuse(Arc<HashMap<String, String>>);

impl RowEncode for Refuse {
    fn encode(&mut self, msg: &Message<'_>, _out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        Err(EncodeFailure {
            column: None,
            value: None,
            reason: (self.0.get(msg.topic).cloned())
                .unwrap_or_else(|| format!("topic {} has no table", msg.topic)),
        })
    }

    // A tombstone has no table either: the same bad message.
    fn takes_tombstones(&self) -> bool {
        true
    }
}
