//! What a spate member's JSON log (`--log-format json`) says about its
//! consumer-group membership: the partitions assigned to it (with the
//! generation of the assignment), revoked from it or lost by it, as
//! `connectors/kafka/src/rebalance.rs` logs them. Used by the tests that
//! run several members (the rebalance storm, the rolling restart).

use super::env::wait_for;
use super::process::Running;
use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::time::Duration;

/// One membership line of a member's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    /// "partition assigned": one partition, and the group generation
    /// librdkafka joined with for this assignment (if it had one).
    Assigned {
        partition: i32,
        generation: Option<u64>,
    },
    /// "partitions revoked": the group took these away in a rebalance.
    Revoked(Vec<i32>),
    /// "assignment lost ...": taken away without a revocation (session
    /// timeout, fenced).
    Lost(Vec<i32>),
}

/// The partition number of `topic/3`.
fn partition_number(s: &str) -> Option<i32> {
    s.rsplit('/').next().and_then(|n| n.trim().parse().ok())
}

/// The partition numbers of a `[topic/0, topic/3]` list.
fn partition_list(s: &str) -> Vec<i32> {
    s.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter_map(partition_number)
        .collect()
}

/// The digits of `Some(7)` (a `?generation` field).
fn generation_number(s: &str) -> Option<u64> {
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The membership events of `stderr`, in log order; other lines (and any
/// that are not JSON) are skipped.
pub fn group_events(stderr: &str) -> Vec<GroupEvent> {
    stderr.lines().filter_map(group_event).collect()
}

fn group_event(line: &str) -> Option<GroupEvent> {
    let v = serde_json::from_str::<serde_json::Value>(line).ok()?;
    let fields = &v["fields"];
    let list = || partition_list(fields["partitions"].as_str().unwrap_or(""));
    match fields["message"].as_str()? {
        "partition assigned" => Some(GroupEvent::Assigned {
            partition: fields["partition"].as_str().and_then(partition_number)?,
            generation: fields["generation"].as_str().and_then(generation_number),
        }),
        "partitions revoked" => Some(GroupEvent::Revoked(list())),
        m if m.starts_with("assignment lost") => Some(GroupEvent::Lost(list())),
        _ => None,
    }
}

/// Partitions a member owns according to its JSON log: assigned minus
/// revoked or lost, in log order.
pub fn owned_partitions(stderr: &str) -> BTreeSet<i32> {
    let mut owned = BTreeSet::new();
    for event in group_events(stderr) {
        match event {
            GroupEvent::Assigned { partition, .. } => {
                owned.insert(partition);
            }
            GroupEvent::Revoked(ps) | GroupEvent::Lost(ps) => {
                for p in ps {
                    owned.remove(&p);
                }
            }
        }
    }
    owned
}

/// Each member's owned partitions, or why the group is not settled: every
/// member owns partitions, none twice, all `partitions` between them.
pub fn settled<R: Borrow<Running>>(
    members: &[R],
    partitions: i32,
) -> Result<Vec<BTreeSet<i32>>, String> {
    let owned: Vec<BTreeSet<i32>> = members
        .iter()
        .map(|m| owned_partitions(&m.borrow().stderr_so_far()))
        .collect();
    let all: BTreeSet<i32> = owned.iter().flatten().copied().collect();
    let total: usize = owned.iter().map(BTreeSet::len).sum();
    if owned.iter().all(|o| !o.is_empty())
        && all.len() == partitions as usize
        && total == partitions as usize
    {
        Ok(owned)
    } else {
        Err(format!("members own {owned:?}"))
    }
}

/// Wait (at most `within`) until the group is settled: the same full
/// assignment (see [`settled`]) seen twice, a second apart.
pub fn wait_settled<R: Borrow<Running>>(
    members: &[R],
    partitions: i32,
    within: Duration,
    what: &str,
) -> Vec<BTreeSet<i32>> {
    let mut last: Option<Vec<BTreeSet<i32>>> = None;
    wait_for(what, within, Duration::from_secs(1), || {
        let now = settled(members, partitions);
        let stable = matches!((&now, &last), (Ok(a), Some(b)) if a == b);
        last = now.clone().ok();
        match now {
            Ok(o) if stable => Ok(o),
            Ok(o) => Err(format!("members own {o:?}, not yet stable")),
            Err(e) => Err(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_lines_rebalance_rs_writes() {
        let log = concat!(
            r#"{"fields":{"message":"partition assigned","partition":"t/3","lane":"L1","generation":"Some(7)"}}"#,
            "\n",
            r#"{"fields":{"message":"partition assigned","partition":"t/5","lane":"L2","generation":"None"}}"#,
            "\n",
            "not json\n",
            r#"{"fields":{"message":"partitions revoked","partitions":"[t/3, t/4]"}}"#,
            "\n",
            r#"{"fields":{"message":"assignment lost; nothing is committed for these partitions","partitions":"[t/5]"}}"#,
            "\n",
        );
        assert_eq!(
            group_events(log),
            vec![
                GroupEvent::Assigned {
                    partition: 3,
                    generation: Some(7)
                },
                GroupEvent::Assigned {
                    partition: 5,
                    generation: None
                },
                GroupEvent::Revoked(vec![3, 4]),
                GroupEvent::Lost(vec![5]),
            ]
        );
        assert!(owned_partitions(log).is_empty());
    }
}
