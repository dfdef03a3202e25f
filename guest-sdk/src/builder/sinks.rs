//! Where a stream ends: sinks that publish each committed batch once.

use super::graph::{Stream, Topology};
use crate::topology::{OperationDef, SinkDef, SinkPayloadDef};

/// A sink publishing to NATS JetStream, for [`Stream::sink`]: each tuple of
/// every committed batch is published once to `subject`, which a stream
/// of the server `weir run --nats` names must take.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// let per_page = JetStreamSink::subject("page-counts");
/// let raw = JetStreamSink::subject("pages.raw").raw("page");
/// # let _ = (per_page, raw);
/// ```
///
/// The payload is a JSON object of the tuple's fields unless
/// [`JetStreamSink::raw`] names one field to publish as it is.
#[derive(Clone, Debug)]
pub struct JetStreamSink(SinkDef);

impl JetStreamSink {
    /// Publishes to `subject`, each tuple as a JSON object of its fields.
    pub fn subject(subject: &str) -> JetStreamSink {
        JetStreamSink(SinkDef::JetStream { subject: subject.to_owned(), payload: SinkPayloadDef::Json })
    }

    /// Publishes the value of `field` (a string or bytes) as the payload.
    pub fn raw(self, field: &str) -> JetStreamSink {
        let SinkDef::JetStream { subject, .. } = self.0;
        JetStreamSink(SinkDef::JetStream { subject, payload: SinkPayloadDef::Raw { field: field.to_owned() } })
    }
}

/// The end of a stream in a sink: it may be named, nothing follows it.
#[derive(Clone)]
pub struct SinkEnd {
    stream: Stream,
}

impl SinkEnd {
    /// Gives the sink the id `label`, used in logs, errors and message ids.
    pub fn name(self, label: &str) -> SinkEnd {
        SinkEnd { stream: self.stream.name(label) }
    }

    /// Finishes the topology.
    pub fn build(&self) -> Topology {
        self.stream.build()
    }
}

impl Stream {
    /// Ends this stream in `sink`: every committed batch's tuples are
    /// published exactly once, written with the batch's state in one
    /// commit. The stream must be of the commit phase: a state's
    /// [`TridentState::new_values_stream`](super::TridentState::new_values_stream),
    /// or after a `state_query`.
    pub fn sink(&self, sink: JetStreamSink) -> SinkEnd {
        SinkEnd { stream: self.then("sink", |_, _| OperationDef::Sink { sink: sink.0 }) }
    }
}
