//! What a declared spout promises on replay: Trident's three kinds.

use weir_sdk::topology::{GuestSpoutKind, JetStreamDef, JetStreamKind, KafkaDef, SpoutDef};

/// What a spout promises when a batch is replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoutKind {
    /// A replay of txid n emits exactly the same tuples. The host records
    /// each batch's metadata before processing it and replays from it.
    Transactional,
    /// Each tuple is committed in exactly one batch, but a replay of txid n
    /// may hold different tuples. The host stores the metadata at commit and
    /// emits a replay afresh from the last committed metadata.
    Opaque,
    /// No promise: a replay may lose or repeat tuples.
    NonTransactional,
}

impl SpoutKind {
    /// The kind a spout definition declares.
    pub fn of(def: &SpoutDef) -> SpoutKind {
        match def {
            SpoutDef::FileLines { .. } | SpoutDef::DirectoryLines { .. } | SpoutDef::Generator { .. } => {
                SpoutKind::Transactional
            }
            SpoutDef::Guest { promise: GuestSpoutKind::Batch | GuestSpoutKind::PartitionedTransactional, .. } => {
                SpoutKind::Transactional
            }
            SpoutDef::Guest { promise: GuestSpoutKind::PartitionedOpaque, .. } => SpoutKind::Opaque,
            SpoutDef::JetStream(JetStreamDef { promise, .. }) | SpoutDef::Kafka(KafkaDef { promise, .. }) => {
                match promise {
                    JetStreamKind::Transactional => SpoutKind::Transactional,
                    JetStreamKind::Opaque => SpoutKind::Opaque,
                }
            }
        }
    }
}
