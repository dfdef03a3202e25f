//! Operators more than one test guest runs. Each guest includes this file
//! as a module of its own (`#[path]`): a guest crate exports its component,
//! so one guest cannot depend on another.

use weir_sdk::prelude::*;

/// Fails the first attempt of batch `txid`, so that a run replays it.
pub fn fail_first_attempt(batch: &BatchInfo, txid: u64) -> Result<(), Error> {
    if batch.txid == txid && batch.attempt == 0 {
        return Err(Error::retry(format!("txid {} fails on its first attempt", batch.txid)));
    }
    Ok(())
}

/// A guest combiner: the greatest integer (null for none).
pub struct Greatest;

impl CombinerAggregator for Greatest {
    fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(tuple.i64(0)?))
    }
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
        match (a, b) {
            (Value::I64(a), Value::I64(b)) => Ok(Value::I64(a.max(b))),
            (Value::Null, v) | (v, Value::Null) => Ok(v),
            (a, b) => Err(Error::fatal(format!("greatest of {a:?} and {b:?}"))),
        }
    }
    fn zero(&self) -> Value {
        Value::Null
    }
}

/// A reducer: the integers, in the order they came, joined by its
/// separator.
pub struct JoinNumbers(pub &'static str);

impl ReducerAggregator for JoinNumbers {
    fn init(&self) -> Value {
        Value::from("")
    }
    fn reduce(&self, acc: Value, tuple: &Tuple<'_>) -> Result<Value, Error> {
        let Value::Str(acc) = acc else { return Err(Error::fatal(format!("joining onto {acc:?}"))) };
        let n = tuple.i64(0)?;
        Ok(Value::Str(if acc.is_empty() { n.to_string() } else { format!("{acc}{}{n}", self.0) }))
    }
}
