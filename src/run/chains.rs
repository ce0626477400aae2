//! The per-driver chains of `spate run`: the factory the runtime calls
//! once on each driver thread to build that thread's encoding chain, one
//! [`EncodeChain`] per pipeline (its own encoder, batch limits and shard
//! slots), put behind [`TopicChains`] when the process runs several
//! pipelines so each message goes to its topic's chain.
//!
//! The factory is built on the main thread and called on the driver
//! threads; the chains it builds send sealed batches into the shard
//! queues of the routes they were built from.

use super::sinks::Route;
use spate_core::pipeline::{
    BuildError, Chain, ChainCtx, ChainFactory, EncodeChain, SinkOptions, TopicChains,
};

/// The chain factory over every pipeline's route (in pipeline order).
pub(super) fn factory(routes: Vec<Route>) -> ChainFactory {
    Box::new(move |ctx: ChainCtx| {
        let mut chains = Vec::with_capacity(routes.len());
        for route in &routes {
            let encoder = route.encoders.build().map_err(|e| BuildError::Chain {
                thread: ctx.thread,
                reason: e.to_string(),
            })?;
            let ctx = ChainCtx {
                options: SinkOptions {
                    limits: route.limits,
                },
                ..ctx.clone()
            };
            let mut chain = EncodeChain::with_slots(encoder, &ctx, route.slots.clone())
                .with_rejections(route.rejections.clone());
            if let Some(plans) = &route.plans {
                chain = chain.exactly_once(plans.clone());
            }
            chains.push(Box::new(chain) as Box<dyn Chain>);
        }
        if chains.len() == 1 {
            return Ok(chains.remove(0));
        }
        let topics: Vec<Vec<String>> = routes.iter().map(|r| r.topics.clone()).collect();
        Ok(Box::new(TopicChains::new(chains, &topics)) as Box<dyn Chain>)
    })
}
