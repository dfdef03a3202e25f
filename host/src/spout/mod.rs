//! Spouts: where a topology's batches come from, and what each kind promises
//! when a batch is replayed (Trident's spout kinds).

mod directory;
mod file_lines;
mod generator;
mod guest;

pub use directory::DirectoryLines;
pub use file_lines::{FileLines, InputChanged, LineRange, input_changed};
pub use generator::Generator;
pub use guest::GuestSpout;

use crate::runtime::LoadedComponent;
use crate::sandbox::OperatorSandbox;
use std::sync::Arc;
use weir_sdk::topology::GuestSpoutKind;

use anyhow::{Context, Result, bail};
use std::path::Path;
use weir_sdk::codec::Batch;
use weir_sdk::topology::SpoutDef;

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
        }
    }
}

/// A batch a spout emitted, and the metadata to find it again.
pub struct Emitted {
    /// Spout metadata of the batch (offsets, ranges), opaque to the host.
    pub meta: Vec<u8>,
    /// The batch's tuples.
    pub batch: Batch<'static>,
}

/// The host side of a spout.
pub trait Spout: Send {
    /// What the spout promises on replay.
    fn kind(&self) -> SpoutKind;

    /// Emits batch `txid`, the one after the batch whose metadata is
    /// `previous` (`None`: the first batch). `None` when nothing is left now.
    fn emit(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>>;

    /// For transactional spouts: exactly the batch recorded with `meta`.
    fn replay(&mut self, txid: u64, attempt: u32, meta: &[u8]) -> Result<Batch<'static>>;

    /// How far the committed batches are behind the source, where the spout
    /// knows: bytes of input for the file spouts, integers for the
    /// generator. `committed` is the last committed batch's metadata.
    fn lag(&mut self, committed: Option<&[u8]>) -> Option<u64> {
        let _ = committed;
        None
    }
}

/// Where a guest spout runs: the component, and the spout's sandbox.
pub type GuestCode = Option<(Arc<LoadedComponent>, OperatorSandbox)>;

/// The spout a topology's definition names, reading `input` where it needs
/// one, in batches of `batch_size` tuples; a guest spout runs in `guest`.
pub fn open(
    def: &SpoutDef,
    topology: &str,
    input: Option<&Path>,
    batch_size: usize,
    guest: GuestCode,
) -> Result<Box<dyn Spout>> {
    let input = |what: &str| {
        input.with_context(|| format!("topology {topology} reads the lines of {what}: give it with --input"))
    };
    Ok(match def {
        SpoutDef::FileLines { .. } => Box::new(FileLines::open(input("a file")?, batch_size)?),
        SpoutDef::DirectoryLines { .. } => Box::new(DirectoryLines::open(input("a directory's files")?, batch_size)?),
        SpoutDef::Generator { count, .. } => Box::new(Generator::new(*count, batch_size)),
        SpoutDef::Guest { promise, fields } => {
            let (component, sandbox) =
                guest.with_context(|| format!("topology {topology}: a guest spout needs its component"))?;
            Box::new(GuestSpout::new(component, sandbox, *promise, topology, fields.len(), batch_size))
        }
    })
}

/// Checks that `input` is what `def` needs, before anything else runs.
pub fn check_input(def: &SpoutDef, topology: &str, input: Option<&Path>) -> Result<()> {
    match (def, input) {
        (SpoutDef::Generator { .. } | SpoutDef::Guest { .. }, Some(path)) => {
            bail!("topology {topology} makes its own input: --input {} is not used", path.display())
        }
        (SpoutDef::Generator { .. } | SpoutDef::Guest { .. }, None) => Ok(()),
        _ => open(def, topology, input, 1, None).map(drop),
    }
}
