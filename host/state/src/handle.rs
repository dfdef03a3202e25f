//! A state as an operator call sees it: the host resource behind WIT's
//! `map-state`, and the same thing for operators compiled into the host.
//! Every entry read or written counts against the call's and the batch's
//! quotas (see [`super::budget`]).

use super::budget::{Access, Scope, StateLimitExceeded, Usage};
use super::view::Views;
use std::sync::{Arc, Mutex};
use weir_config::sync::Locked;
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_sdk::operator::{Error, MapState};

/// One state of a batch's (or a query's) views, lent to one call.
#[derive(Clone)]
pub struct StateHandle {
    views: Arc<Mutex<Views>>,
    state: String,
    /// What the call read and wrote so far (shared by the handle's clones).
    call: Arc<Mutex<Usage>>,
}

impl std::fmt::Debug for StateHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "state {}", self.state)
    }
}

/// Why a `multi-get` or `multi-put` failed.
#[derive(Debug)]
pub enum StateCallError {
    /// The guest's request was malformed: the guest is told, and may
    /// handle it.
    Request(String),
    /// A limit was hit or the store failed: the call must fail, whatever
    /// the guest would do with an error.
    Abort(anyhow::Error),
}

impl From<StateLimitExceeded> for StateCallError {
    fn from(hit: StateLimitExceeded) -> StateCallError {
        StateCallError::Abort(hit.into())
    }
}

impl std::fmt::Display for StateCallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateCallError::Request(message) => f.write_str(message),
            StateCallError::Abort(error) => write!(f, "{error:#}"),
        }
    }
}

/// Bytes `value` takes in the batch encoding: what a guest hands over or
/// gets back for it.
fn encoded_len(value: ValueRef<'_>) -> u64 {
    match value {
        ValueRef::Null | ValueRef::Bool(_) => 1,
        ValueRef::I64(_) | ValueRef::F64(_) => 9,
        ValueRef::Str(s) => 5 + s.len() as u64,
        ValueRef::Bytes(b) => 5 + b.len() as u64,
    }
}

impl StateHandle {
    /// `state` of `views`, for one call.
    pub fn new(views: Arc<Mutex<Views>>, state: &str) -> StateHandle {
        StateHandle { views, state: state.to_owned(), call: Arc::default() }
    }

    fn views(&self) -> std::sync::MutexGuard<'_, Views> {
        self.views.locked()
    }

    /// Counts one entry of `bytes` against the call's quota, then the batch's.
    fn charge(&self, views: &mut Views, access: Access, bytes: u64) -> Result<(), StateLimitExceeded> {
        let mut call = self.call.locked();
        call.charge(views.call_quota(), access, bytes).map_err(|hit| hit.on(&self.state, Scope::Call))?;
        views.charge(access, bytes).map_err(|hit| hit.on(&self.state, Scope::Batch))
    }

    /// `multi-get` over packed keys: packed rows of one value, null where
    /// absent.
    pub fn get_packed(&self, keys: &[u8]) -> Result<Vec<u8>, StateCallError> {
        let keys =
            Batch::decode(keys).map_err(|e| StateCallError::Request(format!("state {}: keys: {e}", self.state)))?;
        let mut views = self.views();
        let mut out = BatchWriter::new(1);
        let mut key = Vec::new();
        for row in keys.rows() {
            key.clear();
            for value in row.values() {
                super::keys::encode_value(&mut key, value);
            }
            let base = views.base(&self.state, &key).map_err(|e| StateCallError::Abort(e.into()))?;
            let value = base.value().map_or(ValueRef::Null, Value::as_ref);
            // Counted before it is copied out: what a call gets back stays
            // within its quota.
            self.charge(&mut views, Access::Read, key.len() as u64 + encoded_len(value))?;
            out.push_row(row.tag(), [value]).expect("one value");
        }
        Ok(out.finish())
    }

    /// `multi-put` of packed entries, each a key's fields then its value.
    pub fn put_packed(&self, entries: &[u8]) -> Result<(), StateCallError> {
        let request = |message: String| StateCallError::Request(format!("state {}: {message}", self.state));
        let entries = Batch::decode(entries).map_err(|e| request(format!("entries: {e}")))?;
        if entries.arity() == 0 && !entries.is_empty() {
            return Err(request("an entry needs a value".to_owned()));
        }
        let mut views = self.views();
        for row in entries.rows() {
            let mut values: Vec<ValueRef<'_>> = row.values().collect();
            let value = values.pop().expect("arity at least 1");
            let key = super::keys::encode(values);
            // Counted before the host keeps a copy.
            self.charge(&mut views, Access::Write, key.len() as u64 + encoded_len(value))?;
            views.put(&self.state, key, value.to_owned()).map_err(|e| StateCallError::Abort(e.into()))?;
        }
        Ok(())
    }
}

impl MapState for StateHandle {
    fn multi_get(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, Error> {
        let mut views = self.views();
        keys.iter()
            .map(|key| {
                let key = Views::key(key);
                let base = views.base(&self.state, &key).map_err(|e| Error::retry(format!("{e:#}")))?;
                let bytes = key.len() as u64 + base.value().map_or(1, |v| encoded_len(v.as_ref()));
                self.charge(&mut views, Access::Read, bytes).map_err(|hit| Error::retry(hit.to_string()))?;
                Ok(base.value().cloned())
            })
            .collect()
    }

    fn multi_put(&self, entries: &[(Vec<Value>, Value)]) -> Result<(), Error> {
        let mut views = self.views();
        for (key, value) in entries {
            let key = Views::key(key);
            let bytes = key.len() as u64 + encoded_len(value.as_ref());
            self.charge(&mut views, Access::Write, bytes).map_err(|hit| Error::retry(hit.to_string()))?;
            views.put(&self.state, key, value.clone()).map_err(|e| Error::fatal(format!("{e:#}")))?;
        }
        Ok(())
    }
}
