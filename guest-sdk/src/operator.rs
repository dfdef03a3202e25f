//! The operator kinds a guest implements, and the errors they return.

pub use crate::call::{BatchInfo, Error};
use crate::codec::Value;
use crate::tuple::{Emitter, SpoutEmitter, Tuple};

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
pub trait BatchSpout: Send + Sync + 'static {
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
pub trait PartitionedSpout: Send + Sync + 'static {
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
pub trait Function: Send + Sync + 'static {
    /// Processes one tuple, emitting as many output tuples as it likes.
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error>;
}

/// Trident's `Filter`: keeps the tuples for which it returns true.
pub trait Filter: Send + Sync + 'static {
    /// Whether `tuple` stays in the stream.
    fn is_keep(&self, tuple: &Tuple<'_>) -> Result<bool, Error>;
}

/// Trident's `MapFunction` (`map`): one output tuple per input tuple, which
/// replaces it.
pub trait MapFunction: Send + Sync + 'static {
    /// The values of the output tuple, one per output field.
    fn execute(&self, tuple: &Tuple<'_>) -> Result<Vec<Value>, Error>;
}

/// Trident's `FlatMapFunction` (`flat_map`): any number of output tuples per
/// input tuple, which replace it.
pub trait FlatMapFunction: Send + Sync + 'static {
    /// Emits the tuples that replace `tuple`.
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error>;
}

/// Trident's `Consumer` (`peek`): sees each tuple, which passes on unchanged.
pub trait Consumer: Send + Sync + 'static {
    /// Looks at one tuple.
    fn accept(&self, tuple: &Tuple<'_>) -> Result<(), Error>;
}

/// Splits its one input field, a string (a sentence, a query's arguments),
/// into its whitespace-separated words, one output tuple per word: with
/// `each` the words extend the tuple, with `flat_map` they replace it. It
/// runs in the guest, as the function a topology would write for it.
#[derive(Clone, Copy, Debug, Default)]
pub struct SplitWords;

impl Function for SplitWords {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        for word in tuple.str(0)?.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

impl FlatMapFunction for SplitWords {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        Function::execute(self, tuple, out)
    }
}

/// Trident's `ReducerAggregator`: a group's value is
/// `reduce(... reduce(start, t1) ..., tn)`, where `start` is `init()` or, in a
/// persistent aggregate, the stored value.
pub trait ReducerAggregator: Send + Sync + 'static {
    /// The value of a group before any tuple.
    fn init(&self) -> Value;
    /// Folds one tuple into the value.
    fn reduce(&self, acc: Value, tuple: &Tuple<'_>) -> Result<Value, Error>;
}

/// Trident's general `Aggregator`: per group, `init` makes a state, each tuple
/// goes through `aggregate`, and `complete` ends it; any of them may emit
/// tuples of the aggregator's output fields.
pub trait Aggregator: Send + Sync + 'static {
    /// The running state of one group.
    type State;
    /// Starts a group of batch `info`.
    fn init(&self, info: &BatchInfo, out: &mut Emitter<'_>) -> Result<Self::State, Error>;
    /// Folds one tuple into the group's state.
    fn aggregate(&self, state: &mut Self::State, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error>;
    /// Ends the group.
    fn complete(&self, state: Self::State, out: &mut Emitter<'_>) -> Result<(), Error>;
}

/// A state the host keeps, as a state updater or query function sees it
/// during a call. Keys are a tuple of values; each key holds one value.
pub trait MapState {
    /// The values of `keys`, in order; `None` where a key has none.
    fn multi_get(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, Error>;
    /// Writes values; they commit with the batch, exactly once.
    fn multi_put(&self, entries: &[(Vec<Value>, Value)]) -> Result<(), Error>;
}

/// Trident's `StateUpdater` (`partition_persist`): writes a batch
/// partition's tuples into a state in the commit phase, in txid order. What
/// it emits forms the new-values stream.
pub trait StateUpdater: Send + Sync + 'static {
    /// Updates `state` from `tuples`.
    fn update_state(&self, state: &dyn MapState, tuples: &[Tuple<'_>], out: &mut Emitter<'_>) -> Result<(), Error>;
}

/// Trident's `QueryFunction` (`state_query`): reads the state once for the
/// whole batch partition, then emits per tuple.
pub trait QueryFunction: Send + Sync + 'static {
    /// One result per tuple, in order.
    fn batch_retrieve(&self, state: &dyn MapState, tuples: &[Tuple<'_>]) -> Result<Vec<Value>, Error>;
    /// Emits the output tuples of `tuple` given its result.
    fn execute(&self, tuple: &Tuple<'_>, result: &Value, out: &mut Emitter<'_>) -> Result<(), Error>;
}

/// Trident's `MapGet`: the stored value of the key made of the input
/// fields (null when absent). Runs in the host: no call into the guest.
#[derive(Clone, Copy, Debug, Default)]
pub struct MapGet;

/// Aggregations the host runs itself, without calling into the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Builtin {
    /// Number of tuples.
    Count,
    /// Sum of the single input field (integers stay integers).
    Sum,
    /// Least value of the single input field (null for no tuples).
    Min,
    /// Greatest value of the single input field (null for no tuples).
    Max,
    /// The single input field of the first tuple (null for no tuples); in a
    /// state, the first value ever stored.
    First,
}

impl Builtin {
    /// The value of no tuples.
    pub fn zero(self) -> Value {
        match self {
            Builtin::Count | Builtin::Sum => Value::I64(0),
            Builtin::Min | Builtin::Max | Builtin::First => Value::Null,
        }
    }

    /// Whether the built-in reads one input field.
    pub fn reads_a_field(self) -> bool {
        self != Builtin::Count
    }

    /// The value one tuple contributes: 1 for `Count`, the single input
    /// field for the others.
    pub fn init(self, tuple: &Tuple<'_>) -> Result<Value, Error> {
        if self.reads_a_field() { Ok(tuple.value(0)?.to_owned()) } else { Ok(Value::I64(1)) }
    }

    /// Merges two values, `a` the earlier.
    pub fn combine(self, a: Value, b: Value) -> Result<Value, Error> {
        Ok(match (self, a, b) {
            (Builtin::Count | Builtin::Sum, a, b) => add(a, b)?,
            (_, Value::Null, v) | (_, v, Value::Null) => v,
            (Builtin::Min, a, b) => {
                if compare(&b, &a) == std::cmp::Ordering::Less {
                    b
                } else {
                    a
                }
            }
            (Builtin::Max, a, b) => {
                if compare(&b, &a) == std::cmp::Ordering::Greater {
                    b
                } else {
                    a
                }
            }
            (Builtin::First, a, _) => a,
        })
    }
}

/// A total order over values: null, then booleans, numbers (integers and
/// floats compared as numbers), strings, bytes.
pub fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    compare_refs(a.as_ref(), b.as_ref())
}

/// [`compare`] over borrowed values.
pub fn compare_refs(a: crate::codec::ValueRef<'_>, b: crate::codec::ValueRef<'_>) -> std::cmp::Ordering {
    use crate::codec::ValueRef as V;
    fn rank(v: V<'_>) -> u8 {
        match v {
            V::Null => 0,
            V::Bool(_) => 1,
            V::I64(_) | V::F64(_) => 2,
            V::Str(_) => 3,
            V::Bytes(_) => 4,
        }
    }
    match (a, b) {
        (V::Bool(x), V::Bool(y)) => x.cmp(&y),
        (V::I64(x), V::I64(y)) => x.cmp(&y),
        (V::F64(x), V::F64(y)) => x.total_cmp(&y),
        (V::I64(x), V::F64(y)) => (x as f64).total_cmp(&y),
        (V::F64(x), V::I64(y)) => x.total_cmp(&(y as f64)),
        (V::Str(x), V::Str(y)) => x.cmp(y),
        (V::Bytes(x), V::Bytes(y)) => x.cmp(y),
        (a, b) => rank(a).cmp(&rank(b)),
    }
}

/// Trident's `CombinerAggregator`: `init` turns each tuple into a value,
/// `combine` merges two values, `zero` is the value of no tuples. A group's
/// result is `combine(... combine(zero, init(t1)) ..., init(tn))`; a stored
/// state is updated as `combine(stored, partial)`.
pub trait CombinerAggregator: Send + Sync + 'static {
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

macro_rules! builtin_aggregator {
    ($($name:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl CombinerAggregator for $name {
            fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error> {
                Builtin::$name.init(tuple)
            }
            fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
                Builtin::$name.combine(a, b)
            }
            fn zero(&self) -> Value {
                Builtin::$name.zero()
            }
            fn builtin(&self) -> Option<Builtin> {
                Some(Builtin::$name)
            }
        }
    )*};
}

builtin_aggregator! {
    Count, "Counts tuples. Runs in the host: no call into the guest.";
    Sum, "Sums the single input field. Runs in the host: no call into the guest.";
    Min, "Least value of the single input field. Runs in the host: no call into the guest.";
    Max, "Greatest value of the single input field. Runs in the host: no call into the guest.";
    First, "The single input field of the first tuple. Runs in the host: no call into the guest.";
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
