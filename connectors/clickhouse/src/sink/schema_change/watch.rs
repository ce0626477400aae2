//! The schema re-read: every [`SCHEMA_REFRESH`] (and at once when a
//! worker asks, [`LiveSchema::refresh_now`]) one tokio task per sink reads
//! every replica's columns, applies a change every replica agrees on as a
//! new version, and reports the rest (replicas that disagree, a change
//! spate cannot encode) for `/readyz`.

use super::version::{LiveSchema, SCHEMA_REFRESH};
use crate::client::ChClient;
use crate::schema::Column;
use crate::sink::insert::shard::Shard;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

/// What changed between two column lists, for the log line.
fn describe_change(old: &[Column], new: &[Column]) -> String {
    let mut parts = Vec::new();
    for c in new {
        match old.iter().find(|o| o.name == c.name) {
            None => parts.push(format!("added `{}` {}", c.name, c.ty)),
            Some(o) if o.ty != c.ty => parts.push(format!("`{}` {} -> {}", c.name, o.ty, c.ty)),
            Some(o)
                if o.default_kind != c.default_kind
                    || o.default_expression != c.default_expression =>
            {
                parts.push(format!(
                    "`{}` default now {:?} {}",
                    c.name, c.default_kind, c.default_expression
                ));
            }
            Some(_) => {}
        }
    }
    for o in old.iter().filter(|o| !new.iter().any(|c| c.name == o.name)) {
        parts.push(format!("dropped `{}`", o.name));
    }
    if parts.is_empty() {
        "column order".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Re-read every replica's columns every [`SCHEMA_REFRESH`] (and when a
/// worker asks), apply a change every replica agrees on, report the rest.
pub(crate) fn spawn_watch(
    live: &Arc<LiveSchema>,
    shards: Arc<[Arc<Shard<ChClient>>]>,
    db: String,
    table: String,
    io: &tokio::runtime::Handle,
) {
    live.watched.store(true, Ordering::Release);
    let task = io.spawn(watch(live.clone(), shards, db, table));
    *live.watcher.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
}

async fn watch(
    live: Arc<LiveSchema>,
    shards: Arc<[Arc<Shard<ChClient>>]>,
    db: String,
    table: String,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(SCHEMA_REFRESH) => {}
            () = live.poke.notified() => {}
        }
        refresh_once(&live, &shards, &db, &table).await;
        live.rounds.send_modify(|r| *r += 1);
    }
}

async fn refresh_once(live: &LiveSchema, shards: &[Arc<Shard<ChClient>>], db: &str, table: &str) {
    let mut set = tokio::task::JoinSet::new();
    for shard in shards {
        for replica in &shard.replicas {
            let (client, url, label) = (
                replica.client.clone(),
                replica.url.clone(),
                shard.label.clone(),
            );
            let (db, table) = (db.to_owned(), table.to_owned());
            set.spawn(async move { (label, url, client.describe(&db, &table).await) });
        }
    }
    let mut answers: Vec<(String, String, Vec<Column>)> = Vec::new();
    while let Some(joined) = set.join_next().await {
        // An unreachable replica is the probe's business, not a change.
        if let Ok((label, url, Ok(columns))) = joined {
            answers.push((label, url, columns));
        }
    }
    answers.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let Some((_, first_url, reference)) = answers.first() else {
        return;
    };
    let disagree: Vec<String> = (answers.iter())
        .filter(|(_, _, c)| c != reference)
        .map(|(label, url, _)| format!("shard {label} ({url})"))
        .collect();
    if !disagree.is_empty() {
        let msg = format!(
            "table {}.{} has other columns on {} than on {first_url}; every replica must have the same columns (the previous columns stay in use)",
            db,
            table,
            disagree.join(", ")
        );
        // Logged when it starts or changes, not at every re-read.
        if live.problem().as_deref() != Some(msg.as_str()) {
            tracing::warn!(table = %live.table, problem = %msg, "replicas disagree on the table's columns");
        }
        live.set_problem(Some(msg), false);
        return;
    }
    let current = live.current();
    if *reference == current.columns {
        live.set_problem(None, false);
        return;
    }
    let change = describe_change(&current.columns, reference);
    match live.apply(reference.clone()) {
        Ok(v) => {
            live.set_problem(None, false);
            live.changes.with_label_values(&[&live.table]).inc();
            tracing::info!(
                table = %live.table,
                version = v.id,
                change = %change,
                columns = v.query.columns.len(),
                format = v.query.format,
                "table schema changed; applied"
            );
        }
        Err(e) => {
            tracing::error!(table = %live.table, change = %change, error = %e, "table schema changed; cannot apply");
            live.set_problem(Some(e), true);
        }
    }
}
