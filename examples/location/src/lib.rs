//! Location, from Trident's state documentation: a state updater keeps each
//! user's location, written in bulk, and the query `location` looks users'
//! locations up in bulk.
//!
//! Input lines (`data/locations.txt`): `<user> <location>`; a user named
//! again has moved. What the updater writes is its new-values stream,
//! which counts the arrivals at each location.

use weir_sdk::prelude::*;

/// Splits an input line into a user id and a location.
pub struct ParseLine;

impl Function for ParseLine {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let line = tuple.str("line")?;
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next(), parts.next()) {
            (None, ..) => Ok(()),
            (Some(user), Some(location), None) => out.emit([user, location]),
            _ => Err(Error::fatal(format!("not a `<user> <location>` line: {line:?}"))),
        }
    }
}

/// Trident's `LocationUpdater`: writes every user's latest location with
/// one `multi_put` per batch partition, and emits each write.
pub struct LocationUpdater;

impl StateUpdater for LocationUpdater {
    fn update_state(&self, state: &dyn MapState, tuples: &[Tuple<'_>], out: &mut Emitter<'_>) -> Result<(), Error> {
        let mut latest: Vec<(Vec<Value>, Value)> = Vec::new();
        for tuple in tuples {
            let (user, location) = (tuple.str("userid")?, tuple.str("location")?);
            match latest.iter_mut().find(|(key, _)| key[0] == Value::from(user)) {
                Some((_, value)) => *value = Value::from(location),
                None => latest.push((vec![Value::from(user)], Value::from(location))),
            }
            out.emit([user, location])?;
        }
        state.multi_put(&latest)
    }
}

/// Trident's `QueryLocation`: reads the locations of the whole batch
/// partition's users with one `multi_get`, then emits each user's location
/// (nothing for a user the state does not know).
pub struct QueryLocation;

impl QueryFunction for QueryLocation {
    fn batch_retrieve(&self, state: &dyn MapState, tuples: &[Tuple<'_>]) -> Result<Vec<Value>, Error> {
        let keys: Vec<Vec<Value>> =
            tuples.iter().map(|t| Ok(vec![Value::from(t.str("userid")?)])).collect::<Result<_, Error>>()?;
        Ok(state.multi_get(&keys)?.into_iter().map(|v| v.unwrap_or(Value::Null)).collect())
    }

    fn execute(&self, _tuple: &Tuple<'_>, result: &Value, out: &mut Emitter<'_>) -> Result<(), Error> {
        match result {
            Value::Null => Ok(()),
            location => out.emit([location]),
        }
    }
}

/// The `location` topology: the state `locations` (user id to location),
/// `arrivals` (location to how many times someone moved there), and the
/// query `location` (arguments: user ids; result: `[user, location]` per
/// known user).
pub fn topology() -> Topology {
    let topology = Topology::new("location");
    let locations = topology
        .new_stream(FileLines::new("line"))
        .each(["line"], ParseLine, ["userid", "location"])
        .name("parse")
        .partition_persist(
            State::transactional("locations"),
            ["userid", "location"],
            LocationUpdater,
            ["userid", "location"],
        )
        .name("update-locations");
    locations
        .new_values_stream()
        .group_by(["location"])
        .persistent_aggregate(State::transactional("arrivals"), Count, ["arrivals"])
        .name("count-arrivals");
    topology
        .new_query_stream("location")
        .each(["args"], SplitWords, ["userid"])
        .name("split-args")
        .state_query(&locations, ["userid"], QueryLocation, ["location"])
        .name("lookup-locations")
        .project(["userid", "location"]);
    topology.build()
}

weir_sdk::export!(topology);
