//! The membership and assignment changes a host saw, with their reasons:
//! hosts that joined or left, a new leader, each assignment written anew,
//! a topology removed, this host's own loss of membership. The last
//! [`CHANGES_KEPT`] are kept in its view of the cluster, so that the
//! cluster page shows what happened before it was opened.

use super::catalog::ClusterTopology;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

/// Changes a host keeps: the latest.
pub const CHANGES_KEPT: usize = 100;

/// One change, as this host saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// When it happened (a host's join: when it joined) or was seen, in
    /// milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// What changed: `host h4 joined`, `word-count: assignment epoch 5`.
    pub what: String,
    /// Why, as far as this host knows.
    pub reason: String,
}

/// The changes kept, oldest first.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(transparent)]
pub struct Changes(VecDeque<Change>);

fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Changes {
    /// Keeps a change seen at `at_unix_ms`, dropping the oldest past
    /// [`CHANGES_KEPT`].
    pub fn push_at(&mut self, at_unix_ms: u64, what: String, reason: String) {
        if self.0.len() == CHANGES_KEPT {
            self.0.pop_front();
        }
        self.0.push_back(Change { at_unix_ms, what, reason });
    }

    /// Keeps a change seen now.
    pub fn push(&mut self, what: String, reason: impl Into<String>) {
        self.push_at(now_unix_ms(), what, reason.into());
    }

    /// The changes kept, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Change> {
        self.0.iter()
    }

    /// Keeps what changed from members `was` and leader `leader_was` to
    /// `now` and `leader` (members as their ids and join times);
    /// `first`: this host's first look at the cluster.
    pub fn of_members(
        &mut self,
        (was, leader_was): (&[(&str, u64)], Option<&str>),
        (now, leader): (&[(&str, u64)], Option<&str>),
        first: bool,
    ) {
        let ids = |members: &[(&str, u64)]| members.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>();
        let (was_ids, now_ids) = (ids(was), ids(now));
        for (id, joined_unix_ms) in now.iter().filter(|(id, _)| !was_ids.iter().any(|w| w == id)) {
            let reason = if first { "a member when this host first looked" } else { "registered under a new lease" };
            self.push_at(*joined_unix_ms, format!("host {id} joined"), reason.into());
        }
        let left: Vec<&String> = was_ids.iter().filter(|id| !now_ids.contains(id)).collect();
        for id in &left {
            self.push(format!("host {id} left"), "its lease ended: it left, or stopped answering etcd");
        }
        if leader != leader_was {
            let reason = match leader_was {
                None => "elected: there was no leader".to_owned(),
                Some(old) if left.iter().any(|id| id.as_str() == old) => format!("elected: the leader {old} left"),
                Some(old) => format!("elected: the leader {old} gave up its lead"),
            };
            self.push(format!("leader {}", leader.unwrap_or("none")), reason);
        }
    }

    /// Keeps each assignment written anew from `was` to `now` (with the
    /// leader's reason) and each topology removed.
    pub fn of_topologies(&mut self, was: &BTreeMap<String, ClusterTopology>, now: &BTreeMap<String, ClusterTopology>) {
        for (name, topology) in now {
            let Some(record) = &topology.assignment else { continue };
            let epoch = record.assignment.epoch;
            let before = was.get(name).and_then(|t| t.assignment.as_ref()).map(|r| r.assignment.epoch);
            if before != Some(epoch) {
                self.push(format!("{name}: assignment epoch {epoch}"), record.reason.clone());
            }
        }
        for name in was.keys().filter(|name| !now.contains_key(*name)) {
            self.push(format!("{name} removed"), "deleted from the cluster");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_leaves_and_a_new_leader_are_kept_with_their_reasons() {
        let mut changes = Changes::default();
        let both = [("h1", 5), ("h2", 7)];
        changes.of_members((&[], None), (&both, Some("h1")), true);
        changes.of_members((&both, Some("h1")), (&both[1..], Some("h2")), false);
        let seen: Vec<(&str, &str)> = changes.iter().map(|c| (c.what.as_str(), c.reason.as_str())).collect();
        assert_eq!(
            seen,
            [
                ("host h1 joined", "a member when this host first looked"),
                ("host h2 joined", "a member when this host first looked"),
                ("leader h1", "elected: there was no leader"),
                ("host h1 left", "its lease ended: it left, or stopped answering etcd"),
                ("leader h2", "elected: the leader h1 left"),
            ]
        );
        assert_eq!(changes.iter().next().unwrap().at_unix_ms, 5);
    }

    #[test]
    fn only_the_latest_are_kept() {
        let mut changes = Changes::default();
        for i in 0..CHANGES_KEPT + 10 {
            changes.push(format!("change {i}"), "test");
        }
        assert_eq!(changes.iter().count(), CHANGES_KEPT);
        assert_eq!(changes.iter().next().unwrap().what, "change 10");
    }
}
