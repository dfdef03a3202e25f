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
        let SinkDef::JetStream { subject, .. } = self.0 else { unreachable!("made by JetStreamSink::subject") };
        JetStreamSink(SinkDef::JetStream { subject, payload: SinkPayloadDef::Raw { field: field.to_owned() } })
    }
}

/// A sink publishing to a Kafka topic, for [`Stream::sink`]: each tuple of
/// every committed batch becomes one record of `topic` (which must exist),
/// spread over its partitions, with headers naming its batch's txid and
/// place so that a restarted host skips what was already written.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// let per_page = KafkaSink::topic("page-counts");
/// let raw = KafkaSink::topic("pages").raw("page");
/// # let _ = (per_page, raw);
/// ```
#[derive(Clone, Debug)]
pub struct KafkaSink(SinkDef);

impl KafkaSink {
    /// Writes to `topic`, each tuple as a JSON object of its fields.
    pub fn topic(topic: &str) -> KafkaSink {
        KafkaSink(SinkDef::Kafka { topic: topic.to_owned(), payload: SinkPayloadDef::Json })
    }

    /// Writes the value of `field` (a string or bytes) as the record's
    /// value.
    pub fn raw(self, field: &str) -> KafkaSink {
        let SinkDef::Kafka { topic, .. } = self.0 else { unreachable!("made by KafkaSink::topic") };
        KafkaSink(SinkDef::Kafka { topic, payload: SinkPayloadDef::Raw { field: field.to_owned() } })
    }
}

/// Somewhere a stream's committed output goes: [`JetStreamSink`] or
/// [`KafkaSink`].
pub trait Sink {
    /// The sink's definition.
    fn define(self) -> SinkDef;
}

impl Sink for JetStreamSink {
    fn define(self) -> SinkDef {
        self.0
    }
}

impl Sink for KafkaSink {
    fn define(self) -> SinkDef {
        self.0
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
    pub fn sink(&self, sink: impl Sink) -> SinkEnd {
        let sink = sink.define();
        SinkEnd { stream: self.then("sink", |_, _| OperationDef::Sink { sink }) }
    }
}
