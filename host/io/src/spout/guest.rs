//! The host side of a guest's spout: a batch spout, or a partitioned one
//! whose metadata (the partition list and each partition's metadata) the
//! host keeps as the batch's metadata.

use super::contract::{Emitted, Spout};
use anyhow::{Result, bail};
use std::sync::Arc;
use weir_plan::SpoutKind;
use weir_runtime::bindings::SpoutContext;
use weir_runtime::sandbox::OperatorSandbox;
use weir_runtime::{BatchError, Cause, Origin};
use weir_runtime::{CallError, Guest, LoadedComponent};
use weir_sdk::codec::{Batch, BatchWriter};
use weir_sdk::topology::GuestSpoutKind;
use weir_sdk::topology::SPOUT_ID;

/// A guest spout, called in an instance of its own, made afresh after a
/// trap (a trapped instance cannot be entered again).
pub struct GuestSpout {
    component: Arc<LoadedComponent>,
    sandbox: OperatorSandbox,
    guest: Option<Guest>,
    kind: GuestSpoutKind,
    topology: String,
    /// The name its logs are kept under (a deployment's name).
    logs_as: String,
    arity: usize,
    batch_size: u32,
}

/// One partition's entry in a batch's metadata.
#[derive(Clone, Debug, PartialEq)]
struct PartitionMeta {
    name: String,
    /// Whether the partition emitted tuples in this batch.
    emitted: bool,
    /// The partition's metadata as of this batch (none: not started).
    meta: Option<Vec<u8>>,
}

fn encode(partitions: &[PartitionMeta]) -> Vec<u8> {
    let mut out = (partitions.len() as u32).to_le_bytes().to_vec();
    for p in partitions {
        out.extend_from_slice(&(p.name.len() as u32).to_le_bytes());
        out.extend_from_slice(p.name.as_bytes());
        out.push(u8::from(p.emitted) | (u8::from(p.meta.is_some()) << 1));
        let meta = p.meta.as_deref().unwrap_or_default();
        out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        out.extend_from_slice(meta);
    }
    out
}

fn decode(mut bytes: &[u8]) -> Result<Vec<PartitionMeta>> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if bytes.len() < n {
            bail!("truncated partition metadata");
        }
        let (head, tail) = bytes.split_at(n);
        *bytes = tail;
        Ok(head)
    }
    fn len(bytes: &mut &[u8]) -> Result<usize> {
        Ok(u32::from_le_bytes(take(bytes, 4)?.try_into()?) as usize)
    }
    let count = len(&mut bytes)?;
    let mut partitions = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let name_len = len(&mut bytes)?;
        let name = String::from_utf8(take(&mut bytes, name_len)?.to_vec())?;
        let flags = take(&mut bytes, 1)?[0];
        let meta_len = len(&mut bytes)?;
        let meta = take(&mut bytes, meta_len)?.to_vec();
        partitions.push(PartitionMeta { name, emitted: flags & 1 == 1, meta: (flags & 2 == 2).then_some(meta) });
    }
    Ok(partitions)
}

/// A failed spout call, as an error that says it came from the spout and
/// how (`BatchError` with `Origin::Spout`).
fn failed(what: &str, error: &CallError) -> anyhow::Error {
    anyhow::Error::new(BatchError {
        origin: Origin::Spout(Cause::of(error)),
        message: format!("the spout's {what} failed: {error}"),
        ..BatchError::of_call(SPOUT_ID, error)
    })
}

impl GuestSpout {
    /// A spout of `kind` in `component`, emitting tuples of `arity` fields.
    pub fn new(
        component: Arc<LoadedComponent>,
        sandbox: OperatorSandbox,
        kind: GuestSpoutKind,
        topology: &str,
        arity: usize,
        batch_size: usize,
    ) -> GuestSpout {
        let (topology, logs_as) = (topology.to_owned(), topology.to_owned());
        GuestSpout { component, sandbox, guest: None, kind, topology, logs_as, arity, batch_size: batch_size as u32 }
    }

    /// This spout with its logs kept under `name` (a deployment's name)
    /// rather than its topology's.
    pub fn logs_as(self, name: &str) -> GuestSpout {
        GuestSpout { logs_as: name.to_owned(), ..self }
    }

    /// Calls the spout's instance (made first if needed); `what` names the
    /// call in errors.
    fn call<T>(&mut self, what: &str, call: impl FnOnce(&mut Guest) -> Result<T, CallError>) -> Result<T> {
        if self.guest.is_none() {
            let guest = self.component.instantiate(&self.logs_as, SPOUT_ID, &self.sandbox);
            self.guest = Some(guest.map_err(|e| failed("instantiation", &e))?);
        }
        let result = call(self.guest.as_mut().expect("instantiated above"));
        if let Err(CallError::Trap { .. }) = &result {
            // A trapped or abandoned instance cannot be entered again.
            self.guest = None;
        }
        result.map_err(|e| failed(what, &e))
    }

    fn ctx(&self, txid: u64, attempt: u32) -> SpoutContext {
        SpoutContext { topology: self.topology.clone(), txid, attempt, max_tuples: self.batch_size }
    }

    /// Checks a batch the guest emitted and copies its rows into `out`.
    fn append(&self, tuples: Vec<u8>, out: &mut BatchWriter) -> Result<()> {
        let batch =
            Batch::decode_owned(tuples).map_err(|e| anyhow::anyhow!("the spout emitted a malformed batch: {e}"))?;
        if batch.arity() != self.arity {
            bail!("the spout emitted tuples of {} values; it declares {} fields", batch.arity(), self.arity);
        }
        for row in batch.rows() {
            out.begin_row(0);
            for value in row.encoded_values() {
                out.push_encoded(value);
            }
        }
        Ok(())
    }

    fn emit_partitions(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        let ctx = self.ctx(txid, attempt);
        let before = previous.map(decode).transpose()?.unwrap_or_default();
        let names = self.call("partitions call", |g| g.spout_partitions(&ctx))?;
        let mut out = BatchWriter::new(self.arity);
        let mut partitions = Vec::with_capacity(names.len());
        for name in names {
            let previous = before.iter().find(|p| p.name == name).and_then(|p| p.meta.clone());
            let emitted = self.call("emit", |g| g.emit_partition(&ctx, &name, previous.as_deref()))?;
            match emitted {
                Some(batch) => {
                    self.append(batch.tuples, &mut out)?;
                    partitions.push(PartitionMeta { name, emitted: true, meta: Some(batch.meta) });
                }
                None => partitions.push(PartitionMeta { name, emitted: false, meta: previous }),
            }
        }
        if !partitions.iter().any(|p| p.emitted) {
            return Ok(None);
        }
        Ok(Some(Emitted { meta: encode(&partitions), batch: out.finish_batch() }))
    }
}

impl Spout for GuestSpout {
    fn kind(&self) -> SpoutKind {
        match self.kind {
            GuestSpoutKind::Batch | GuestSpoutKind::PartitionedTransactional => SpoutKind::Transactional,
            GuestSpoutKind::PartitionedOpaque => SpoutKind::Opaque,
        }
    }

    fn emit(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        if self.kind != GuestSpoutKind::Batch {
            return self.emit_partitions(txid, attempt, previous);
        }
        let ctx = self.ctx(txid, attempt);
        let Some(tuples) = self.call("emit", |g| g.emit_batch(&ctx))? else { return Ok(None) };
        let mut out = BatchWriter::new(self.arity);
        self.append(tuples, &mut out)?;
        Ok(Some(Emitted { meta: Vec::new(), batch: out.finish_batch() }))
    }

    fn replay(&mut self, txid: u64, attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        let ctx = self.ctx(txid, attempt);
        let mut out = BatchWriter::new(self.arity);
        if self.kind == GuestSpoutKind::Batch {
            match self.call("emit", |g| g.emit_batch(&ctx))? {
                Some(tuples) => self.append(tuples, &mut out)?,
                None => bail!("the batch spout emitted nothing for txid {txid} on replay, though it did before"),
            }
            return Ok(out.finish_batch());
        }
        for partition in decode(meta)?.into_iter().filter(|p| p.emitted) {
            let meta = partition.meta.unwrap_or_default();
            let tuples = self.call("re-emit", |g| g.reemit_partition(&ctx, &partition.name, &meta))?;
            self.append(tuples, &mut out)?;
        }
        Ok(out.finish_batch())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_metadata_round_trips() {
        let partitions = vec![
            PartitionMeta { name: "a".into(), emitted: true, meta: Some(vec![1, 2]) },
            PartitionMeta { name: "b".into(), emitted: false, meta: None },
            PartitionMeta { name: "c".into(), emitted: false, meta: Some(vec![]) },
        ];
        assert_eq!(decode(&encode(&partitions)).unwrap(), partitions);
        assert!(decode(&[1, 0, 0, 0, 9]).is_err());
    }
}
