//! Where a stream starts: the [`Spout`] trait, the host's built-in spouts
//! and the guest's own.

use super::graph::{SpoutCode, Stream, Topology, TopologyBuilder, names};
use crate::operator::{BatchSpout, PartitionedSpout};
use crate::topology::{
    GuestSpoutKind, JetStreamDef, JetStreamKind, KafkaDef, OperationDef, PayloadDef, SPOUT_ID, SpoutDef,
};

/// Something a stream can start from.
pub trait Spout {
    /// The spout's definition, registering any guest code with `topology`.
    fn define(self, topology: &mut Topology) -> SpoutDef;
}

/// The host's built-in spout over the lines of the run's input file.
#[derive(Clone, Debug)]
pub struct FileLines {
    field: String,
}

impl FileLines {
    /// A spout emitting each line of the input into `field`.
    pub fn new(field: &str) -> FileLines {
        FileLines { field: field.to_owned() }
    }
}

impl Spout for FileLines {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::FileLines { field: self.field }
    }
}

/// The host's built-in spout over the lines of the files of the run's input
/// directory, in name order.
#[derive(Clone, Debug)]
pub struct DirectoryLines {
    field: String,
}

impl DirectoryLines {
    /// A spout emitting each line into `field`.
    pub fn new(field: &str) -> DirectoryLines {
        DirectoryLines { field: field.to_owned() }
    }
}

impl Spout for DirectoryLines {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::DirectoryLines { field: self.field }
    }
}

/// The host's built-in spout emitting the integers 0 to `count` - 1.
#[derive(Clone, Debug)]
pub struct Generator {
    field: String,
    count: u64,
}

impl Generator {
    /// A spout emitting `count` integers into `field`.
    pub fn new(field: &str, count: u64) -> Generator {
        Generator { field: field.to_owned(), count }
    }
}

impl Spout for Generator {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::Generator { field: self.field, count: self.count }
    }
}

/// The host's built-in spout over a NATS JetStream stream, each subject a
/// partition, read by the host from the server `weir run --nats` names:
///
/// ```
/// use weir_sdk::prelude::*;
///
/// let clicks = JetStream::transactional("clicks", ["clicks.*"])
///     .json(["user", "url"])
///     .timestamp_field("at")
///     .max_per_partition(500);
/// # let _ = clicks;
/// ```
///
/// The payload goes into one bytes field named `payload` unless
/// [`JetStream::string`], [`JetStream::bytes`] or [`JetStream::json`] says
/// otherwise.
#[derive(Clone, Debug)]
pub struct JetStream(JetStreamDef);

impl JetStream {
    /// A transactional spout: a replay reads exactly the sequence range each
    /// partition had in the batch (the topology halts if the stream no
    /// longer holds it). `subjects` are the stream's subjects to read, or
    /// wildcards matching them.
    pub fn transactional<const N: usize>(stream: &str, subjects: [&str; N]) -> JetStream {
        JetStream::of_kind(JetStreamKind::Transactional, stream, subjects)
    }

    /// An opaque spout: a replay reads afresh from each partition's next
    /// sequence as of the last commit.
    pub fn opaque<const N: usize>(stream: &str, subjects: [&str; N]) -> JetStream {
        JetStream::of_kind(JetStreamKind::Opaque, stream, subjects)
    }

    fn of_kind<const N: usize>(promise: JetStreamKind, stream: &str, subjects: [&str; N]) -> JetStream {
        JetStream(JetStreamDef {
            promise,
            stream: stream.to_owned(),
            subjects: names(subjects),
            payload: PayloadDef::Bytes { field: "payload".to_owned() },
            subject_field: None,
            sequence_field: None,
            timestamp_field: None,
            max_per_partition: None,
        })
    }

    /// The payload as bytes in `field`.
    pub fn bytes(mut self, field: &str) -> JetStream {
        self.0.payload = PayloadDef::Bytes { field: field.to_owned() };
        self
    }

    /// The payload as a UTF-8 string in `field`.
    pub fn string(mut self, field: &str) -> JetStream {
        self.0.payload = PayloadDef::String { field: field.to_owned() };
        self
    }

    /// The payload is a JSON object: each of `fields` takes its member of
    /// that name.
    pub fn json<const N: usize>(mut self, fields: [&str; N]) -> JetStream {
        self.0.payload = PayloadDef::Json { fields: names(fields) };
        self
    }

    /// Also emits the message's subject in `field`.
    pub fn subject_field(mut self, field: &str) -> JetStream {
        self.0.subject_field = Some(field.to_owned());
        self
    }

    /// Also emits the message's stream sequence in `field`.
    pub fn sequence_field(mut self, field: &str) -> JetStream {
        self.0.sequence_field = Some(field.to_owned());
        self
    }

    /// Also emits the time the server stored the message (milliseconds
    /// since the Unix epoch) in `field`.
    pub fn timestamp_field(mut self, field: &str) -> JetStream {
        self.0.timestamp_field = Some(field.to_owned());
        self
    }

    /// Takes at most `messages` from each partition per batch (the run's
    /// batch size when unset).
    pub fn max_per_partition(mut self, messages: u64) -> JetStream {
        self.0.max_per_partition = Some(messages);
        self
    }
}

impl Spout for JetStream {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::JetStream(self.0)
    }
}

/// The host's built-in spout over a Kafka topic, each of its partitions a
/// partition of the spout, read by the host from the brokers `weir run
/// --kafka` names:
///
/// ```
/// use weir_sdk::prelude::*;
///
/// let clicks = Kafka::transactional("clicks")
///     .json(["user", "url"])
///     .key_field("key")
///     .timestamp_field("at")
///     .max_per_partition(500);
/// let some = Kafka::opaque("clicks").partitions([0, 2]).string("line");
/// # let _ = (clicks, some);
/// ```
///
/// The value goes into one bytes field named `value` unless
/// [`Kafka::string`], [`Kafka::bytes`] or [`Kafka::json`] says otherwise.
/// No consumer group is used: the offsets live in Weir's store.
#[derive(Clone, Debug)]
pub struct Kafka(KafkaDef);

impl Kafka {
    /// A transactional spout: a replay reads exactly the offset range each
    /// partition had in the batch (the topology halts if the topic no
    /// longer holds it).
    pub fn transactional(topic: &str) -> Kafka {
        Kafka::of_kind(JetStreamKind::Transactional, topic)
    }

    /// An opaque spout: a replay reads afresh from each partition's next
    /// offset as of the last commit.
    pub fn opaque(topic: &str) -> Kafka {
        Kafka::of_kind(JetStreamKind::Opaque, topic)
    }

    fn of_kind(promise: JetStreamKind, topic: &str) -> Kafka {
        Kafka(KafkaDef {
            promise,
            topic: topic.to_owned(),
            partitions: None,
            value: PayloadDef::Bytes { field: "value".to_owned() },
            key_field: None,
            partition_field: None,
            offset_field: None,
            timestamp_field: None,
            headers_field: None,
            max_per_partition: None,
        })
    }

    /// Reads only these partitions of the topic (all of them, those added
    /// later included, when not called).
    pub fn partitions<const N: usize>(mut self, partitions: [u32; N]) -> Kafka {
        self.0.partitions = Some(partitions.to_vec());
        self
    }

    /// The value as bytes in `field`.
    pub fn bytes(mut self, field: &str) -> Kafka {
        self.0.value = PayloadDef::Bytes { field: field.to_owned() };
        self
    }

    /// The value as a UTF-8 string in `field`.
    pub fn string(mut self, field: &str) -> Kafka {
        self.0.value = PayloadDef::String { field: field.to_owned() };
        self
    }

    /// The value is a JSON object: each of `fields` takes its member of
    /// that name.
    pub fn json<const N: usize>(mut self, fields: [&str; N]) -> Kafka {
        self.0.value = PayloadDef::Json { fields: names(fields) };
        self
    }

    /// Also emits the record's key (bytes, null without one) in `field`.
    pub fn key_field(mut self, field: &str) -> Kafka {
        self.0.key_field = Some(field.to_owned());
        self
    }

    /// Also emits the record's partition in `field`.
    pub fn partition_field(mut self, field: &str) -> Kafka {
        self.0.partition_field = Some(field.to_owned());
        self
    }

    /// Also emits the record's offset in `field`.
    pub fn offset_field(mut self, field: &str) -> Kafka {
        self.0.offset_field = Some(field.to_owned());
        self
    }

    /// Also emits the record's timestamp (milliseconds since the Unix
    /// epoch) in `field`.
    pub fn timestamp_field(mut self, field: &str) -> Kafka {
        self.0.timestamp_field = Some(field.to_owned());
        self
    }

    /// Also emits the record's headers, a JSON object of strings, in
    /// `field`.
    pub fn headers_field(mut self, field: &str) -> Kafka {
        self.0.headers_field = Some(field.to_owned());
        self
    }

    /// Takes at most `records` from each partition per batch (the run's
    /// batch size when unset).
    pub fn max_per_partition(mut self, records: u64) -> Kafka {
        self.0.max_per_partition = Some(records);
        self
    }
}

impl Spout for Kafka {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::Kafka(self.0)
    }
}

/// A guest spout for [`TopologyBuilder::new_stream`]: a [`BatchSpout`] or a
/// [`PartitionedSpout`], declared with the fields of its tuples.
pub struct GuestSpout {
    kind: GuestSpoutKind,
    fields: Vec<String>,
    code: SpoutCode,
}

impl GuestSpout {
    /// A batch spout emitting tuples of `fields`.
    pub fn batch<const N: usize>(spout: impl BatchSpout, fields: [&str; N]) -> GuestSpout {
        GuestSpout { kind: GuestSpoutKind::Batch, fields: names(fields), code: SpoutCode::Batch(Box::new(spout)) }
    }

    /// A partitioned transactional spout emitting tuples of `fields`.
    pub fn partitioned_transactional<const N: usize>(spout: impl PartitionedSpout, fields: [&str; N]) -> GuestSpout {
        let code = SpoutCode::Partitioned(Box::new(spout));
        GuestSpout { kind: GuestSpoutKind::PartitionedTransactional, fields: names(fields), code }
    }

    /// A partitioned opaque spout emitting tuples of `fields`.
    pub fn partitioned_opaque<const N: usize>(spout: impl PartitionedSpout, fields: [&str; N]) -> GuestSpout {
        let code = SpoutCode::Partitioned(Box::new(spout));
        GuestSpout { kind: GuestSpoutKind::PartitionedOpaque, fields: names(fields), code }
    }
}

impl Spout for GuestSpout {
    fn define(self, topology: &mut Topology) -> SpoutDef {
        topology.spout = Some(self.code);
        SpoutDef::Guest { promise: self.kind, fields: self.fields }
    }
}

impl TopologyBuilder {
    /// A stream from `spout` (one data spout per topology).
    pub fn new_stream(&self, spout: impl Spout) -> Stream {
        let spout = spout.define(&mut self.topology.borrow_mut());
        self.root(SPOUT_ID.to_owned(), OperationDef::Spout { spout })
    }
}
