//! The operator kinds a guest implements, and the errors they return.

use crate::codec::Value;
use crate::tuple::{Emitter, SpoutEmitter, Tuple};
use std::fmt;

/// Why an operator failed on a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The batch fails and is replayed with the same txid and the next attempt.
    Retry(String),
    /// The topology halts with this message.
    Fatal(String),
}

impl Error {
    /// A failure worth replaying the batch for.
    pub fn retry(message: impl Into<String>) -> Error {
        Error::Retry(message.into())
    }

    /// A failure that stops the topology.
    pub fn fatal(message: impl Into<String>) -> Error {
        Error::Fatal(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Retry(m) => write!(f, "retry: {m}"),
            Error::Fatal(m) => write!(f, "fatal: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The batch an operator call belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchInfo {
    /// Name of the topology.
    pub topology: String,
    /// Id of the operator being called.
    pub operator: String,
    /// Transaction id of the batch; a replay keeps it.
    pub txid: u64,
    /// Attempt number, from 0; each replay adds one.
    pub attempt: u32,
    /// Partition of the batch being processed.
    pub partition: u32,
    /// Names of the input fields, in order.
    pub fields: Vec<String>,
}

/// The batch a spout call emits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpoutInfo {
    /// Name of the topology.
    pub topology: String,
    /// Transaction id of the batch; a replay keeps it.
    pub txid: u64,
    /// Attempt number, from 0; each replay adds one.
    pub attempt: u32,
    /// Most tuples the batch should hold.
    pub max_tuples: u32,
}

/// Trident's `IBatchSpout`: emits the batch of a txid. It must emit the same
/// tuples on every attempt of a txid (the host stores nothing for it), which
/// makes it transactional.
pub trait BatchSpout: 'static {
    /// Emits the tuples of batch `info.txid`; returns false, emitting
    /// nothing, when the source has nothing more.
    fn emit_batch(&self, info: &SpoutInfo, out: &mut SpoutEmitter<'_>) -> Result<bool, Error>;
}

/// Trident's partitioned spouts: a source split into partitions, each read
/// from metadata (an offset, a range) that the host keeps.
///
/// Declared transactional, the spout must re-emit exactly the tuples a
/// batch's metadata describes ([`PartitionedSpout::reemit_partition`]).
/// Declared opaque, a replay is emitted afresh from the last committed
/// metadata and may hold different tuples; `reemit_partition` is not called.
pub trait PartitionedSpout: 'static {
    /// The source's partitions.
    fn partitions(&self, info: &SpoutInfo) -> Result<Vec<String>, Error>;

    /// Emits the batch of `partition` after the one `previous` describes
    /// (`None`: the partition's first) and returns its metadata; `None`,
    /// emitting nothing, when the partition has nothing new.
    fn emit_partition(
        &self,
        info: &SpoutInfo,
        partition: &str,
        previous: Option<&[u8]>,
        out: &mut SpoutEmitter<'_>,
    ) -> Result<Option<Vec<u8>>, Error>;

    /// Emits again exactly the tuples that `meta` describes.
    fn reemit_partition(
        &self,
        info: &SpoutInfo,
        partition: &str,
        meta: &[u8],
        out: &mut SpoutEmitter<'_>,
    ) -> Result<(), Error> {
        let _ = (info, partition, meta, out);
        Err(Error::fatal("this spout is opaque: it cannot re-emit a batch"))
    }
}

/// Trident's `Function` (`each`): emits zero or more tuples per input tuple;
/// the host appends each emitted tuple's values to the input tuple.
pub trait Function: 'static {
    /// Processes one tuple, emitting as many output tuples as it likes.
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error>;
}

/// Trident's `Filter`: keeps the tuples for which it returns true.
pub trait Filter: 'static {
    /// Whether `tuple` stays in the stream.
    fn is_keep(&self, tuple: &Tuple<'_>) -> Result<bool, Error>;
}

/// Aggregations the host runs itself, without calling into the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Builtin {
    /// Number of tuples.
    Count,
    /// Sum of the single input field (integers stay integers).
    Sum,
}

/// Trident's `CombinerAggregator`: `init` turns each tuple into a value,
/// `combine` merges two values, `zero` is the value of no tuples. A group's
/// result is `combine(... combine(zero, init(t1)) ..., init(tn))`; a stored
/// state is updated as `combine(stored, partial)`.
pub trait CombinerAggregator: 'static {
    /// The value one tuple contributes.
    fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error>;
    /// Merges two values.
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error>;
    /// The value of an empty group.
    fn zero(&self) -> Value;
    /// Set by the built-in aggregators, which the host runs natively.
    fn builtin(&self) -> Option<Builtin> {
        None
    }
}

/// Counts tuples. Runs in the host: no call into the guest.
#[derive(Clone, Copy, Debug, Default)]
pub struct Count;

impl CombinerAggregator for Count {
    fn init(&self, _tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(1))
    }
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
        add(a, b)
    }
    fn zero(&self) -> Value {
        Value::I64(0)
    }
    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin::Count)
    }
}

/// Sums the single input field. Runs in the host: no call into the guest.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sum;

impl CombinerAggregator for Sum {
    fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(tuple.value(0)?.to_owned())
    }
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
        add(a, b)
    }
    fn zero(&self) -> Value {
        Value::I64(0)
    }
    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin::Sum)
    }
}

/// Adds two numbers: integers stay integers (failing on overflow), a float
/// makes the sum a float, null counts as nothing.
pub fn add(a: Value, b: Value) -> Result<Value, Error> {
    match (a, b) {
        (Value::I64(x), Value::I64(y)) => {
            x.checked_add(y).map(Value::I64).ok_or_else(|| Error::fatal(format!("integer overflow adding {x} and {y}")))
        }
        (Value::F64(x), Value::F64(y)) => Ok(Value::F64(x + y)),
        (Value::I64(x), Value::F64(y)) | (Value::F64(y), Value::I64(x)) => Ok(Value::F64(x as f64 + y)),
        (Value::Null, v) | (v, Value::Null) => Ok(v),
        (a, b) => Err(Error::fatal(format!("cannot add {} and {}", a.as_ref().type_name(), b.as_ref().type_name()))),
    }
}
