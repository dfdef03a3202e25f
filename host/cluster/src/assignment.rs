//! Which live host owns each unit of a topology's work (a spout partition,
//! a state's hash slot). Sticky, as Kafka's cooperative sticky assignor is:
//! a host joining or leaving moves only the units it must, and every host
//! ends with its share, give or take one.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A unit's owner, and the assignment epoch at which it got the unit: the
/// epoch a fenced host's writes are told apart by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub host: String,
    pub since: u64,
}

/// Every unit's owner, under one epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub epoch: u64,
    pub units: BTreeMap<String, Owner>,
}

/// What one host owns of a topology: its spout partitions, by name, and how
/// many state slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Share<'a> {
    pub partitions: Vec<&'a str>,
    pub slots: usize,
}

impl Assignment {
    /// The units `host` owns, in order.
    pub fn of<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.units.iter().filter(move |(_, owner)| owner.host == host).map(|(unit, _)| unit.as_str())
    }

    /// Each owner's share, by host.
    pub fn shares(&self) -> BTreeMap<&str, Share<'_>> {
        let mut shares: BTreeMap<&str, Share<'_>> = BTreeMap::new();
        for (unit, owner) in &self.units {
            let share = shares.entry(owner.host.as_str()).or_default();
            match unit.strip_prefix("partition/") {
                Some(partition) => share.partitions.push(partition),
                None => share.slots += 1,
            }
        }
        shares
    }
}

/// The assignment of `units` to `hosts` that follows `previous`. Units of
/// each kind (the part of their name before the first `/`: `partition`,
/// `slot`; none for a name without one) are shared out apart, so that every host gets its share of each:
/// a unit stays with its owner while the owner is live and within its
/// share; the units of gone hosts, new units and an overloaded host's
/// excess go to the hosts furthest below their share. Hosts' shares of a
/// kind differ by at most one. The same inputs, in any order, give the same
/// assignment, so a new leader recomputes what the last one wrote. The
/// epoch goes up by one when any unit changes hands, appears or goes.
pub fn assign(previous: &Assignment, hosts: &[String], units: &[String]) -> Assignment {
    assign_among(previous, hosts, units, &BTreeMap::new())
}

/// [`assign`], where `busy` says how many topologies each host runs whole
/// already: among hosts with equal claims to a unit, the least busy takes
/// it, so that topologies placed whole (one unit each) spread across the
/// hosts instead of all going to the first by name.
pub fn assign_among(
    previous: &Assignment,
    hosts: &[String],
    units: &[String],
    busy: &BTreeMap<String, usize>,
) -> Assignment {
    let hosts: BTreeSet<&str> = hosts.iter().map(String::as_str).collect();
    let mut kinds: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for unit in units {
        kinds.entry(unit.split_once('/').map_or("", |(kind, _)| kind)).or_default().insert(unit);
    }
    let owners: BTreeMap<&str, &str> = if hosts.is_empty() {
        BTreeMap::new()
    } else {
        kinds.values().flat_map(|units| place(previous, &hosts, units, busy)).collect()
    };
    let changed = previous.units.len() != owners.len()
        || owners.iter().any(|(unit, host)| previous.units.get(*unit).is_none_or(|owner| owner.host != *host));
    let epoch = if changed { previous.epoch + 1 } else { previous.epoch };
    let units = owners
        .into_iter()
        .map(|(unit, host)| {
            let since = match previous.units.get(unit) {
                Some(owner) if owner.host == host => owner.since,
                _ => epoch,
            };
            (unit.to_owned(), Owner { host: host.to_owned(), since })
        })
        .collect();
    Assignment { epoch, units }
}

/// Each of `units` (one kind) with its owner among `hosts` (not empty).
fn place<'a>(
    previous: &'a Assignment,
    hosts: &BTreeSet<&'a str>,
    units: &BTreeSet<&'a str>,
    busy: &BTreeMap<String, usize>,
) -> Vec<(&'a str, &'a str)> {
    let busy = |host: &str| busy.get(host).copied().unwrap_or(0);
    // What each live host keeps of what it had, in unit order.
    let mut kept: BTreeMap<&str, Vec<&str>> = hosts.iter().map(|h| (*h, Vec::new())).collect();
    let mut free: Vec<&str> = Vec::new();
    for unit in units {
        match previous.units.get(*unit).and_then(|owner| kept.get_mut(owner.host.as_str())) {
            Some(list) => list.push(unit),
            None => free.push(unit),
        }
    }

    // Shares: `units / hosts` each, one more for `units % hosts` hosts,
    // those that keep the most, so that the fewest units move, then the
    // least busy.
    let (floor, extra) = (units.len() / hosts.len(), units.len() % hosts.len());
    let mut by_kept: Vec<&str> = hosts.iter().copied().collect();
    by_kept.sort_by(|a, b| kept[b].len().cmp(&kept[a].len()).then(busy(a).cmp(&busy(b))).then(a.cmp(b)));
    let mut room: BTreeMap<&str, usize> = BTreeMap::new();
    for (rank, host) in by_kept.iter().enumerate() {
        let share = floor + usize::from(rank < extra);
        let list = kept.get_mut(host).expect("every host has a list");
        if list.len() > share {
            free.extend(list.drain(share..));
        }
        room.insert(host, share - list.len());
    }

    free.sort_unstable();
    for unit in free {
        let host = *room
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(busy(b.0).cmp(&busy(a.0))).then(b.0.cmp(a.0)))
            .expect("hosts")
            .0;
        *room.get_mut(host).expect("a host with room") -= 1;
        kept.get_mut(host).expect("every host has a list").push(unit);
    }
    kept.into_iter().flat_map(|(host, list)| list.into_iter().map(move |unit| (unit, host))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:03}")).collect()
    }

    fn loads(assignment: &Assignment, hosts: &[String]) -> Vec<usize> {
        hosts.iter().map(|h| assignment.of(h).count()).collect()
    }

    fn moved(before: &Assignment, after: &Assignment) -> usize {
        after.units.iter().filter(|(unit, owner)| before.units.get(*unit).is_some_and(|b| b.host != owner.host)).count()
    }

    #[test]
    fn every_unit_has_one_live_owner_and_shares_differ_by_at_most_one() {
        for hosts in 1..=7 {
            for units in [0, 1, 5, 8, 64, 129] {
                let (hosts, units) = (names("h", hosts), names("u", units));
                let a = assign(&Assignment::default(), &hosts, &units);
                assert_eq!(a.units.len(), units.len());
                assert!(a.units.values().all(|o| hosts.contains(&o.host)));
                let loads = loads(&a, &hosts);
                assert!(loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1, "{loads:?}");
            }
        }
    }

    #[test]
    fn every_host_gets_its_share_of_each_kind_of_unit() {
        let mut units: Vec<String> = (0..4).map(|p| format!("partition/clicks.{p}")).collect();
        units.extend((0..64).map(|s| format!("slot/counts/{s}")));
        let hosts = names("h", 3);
        let first = assign(&Assignment::default(), &hosts, &units);
        // A host gone and back: each still gets its share of each kind.
        let again = assign(&assign(&first, &hosts[..2], &units), &hosts, &units);
        for a in [first, again] {
            for host in &hosts {
                let partitions = a.of(host).filter(|u| u.starts_with("partition/")).count();
                let slots = a.of(host).filter(|u| u.starts_with("slot/")).count();
                assert!((1..=2).contains(&partitions) && (21..=22).contains(&slots), "{host}: {partitions} {slots}");
            }
        }
    }

    #[test]
    fn a_host_joining_takes_its_share_and_nothing_else_moves_between_others() {
        let units = names("u", 64);
        let before = assign(&Assignment::default(), &names("h", 3), &units);
        let after = assign(&before, &names("h", 4), &units);
        assert_eq!(after.epoch, before.epoch + 1);
        let joined = after.of("h003").count();
        assert_eq!(joined, 16);
        // Only what the new host took changed hands.
        assert_eq!(moved(&before, &after), joined);
        assert!(after.units.values().filter(|o| o.host == "h003").all(|o| o.since == after.epoch));
        assert!(loads(&after, &names("h", 4)).iter().all(|l| *l == 16));
    }

    #[test]
    fn a_host_leaving_moves_only_its_own_units() {
        let units = names("u", 64);
        let hosts = names("h", 4);
        let before = assign(&Assignment::default(), &hosts, &units);
        let survivors: Vec<String> = hosts.iter().filter(|h| *h != "h001").cloned().collect();
        let after = assign(&before, &survivors, &units);
        assert_eq!(moved(&before, &after), before.of("h001").count());
        for (unit, owner) in &after.units {
            let was = &before.units[unit];
            if was.host != "h001" {
                assert_eq!(owner, was, "{unit} stayed, with its epoch");
            }
        }
        let loads = loads(&after, &survivors);
        assert!(loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1, "{loads:?}");
    }

    #[test]
    fn the_same_inputs_in_any_order_give_the_same_assignment_and_epoch() {
        let units = names("u", 20);
        let hosts = names("h", 3);
        let first = assign(&Assignment::default(), &hosts, &units);
        let mut reversed = hosts.clone();
        reversed.reverse();
        let mut shuffled_units = units.clone();
        shuffled_units.rotate_left(7);
        assert_eq!(assign(&Assignment::default(), &reversed, &shuffled_units), first);
        // Nothing changed: the epoch stays.
        assert_eq!(assign(&first, &reversed, &units), first);
    }

    #[test]
    fn a_unit_goes_to_the_least_busy_of_hosts_with_equal_claims_and_stays_there() {
        let hosts = names("h", 3);
        let whole = |name: &str| vec![format!("whole/{name}")];
        let mut busy: BTreeMap<String, usize> = BTreeMap::new();
        let mut owners = Vec::new();
        for name in ["a", "b", "c", "d", "e", "f"] {
            let placed = assign_among(&Assignment::default(), &hosts, &whole(name), &busy);
            let owner = placed.units[&format!("whole/{name}")].host.clone();
            *busy.entry(owner.clone()).or_default() += 1;
            owners.push(owner);
        }
        assert_eq!(owners, ["h000", "h001", "h002", "h000", "h001", "h002"]);
        // A unit kept by a live owner stays, however busy the owner is.
        let kept = assign_among(&Assignment::default(), &hosts, &whole("g"), &BTreeMap::new());
        busy.insert("h000".into(), 9);
        assert_eq!(assign_among(&kept, &hosts, &whole("g"), &busy), kept);
    }

    #[test]
    fn an_overloaded_host_gives_up_its_excess_and_no_hosts_means_no_owners() {
        let units = names("u", 9);
        // Everything on one host, then two more join.
        let alone = assign(&Assignment::default(), &names("h", 1), &units);
        let spread = assign(&alone, &names("h", 3), &units);
        assert_eq!(loads(&spread, &names("h", 3)), vec![3, 3, 3]);
        assert_eq!(moved(&alone, &spread), 6);
        let none = assign(&spread, &[], &units);
        assert!(none.units.is_empty());
        assert_eq!(none.epoch, spread.epoch + 1);
        // Units that went away are dropped; new ones are placed.
        let fewer = assign(&spread, &names("h", 3), &names("u", 6));
        assert_eq!(fewer.units.len(), 6);
        assert!(loads(&fewer, &names("h", 3)).iter().all(|l| *l == 2));
    }
}
