//! Per-tuple operations: `each`, `map`, `flat_map`, `peek`, `filter` and
//! `project`, and the adapters that run the map, flat-map and consumer
//! kinds as one [`Function`].

use super::graph::{Stream, names};
use crate::codec::Value;
use crate::operator::{Consumer, Error, Filter, FlatMapFunction, Function, MapFunction};
use crate::topology::OperationDef;
use crate::tuple::{Emitter, Tuple};

struct MapAsFunction<M>(M);

impl<M: MapFunction> Function for MapAsFunction<M> {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit(self.0.execute(tuple)?.iter().map(Value::as_ref))
    }
}

struct FlatMapAsFunction<F>(F);

impl<F: FlatMapFunction> Function for FlatMapAsFunction<F> {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        self.0.execute(tuple, out)
    }
}

struct ConsumerAsFunction<C>(C);

impl<C: Consumer> Function for ConsumerAsFunction<C> {
    fn execute(&self, tuple: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        self.0.accept(tuple)
    }
}

impl Stream {
    /// Adds the operation `op`, whose code, `function`, is registered as a
    /// [`Function`]: `each`, `map`, `flat_map` and `peek` all run as one.
    fn function_node(&self, kind: &str, function: impl Function, op: OperationDef) -> Stream {
        self.then(kind, |t, id| {
            t.functions.insert(id.to_owned(), Box::new(function));
            op
        })
    }

    /// Trident's `each`: runs `function` over `input`, appending `output`.
    pub fn each<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        function: impl Function,
        output: [&str; O],
    ) -> Stream {
        self.function_node("each", function, OperationDef::Each { input: names(input), output: names(output) })
    }

    /// Trident's `map`: one tuple of `output` replaces each tuple.
    pub fn map<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        function: impl MapFunction,
        output: [&str; O],
    ) -> Stream {
        let op = OperationDef::Map { input: names(input), output: names(output) };
        self.function_node("map", MapAsFunction(function), op)
    }

    /// Trident's `flatMap`: the tuples of `output` it emits replace each tuple.
    pub fn flat_map<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        function: impl FlatMapFunction,
        output: [&str; O],
    ) -> Stream {
        let op = OperationDef::FlatMap { input: names(input), output: names(output) };
        self.function_node("flat-map", FlatMapAsFunction(function), op)
    }

    /// Trident's `peek`: `consumer` sees each tuple, which passes on unchanged.
    pub fn peek<const I: usize>(&self, input: [&str; I], consumer: impl Consumer) -> Stream {
        self.function_node("peek", ConsumerAsFunction(consumer), OperationDef::Peek { input: names(input) })
    }

    /// Trident's `filter`: keeps the tuples `filter` accepts.
    pub fn filter<const I: usize>(&self, input: [&str; I], filter: impl Filter) -> Stream {
        self.then("filter", |t, id| {
            t.filters.insert(id.to_owned(), Box::new(filter));
            OperationDef::Filter { input: names(input) }
        })
    }

    /// Trident's `project`: keeps only `fields`.
    pub fn project<const N: usize>(&self, fields: [&str; N]) -> Stream {
        self.then("project", |_, _| OperationDef::Project { fields: names(fields) })
    }
}
