//! A state as an operator call sees it: the host resource behind WIT's
//! `map-state`, and the same thing for operators compiled into the host.

use super::view::Views;
use std::sync::{Arc, Mutex};
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_sdk::operator::{Error, MapState};

/// One state of a batch's (or a query's) views, lent to one call.
#[derive(Clone)]
pub struct StateHandle {
    views: Arc<Mutex<Views>>,
    state: String,
}

impl std::fmt::Debug for StateHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "state {}", self.state)
    }
}

impl StateHandle {
    /// `state` of `views`.
    pub fn new(views: Arc<Mutex<Views>>, state: &str) -> StateHandle {
        StateHandle { views, state: state.to_owned() }
    }

    fn views(&self) -> std::sync::MutexGuard<'_, Views> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `multi-get` over packed keys: packed rows of one value, null where
    /// absent.
    pub fn get_packed(&self, keys: &[u8]) -> Result<Vec<u8>, String> {
        let keys = Batch::decode(keys).map_err(|e| format!("state {}: keys: {e}", self.state))?;
        let mut views = self.views();
        let mut out = BatchWriter::new(1);
        let mut key = Vec::new();
        for row in keys.rows() {
            key.clear();
            for value in row.values() {
                super::keys::encode_value(&mut key, value);
            }
            let base = views.base(&self.state, &key).map_err(|e| format!("{e:#}"))?;
            let value = base.value().map_or(ValueRef::Null, Value::as_ref);
            out.push_row(row.tag(), [value]).expect("one value");
        }
        Ok(out.finish())
    }

    /// `multi-put` of packed entries, each a key's fields then its value.
    pub fn put_packed(&self, entries: &[u8]) -> Result<(), String> {
        let entries = Batch::decode(entries).map_err(|e| format!("state {}: entries: {e}", self.state))?;
        if entries.arity() == 0 && !entries.is_empty() {
            return Err(format!("state {}: an entry needs a value", self.state));
        }
        let mut views = self.views();
        for row in entries.rows() {
            let mut values: Vec<ValueRef<'_>> = row.values().collect();
            let value = values.pop().expect("arity at least 1").to_owned();
            let key = super::keys::encode(values);
            views.put(&self.state, key, value).map_err(|e| format!("{e:#}"))?;
        }
        Ok(())
    }
}

impl MapState for StateHandle {
    fn multi_get(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, Error> {
        let mut views = self.views();
        keys.iter()
            .map(|key| {
                let base = views.base(&self.state, &Views::key(key)).map_err(|e| Error::retry(format!("{e:#}")))?;
                Ok(base.value().cloned())
            })
            .collect()
    }

    fn multi_put(&self, entries: &[(Vec<Value>, Value)]) -> Result<(), Error> {
        let mut views = self.views();
        for (key, value) in entries {
            views.put(&self.state, Views::key(key), value.clone()).map_err(|e| Error::fatal(format!("{e:#}")))?;
        }
        Ok(())
    }
}
