//! Reach, after Trident's `TridentReach`: how many distinct people a URL
//! reached. The input says who tweeted each URL and who follows each
//! tweeter; two states keep both lists, and the query `reach` expands a
//! URL's tweeters into their followers and counts the distinct ones.
//!
//! Input lines (`data/reach.txt`):
//!
//! ```text
//! tweeters <url> <tweeter>,<tweeter>,...
//! followers <tweeter> <follower>,<follower>,...
//! ```
//!
//! A list in a state is one string, its names joined by commas. A URL or a
//! tweeter named again later gains the new names.

use weir_sdk::prelude::*;

/// Splits an input line into its kind (`tweeters` or `followers`), its key
/// (a URL or a tweeter) and its comma-separated list of names.
pub struct ParseLine;

impl Function for ParseLine {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let line = tuple.str("line")?;
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (None, ..) => Ok(()),
            (Some(kind @ ("tweeters" | "followers")), Some(key), list, None) => {
                out.emit([kind, key, list.unwrap_or("")])
            }
            _ => Err(Error::fatal(format!("not a reach line: {line:?}"))),
        }
    }
}

/// Keeps the lines of one kind.
pub struct KindIs(pub &'static str);

impl Filter for KindIs {
    fn is_keep(&self, tuple: &Tuple<'_>) -> Result<bool, Error> {
        Ok(tuple.str("kind")? == self.0)
    }
}

/// The names of a comma-joined list, without empty ones.
pub fn names(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|name| !name.is_empty())
}

/// Adds each tuple's names (`list`) to the list stored under its `key`, in
/// one read and one write of the state for the whole batch partition.
pub struct AddNames;

impl StateUpdater for AddNames {
    fn update_state(&self, state: &dyn MapState, tuples: &[Tuple<'_>], _out: &mut Emitter<'_>) -> Result<(), Error> {
        let mut keys: Vec<&str> = Vec::new();
        for tuple in tuples {
            let key = tuple.str("key")?;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let stored = state.multi_get(&keys.iter().map(|k| vec![Value::from(*k)]).collect::<Vec<_>>())?;
        let mut lists: Vec<Vec<String>> = stored
            .into_iter()
            .map(|value| match value {
                Some(Value::Str(list)) => names(&list).map(str::to_owned).collect(),
                _ => Vec::new(),
            })
            .collect();
        for tuple in tuples {
            let key = tuple.str("key")?;
            let at = keys.iter().position(|k| *k == key).expect("every key was collected");
            for name in names(tuple.str("list")?) {
                if !lists[at].iter().any(|n| n == name) {
                    lists[at].push(name.to_owned());
                }
            }
        }
        let entries: Vec<(Vec<Value>, Value)> =
            keys.iter().zip(lists).map(|(key, list)| (vec![Value::from(*key)], Value::from(list.join(",")))).collect();
        state.multi_put(&entries)
    }
}

/// Emits each name of a comma-joined list (nothing for null: a key the
/// state does not hold).
pub struct ExpandList;

impl Function for ExpandList {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        if let ValueRef::Str(list) = tuple.value(0)? {
            for name in names(list) {
                out.emit([name])?;
            }
        }
        Ok(())
    }
}

/// Trident's `One`: 1 per group, whatever its tuples.
pub struct One;

impl CombinerAggregator for One {
    fn init(&self, _tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(1))
    }
    fn combine(&self, _a: Value, _b: Value) -> Result<Value, Error> {
        Ok(Value::I64(1))
    }
    fn zero(&self) -> Value {
        Value::I64(1)
    }
}

/// The `reach` topology: the states `tweeters` (URL to tweeters) and
/// `followers` (tweeter to followers), and the query `reach` (arguments: a
/// URL; result: the number of distinct followers of its tweeters).
pub fn topology() -> Topology {
    let topology = Topology::new("reach");
    let lines =
        topology.new_stream(FileLines::new("line")).each(["line"], ParseLine, ["kind", "key", "list"]).name("parse");
    let tweeters = lines
        .filter(["kind"], KindIs("tweeters"))
        .name("tweeter-lines")
        .partition_persist(State::transactional("tweeters"), ["key", "list"], AddNames, [])
        .name("store-tweeters");
    let followers = lines
        .filter(["kind"], KindIs("followers"))
        .name("follower-lines")
        .partition_persist(State::transactional("followers"), ["key", "list"], AddNames, [])
        .name("store-followers");
    topology
        .new_query_stream("reach")
        .state_query(&tweeters, ["args"], MapGet, ["tweeters"])
        .name("get-tweeters")
        .each(["tweeters"], ExpandList, ["tweeter"])
        .name("expand-tweeters")
        .shuffle()
        .state_query(&followers, ["tweeter"], MapGet, ["followers"])
        .name("get-followers")
        .each(["followers"], ExpandList, ["follower"])
        .name("expand-followers")
        .parallelism_hint(2)
        .group_by(["follower"])
        .aggregate([], One, ["one"])
        .name("one-per-follower")
        .aggregate(["one"], Sum, ["reach"])
        .name("reach");
    topology.build()
}

weir_sdk::export!(topology);

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use weir_sdk::codec::{Batch, BatchWriter};
    use weir_sdk::dispatch;

    /// A state in memory, as the host's looks to an updater.
    #[derive(Default)]
    struct Memory(RefCell<Vec<(Vec<Value>, Value)>>);

    impl MapState for Memory {
        fn multi_get(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, Error> {
            let entries = self.0.borrow();
            Ok(keys.iter().map(|k| entries.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone())).collect())
        }

        fn multi_put(&self, entries: &[(Vec<Value>, Value)]) -> Result<(), Error> {
            let mut stored = self.0.borrow_mut();
            for (key, value) in entries {
                match stored.iter_mut().find(|(k, _)| k == key) {
                    Some(entry) => entry.1 = value.clone(),
                    None => stored.push((key.clone(), value.clone())),
                }
            }
            Ok(())
        }
    }

    fn info(operator: &str, fields: &[&str]) -> BatchInfo {
        BatchInfo {
            topology: "reach".into(),
            operator: operator.into(),
            txid: 1,
            fields: fields.iter().map(|f| f.to_string()).collect(),
            ..BatchInfo::default()
        }
    }

    fn rows(bytes: &[u8]) -> Vec<Vec<Value>> {
        Batch::decode(bytes).unwrap().rows().map(|r| r.values().map(ValueRef::to_owned).collect()).collect()
    }

    #[test]
    fn parse_line_splits_kind_key_and_list_and_refuses_other_lines() {
        let mut input = BatchWriter::new(1);
        input.push_row(0, [ValueRef::Str("followers tim alex,quinn")]).unwrap();
        input.push_row(0, [ValueRef::Str("")]).unwrap();
        let out = dispatch::run_function(&weir_topologies(), &info("parse", &["line"]), &input.finish()).unwrap();
        assert_eq!(rows(&out), [vec![Value::from("followers"), Value::from("tim"), Value::from("alex,quinn")]]);
        let mut bad = BatchWriter::new(1);
        bad.push_row(0, [ValueRef::Str("likes tim bob")]).unwrap();
        let err = dispatch::run_function(&weir_topologies(), &info("parse", &["line"]), &bad.finish()).unwrap_err();
        assert_eq!(err, Error::fatal("not a reach line: \"likes tim bob\""));
    }

    #[test]
    fn add_names_adds_each_new_name_once_to_the_stored_list() {
        let state = Memory::default();
        state.multi_put(&[(vec![Value::from("tim")], Value::from("alex"))]).unwrap();
        let mut input = BatchWriter::new(2);
        for (key, list) in [("tim", "alex,quinn"), ("zoe", "amy"), ("tim", "quinn,bo")] {
            input.push_row(0, [ValueRef::Str(key), ValueRef::Str(list)]).unwrap();
        }
        let info = info("store-followers", &["key", "list"]);
        dispatch::update_state(&weir_topologies(), &info, &state, &input.finish()).unwrap();
        let stored = state.multi_get(&[vec![Value::from("tim")], vec![Value::from("zoe")]]).unwrap();
        assert_eq!(stored, [Some(Value::from("alex,quinn,bo")), Some(Value::from("amy"))]);
    }

    #[test]
    fn expand_list_emits_each_name_and_nothing_for_null() {
        let mut input = BatchWriter::new(1);
        input.push_row(0, [ValueRef::Str("a,,b")]).unwrap();
        input.push_row(0, [ValueRef::Null]).unwrap();
        let info = info("expand-tweeters", &["tweeters"]);
        let out = dispatch::run_function(&weir_topologies(), &info, &input.finish()).unwrap();
        assert_eq!(rows(&out), [vec![Value::from("a")], vec![Value::from("b")]]);
    }
}
