//! Weir's Rust guest SDK: write a topology and its operators in Rust, build
//! the crate for `wasm32-wasip2`, and hand the component to `weir run`.
//!
//! ```ignore
//! use weir_sdk::prelude::*;
//!
//! struct Split;
//! impl Function for Split {
//!     fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
//!         for word in tuple.str("sentence")?.split_whitespace() {
//!             out.emit([word])?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! fn topology() -> Topology {
//!     Topology::new("word-count")
//!         .new_stream(FileLines::new("sentence"))
//!         .each(["sentence"], Split, ["word"])
//!         .group_by(["word"])
//!         .persistent_aggregate(State::transactional("counts"), Count, ["count"])
//!         .build()
//! }
//!
//! weir_sdk::export!(topology);
//! ```
//!
//! Users never touch the generated bindings: [`export!`] wires the
//! topologies to the component's exports. Off wasm the bindings are left out,
//! so everything here runs under plain `cargo test`.

#![warn(missing_docs)]

extern crate self as weir_sdk;

pub mod builder;
mod call;
pub mod codec;
pub mod dispatch;
pub mod operator;
pub mod topology;
pub mod tuple;

pub use builder::{
    DirectoryLines, FileLines, General, Generator, GroupedStream, GuestSpout, JetStream, JetStreamSink, Kafka,
    KafkaSink, Reducer, SinkEnd, Spout, State, Stream, Topology, TridentState, Window, describe,
};
pub use codec::{Value, ValueRef};
pub use operator::{
    Aggregator, BatchInfo, BatchSpout, Builtin, CombinerAggregator, Consumer, Count, Error, Filter, First,
    FlatMapFunction, Function, MapFunction, MapGet, MapState, Max, Min, PartitionedSpout, QueryFunction,
    ReducerAggregator, SplitWords, SpoutInfo, StateUpdater, Sum,
};
pub use topology::{JoinKind, Limits};
pub use tuple::{Emitter, SpoutEmitter, Tuple};

/// Everything a topology crate needs, in one import.
pub mod prelude {
    pub use crate::builder::{
        DirectoryLines, FileLines, General, Generator, GuestSpout, JetStream, JetStreamSink, Kafka, KafkaSink, Reducer,
        State, Topology, TridentState, Window,
    };
    pub use crate::codec::{Value, ValueRef};
    pub use crate::operator::{
        Aggregator, BatchInfo, BatchSpout, CombinerAggregator, Consumer, Count, Error, Filter, First, FlatMapFunction,
        Function, MapFunction, MapGet, MapState, Max, Min, PartitionedSpout, QueryFunction, ReducerAggregator,
        SplitWords, SpoutInfo, StateUpdater, Sum,
    };
    pub use crate::topology::{JoinKind, Limits};
    pub use crate::tuple::{Emitter, SpoutEmitter, Tuple};
}

/// What a component's topology function may return: one topology or several.
pub trait Topologies {
    /// The topologies, as a list.
    fn into_topologies(self) -> Vec<Topology>;
}

impl Topologies for Topology {
    fn into_topologies(self) -> Vec<Topology> {
        vec![self]
    }
}

impl Topologies for Vec<Topology> {
    fn into_topologies(self) -> Vec<Topology> {
        self
    }
}

/// Makes this crate a Weir component whose topologies come from `$topologies`,
/// a function returning a [`Topology`] or a `Vec<Topology>`. It is called
/// once, on the component's first call.
///
/// Built natively (not for wasm), the crate instead gets a public
/// `weir_topologies()` returning them, to test the operators or run them in
/// a native host.
#[macro_export]
macro_rules! export {
    ($topologies:path) => {
        /// The topologies this crate defines, built natively.
        #[cfg(not(target_arch = "wasm32"))]
        pub fn weir_topologies() -> ::std::vec::Vec<$crate::Topology> {
            $crate::Topologies::into_topologies($topologies())
        }

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct Registry;
            ::std::thread_local! {
                static TOPOLOGIES: ::std::vec::Vec<$crate::Topology> =
                    $crate::Topologies::into_topologies($topologies());
            }
            impl $crate::__private::Registry for Registry {
                fn with<R>(f: impl FnOnce(&[$crate::Topology]) -> R) -> R {
                    TOPOLOGIES.with(|t| f(t))
                }
            }
            type Exports = $crate::__private::Exports<Registry>;
    $crate::__private::bindings::export_component!(Exports with_types_in $crate::__private::bindings);
        };
    };
}

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod __private;

#[cfg(test)]
mod vectors {
    //! The packed-batch vectors under `tests/vectors`, shared by every SDK.
    use crate::codec::Value;

    fn value(json: &serde_json::Value) -> Value {
        let (kind, v) = json.as_object().and_then(|o| o.iter().next()).expect("{kind: value}");
        match kind.as_str() {
            "null" => Value::Null,
            "bool" => Value::Bool(v.as_bool().unwrap()),
            "i64" => Value::I64(v.as_i64().unwrap()),
            "f64" => Value::F64(v.as_f64().unwrap()),
            "str" => Value::Str(v.as_str().unwrap().to_owned()),
            "bytes" => Value::Bytes(hex::decode(v.as_str().unwrap()).unwrap()),
            other => panic!("unknown kind {other}"),
        }
    }

    /// A vector's rows: (tag, values).
    pub type Rows = Vec<(u32, Vec<Value>)>;

    /// (name, encoded bytes, rows).
    pub fn all() -> Vec<(String, Vec<u8>, Rows)> {
        let cases: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/vectors/batches.json")).expect("vectors parse");
        cases
            .as_array()
            .unwrap()
            .iter()
            .map(|case| {
                let rows = case["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|row| {
                        (row[0].as_u64().unwrap() as u32, row[1].as_array().unwrap().iter().map(value).collect())
                    })
                    .collect();
                let bytes = hex::decode(case["hex"].as_str().unwrap()).unwrap();
                (case["name"].as_str().unwrap().to_owned(), bytes, rows)
            })
            .collect()
    }
}
