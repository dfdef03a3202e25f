//! The builder users write topologies with, in Trident's style, next to the
//! operators they call:
//!
//! ```
//! use weir_sdk::prelude::*;
//!
//! struct Split;
//! impl Function for Split {
//!     fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
//!         for word in tuple.str(0)?.split_whitespace() {
//!             out.emit([word])?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let topology = Topology::new("word-count");
//! let counts = topology
//!     .new_stream(FileLines::new("sentence"))
//!     .each(["sentence"], Split, ["word"])
//!     .name("split")
//!     .group_by(["word"])
//!     .persistent_aggregate(State::transactional("counts"), Count, ["count"]);
//! topology
//!     .new_query_stream("words")
//!     .each(["args"], Split, ["word"])
//!     .group_by(["word"])
//!     .state_query(&counts, ["word"], MapGet, ["count"])
//!     .aggregate(["count"], Sum, ["sum"]);
//! assert_eq!(topology.build().definition().nodes.len(), 8);
//! ```
//!
//! Streams are handles: using one twice branches it.

mod aggregates;
mod functions;
mod graph;
mod queries;
mod sinks;
mod spouts;
mod state;
mod streams;
#[cfg(test)]
mod tests;
mod windows;

pub use aggregates::{ChainedAggregate, General, IntoAggregator, Reducer};
pub use graph::{GroupedStream, Stream, Topology, TopologyBuilder, TridentState, describe};
pub use queries::IntoQuery;
pub use sinks::{JetStreamSink, KafkaSink, Sink, SinkEnd};
pub use spouts::{DirectoryLines, FileLines, Generator, GuestSpout, JetStream, Kafka, Spout};
pub use state::State;
pub use windows::Window;
