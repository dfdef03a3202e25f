//! The changelog of a topology placed whole on one host: one subject of
//! the topology's changelog stream, holding, in order, each commit group's
//! effect (a delta), now and then the whole copy (a snapshot), and the
//! fences of the hosts that took the topology over.
//!
//! Every message is published with the subject's last sequence as its
//! owner knows it (`Nats-Expected-Last-Subject-Sequence`): a host taking
//! the topology over first publishes a fence, unconditionally, so that
//! whatever a former owner (paused past its lease, say) publishes after it
//! is refused by the server, and that owner stops. What the subject holds
//! up to the fence is what was committed: a group whose chunks did not all
//! come (its owner died publishing it) never returned to its engine, so
//! its output was never published, and the rebuild passes over it.
//!
//! A snapshot is followed by a purge of everything before it on the
//! subject, so that a rebuild reads at most one snapshot and the deltas
//! after it.

use super::changelog::Changelog;
use super::wire::{self, ChunkHead, Reader};
use anyhow::{Context, Result, anyhow, bail};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};
use futures_util::StreamExt;
use std::time::Duration;
use weir_state::BatchRecord;
use weir_state::restore::Image;
use weir_state::rules::Stored;

/// What one message of the log is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// What one commit group changed.
    Delta,
    /// The whole copy as of a txid.
    Snapshot,
    /// A host at an epoch took the topology over.
    Fence,
}

/// One change to a topology's copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A state's key as the commit left it (`None`: removed).
    Put { state: String, key: Vec<u8>, value: Option<Vec<u8>> },
    /// A state's keys from `from` up to (not including) `to` removed.
    Range { state: String, from: Vec<u8>, to: Vec<u8> },
    /// A record of another room's table (`None`: removed).
    Other { table: String, key: Vec<u8>, value: Option<Vec<u8>> },
    /// Txid `txid` is the last committed, with this batch record.
    Committed { txid: u64, record: Vec<u8> },
}

/// One message: chunk `index` of `count` of what the owner at `epoch`
/// wrote as of `txid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub epoch: u64,
    pub txid: u64,
    pub index: u32,
    pub count: u32,
    pub ops: Vec<Op>,
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_option(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => {
            out.push(1);
            put_bytes(out, bytes);
        }
        None => out.push(0),
    }
}

impl Op {
    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Op::Put { state, key, value } => {
                out.push(0);
                put_bytes(out, state.as_bytes());
                put_bytes(out, key);
                put_option(out, value.as_deref());
            }
            Op::Range { state, from, to } => {
                out.push(1);
                put_bytes(out, state.as_bytes());
                put_bytes(out, from);
                put_bytes(out, to);
            }
            Op::Other { table, key, value } => {
                out.push(2);
                put_bytes(out, table.as_bytes());
                put_bytes(out, key);
                put_option(out, value.as_deref());
            }
            Op::Committed { txid, record } => {
                out.push(3);
                out.extend_from_slice(&txid.to_be_bytes());
                put_bytes(out, record);
            }
        }
    }

    fn len(&self) -> usize {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out.len()
    }
}

/// A byte string after its length, owned.
fn read_owned(reader: &mut Reader) -> Option<Vec<u8>> {
    Some(reader.bytes()?.to_vec())
}

fn read_string(reader: &mut Reader) -> Option<String> {
    String::from_utf8(read_owned(reader)?).ok()
}

/// A 0 for `None`, or a 1 and the bytes.
fn read_option(reader: &mut Reader) -> Option<Option<Vec<u8>>> {
    match reader.u8()? {
        0 => Some(None),
        1 => Some(Some(read_owned(reader)?)),
        _ => None,
    }
}

/// An op's tag and its fields (see [`Op::encode_into`]).
fn read_op(r: &mut Reader) -> Option<Op> {
    Some(match r.u8()? {
        0 => Op::Put { state: read_string(r)?, key: read_owned(r)?, value: read_option(r)? },
        1 => Op::Range { state: read_string(r)?, from: read_owned(r)?, to: read_owned(r)? },
        2 => Op::Other { table: read_string(r)?, key: read_owned(r)?, value: read_option(r)? },
        3 => Op::Committed { txid: r.u64()?, record: read_owned(r)? },
        _ => return None,
    })
}

impl Entry {
    /// The message's bytes: kind (1 byte), epoch and txid (8 each), index
    /// and count (4 each), then each op: a tag and its fields, every byte
    /// string after its length (4).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![match self.kind {
            Kind::Delta => 0,
            Kind::Snapshot => 1,
            Kind::Fence => 2,
        }];
        ChunkHead { epoch: self.epoch, txid: self.txid, index: self.index, count: self.count }.encode_into(&mut out);
        for op in &self.ops {
            op.encode_into(&mut out);
        }
        out
    }

    /// A message read back from the log; anything else is an error.
    pub fn decode(bytes: &[u8]) -> Result<Entry> {
        let malformed = || anyhow!("a message of {} bytes of a whole topology's changelog is malformed", bytes.len());
        // The kind byte as `encode` writes it.
        let kind = |byte: u8| [Kind::Delta, Kind::Snapshot, Kind::Fence].get(usize::from(byte)).copied();
        let (kind, ChunkHead { epoch, txid, index, count }, ops) =
            wire::decode_chunk(bytes, kind, read_op).ok_or_else(malformed)?;
        Ok(Entry { kind, epoch, txid, index, count, ops })
    }
}

/// `ops` cut into chunks of at most [`wire::CHUNK_BYTES`] (one op past
/// that alone in its chunk); at least one chunk, empty for none.
fn chunks(ops: Vec<Op>) -> Vec<Vec<Op>> {
    let mut out = vec![Vec::new()];
    let mut bytes = 0;
    for op in ops {
        let len = op.len();
        let last = out.last_mut().expect("a chunk");
        if bytes + len > wire::CHUNK_BYTES && !last.is_empty() {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += len;
        out.last_mut().expect("a chunk").push(op);
    }
    out
}

/// Applies `op` to `image`.
pub fn apply(image: &mut Image, op: Op) -> Result<()> {
    match op {
        Op::Put { state, key, value: Some(value) } => {
            let stored = Stored::decode(&value).with_context(|| format!("a record of state {state}"))?;
            image.states.entry(state).or_default().insert(key, stored);
        }
        Op::Put { state, key, value: None } => {
            if let Some(values) = image.states.get_mut(&state) {
                values.remove(&key);
            }
        }
        Op::Range { state, from, to } => {
            if let Some(values) = image.states.get_mut(&state)
                && from < to
            {
                let doomed: Vec<Vec<u8>> = values.range(from..to).map(|(k, _)| k.clone()).collect();
                for key in doomed {
                    values.remove(&key);
                }
            }
        }
        Op::Other { table, key, value: Some(value) } => {
            image.others.entry(table).or_default().insert(key, value);
        }
        Op::Other { table, key, value: None } => {
            if let Some(entries) = image.others.get_mut(&table) {
                entries.remove(&key);
            }
        }
        Op::Committed { txid, record } => {
            image.last_committed = txid;
            image.record = Some(BatchRecord::decode(&record).context("a committed batch's record")?);
        }
    }
    Ok(())
}

/// `image` as ops that build it from nothing.
pub fn ops_of(image: &Image) -> Vec<Op> {
    let mut ops = Vec::new();
    for (state, values) in &image.states {
        for (key, stored) in values {
            ops.push(Op::Put { state: state.clone(), key: key.clone(), value: Some(stored.encode()) });
        }
    }
    for (table, entries) in &image.others {
        for (key, value) in entries {
            ops.push(Op::Other { table: table.clone(), key: key.clone(), value: Some(value.clone()) });
        }
    }
    if let Some(record) = &image.record {
        ops.push(Op::Committed { txid: image.last_committed, record: record.encode() });
    }
    ops
}

/// The copy that `entries` (in stream order) hold: the latest complete
/// snapshot, then every complete delta after it, in order.
pub fn fold(entries: Vec<(u64, Entry)>) -> Result<Image> {
    // Runs of chunks: an owner publishes a group's chunks one after another.
    let mut groups: Vec<Vec<Entry>> = Vec::new();
    for (_, entry) in entries {
        if entry.kind == Kind::Fence {
            groups.push(vec![entry]);
            continue;
        }
        let follows = groups.last().and_then(|g| g.last()).is_some_and(|last| {
            last.kind == entry.kind
                && last.epoch == entry.epoch
                && last.txid == entry.txid
                && last.count == entry.count
                && last.index + 1 == entry.index
        });
        match groups.last_mut() {
            Some(group) if follows => group.push(entry),
            _ => groups.push(vec![entry]),
        }
    }
    let complete = |g: &Vec<Entry>| g.first().is_some_and(|f| f.index == 0 && g.len() as u32 == f.count);
    let base = groups.iter().rposition(|g| g[0].kind == Kind::Snapshot && complete(g));
    let mut image = Image::default();
    for group in groups.into_iter().skip(base.unwrap_or(0)) {
        if group[0].kind == Kind::Fence || !complete(&group) {
            continue;
        }
        for entry in group {
            for op in entry.ops {
                apply(&mut image, op)?;
            }
        }
    }
    Ok(image)
}

/// Longest a publish or a read of the log may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The log of one whole-placed topology, as its owner at `epoch` writes it.
pub struct WholeLog {
    js: jetstream::Context,
    stream: String,
    subject: String,
    epoch: u64,
    /// The subject's last sequence as this owner knows it: its next
    /// message is refused if another came since.
    last: u64,
}

impl WholeLog {
    /// The log of topology `name` of cluster `cluster`, its stream made
    /// when missing, as the owner at `epoch` writes it; not fenced yet.
    pub async fn open(js: &jetstream::Context, cluster: &str, name: &str, epoch: u64) -> Result<WholeLog> {
        let changelog = Changelog::open(js, cluster, name).await?;
        Ok(WholeLog {
            js: js.clone(),
            stream: changelog.stream().to_owned(),
            subject: changelog.whole_subject(),
            epoch,
            last: 0,
        })
    }

    /// Fences the log at this owner's epoch and reads it back: the copy as
    /// committed. From here on a former owner's publish is refused.
    pub async fn take_over(&mut self) -> Result<Image> {
        let doing = || format!("taking over changelog {} at epoch {}", self.stream, self.epoch);
        let fence = Entry { kind: Kind::Fence, epoch: self.epoch, txid: 0, index: 0, count: 1, ops: Vec::new() };
        let ack = tokio::time::timeout(TIMEOUT, async {
            self.js.publish(self.subject.clone(), fence.encode().into()).await?.await.map_err(anyhow::Error::from)
        })
        .await
        .map_err(|_| anyhow!("no answer within {TIMEOUT:?}"))
        .and_then(|r| r)
        .with_context(doing)?;
        self.last = ack.sequence;
        let entries = tokio::time::timeout(TIMEOUT, self.read(ack.sequence))
            .await
            .map_err(|_| anyhow!("the log was not read within {TIMEOUT:?}"))
            .and_then(|r| r)
            .with_context(doing)?;
        fold(entries).with_context(doing)
    }

    /// Every message of the log up to sequence `until`, in order.
    async fn read(&self, until: u64) -> Result<Vec<(u64, Entry)>> {
        let stream = self.js.get_stream(&self.stream).await?;
        let config = pull::Config {
            filter_subject: self.subject.clone(),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            memory_storage: true,
            ..Default::default()
        };
        let consumer = stream.create_consumer(config).await?;
        let mut entries = Vec::new();
        let mut done = false;
        while !done {
            let mut batch = consumer.fetch().max_messages(1000).expires(Duration::from_secs(2)).messages().await?;
            let mut got = 0;
            while let Some(message) = batch.next().await {
                let message = message.map_err(|e| anyhow!("{e}"))?;
                let sequence = message.info().map_err(|e| anyhow!("{e}"))?.stream_sequence;
                got += 1;
                if sequence > until {
                    done = true;
                    break;
                }
                entries.push((sequence, Entry::decode(&message.payload)?));
                done |= sequence == until;
            }
            if got == 0 && !done {
                bail!("the stream stopped answering before sequence {until}");
            }
        }
        let _ = stream.delete_consumer(&consumer.cached_info().name).await;
        Ok(entries)
    }

    /// Publishes `ops` as `kind` as of `txid`, chunk after chunk, each only
    /// if nothing came on the subject since this owner's last; returns the
    /// first chunk's sequence once the server has stored every one.
    async fn put(&mut self, kind: Kind, txid: u64, ops: Vec<Op>) -> Result<u64> {
        let pieces = chunks(ops);
        let count = pieces.len() as u32;
        let mut first = 0;
        for (index, ops) in pieces.into_iter().enumerate() {
            let entry = Entry { kind, epoch: self.epoch, txid, index: index as u32, count, ops };
            let message =
                PublishMessage::build().payload(entry.encode().into()).expected_last_subject_sequence(self.last);
            let ack = tokio::time::timeout(TIMEOUT, async {
                self.js.send_publish(self.subject.clone(), message).await?.await.map_err(anyhow::Error::from)
            })
            .await
            .map_err(|_| anyhow!("no answer within {TIMEOUT:?}"))
            .and_then(|r| r)
            .with_context(|| {
                format!(
                    "publishing txid {txid} to changelog {} at epoch {} (after sequence {}): another host may have \
                     taken the topology over",
                    self.stream, self.epoch, self.last
                )
            })?;
            self.last = ack.sequence;
            if index == 0 {
                first = ack.sequence;
            }
        }
        Ok(first)
    }

    /// Publishes one commit group's effect; returns once it is stored.
    pub async fn delta(&mut self, txid: u64, ops: Vec<Op>) -> Result<()> {
        self.put(Kind::Delta, txid, ops).await.map(|_| ())
    }

    /// Publishes `image` whole as of `txid` and purges what came before it.
    pub async fn snapshot(&mut self, txid: u64, image: &Image) -> Result<()> {
        let first = self.put(Kind::Snapshot, txid, ops_of(image)).await?;
        let stream = self.js.get_stream(&self.stream).await.context("the changelog stream")?;
        // A fence since means the topology is no longer this host's: its
        // new owner read the log already; nothing is purged.
        match stream.get_last_raw_message_by_subject(&self.subject).await {
            Ok(last) if last.sequence == self.last => {}
            Ok(_) => bail!("changelog {}: another host took the topology over", self.stream),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {}
            Err(e) => return Err(e.into()),
        }
        stream
            .purge()
            .filter(self.subject.clone())
            .sequence(first)
            .await
            .with_context(|| format!("purging changelog {} before txid {txid}", self.stream))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::codec::Value;

    fn put(key: &str, n: i64) -> Op {
        let stored = Stored::Transactional { txid: 1, value: Value::I64(n) };
        Op::Put { state: "s".into(), key: key.as_bytes().to_vec(), value: Some(stored.encode()) }
    }

    fn committed(txid: u64) -> Op {
        Op::Committed { txid, record: BatchRecord { attempt: 0, time_ms: 0, spout: vec![txid as u8] }.encode() }
    }

    fn entry(kind: Kind, txid: u64, index: u32, count: u32, ops: Vec<Op>) -> Entry {
        Entry { kind, epoch: 1, txid, index, count, ops }
    }

    #[test]
    fn every_op_reads_back_as_written_and_a_hostile_message_is_an_error() {
        let ops = vec![
            put("a", 1),
            Op::Put { state: "s".into(), key: b"b".to_vec(), value: None },
            Op::Range { state: "s".into(), from: b"c".to_vec(), to: b"d".to_vec() },
            Op::Other { table: "outbox".into(), key: b"1".to_vec(), value: Some(b"x".to_vec()) },
            Op::Other { table: "outbox".into(), key: b"2".to_vec(), value: None },
            committed(7),
        ];
        let written = entry(Kind::Delta, 7, 0, 1, ops);
        let bytes = written.encode();
        assert_eq!(Entry::decode(&bytes).unwrap(), written);
        // Cut inside the header or inside an op: an error, never a panic.
        for cut in (0..25).chain(26..30) {
            assert!(Entry::decode(&bytes[..cut]).is_err(), "{cut}");
        }
        let mut bad = bytes.clone();
        bad[25] = 9;
        assert!(Entry::decode(&bad).is_err());
    }

    #[test]
    fn the_copy_is_the_last_complete_snapshot_and_the_complete_deltas_after_it() {
        let range = Op::Range { state: "s".into(), from: b"a".to_vec(), to: b"b".to_vec() };
        let entries = vec![
            entry(Kind::Delta, 1, 0, 1, vec![put("old", 1), committed(1)]),
            entry(Kind::Snapshot, 2, 0, 2, vec![put("a", 2)]),
            entry(Kind::Snapshot, 2, 1, 2, vec![put("b", 2), committed(2)]),
            entry(Kind::Delta, 3, 0, 1, vec![range, put("c", 3), committed(3)]),
            // Its owner died publishing it: one chunk of two.
            entry(Kind::Delta, 4, 0, 2, vec![put("lost", 4), committed(4)]),
            entry(Kind::Fence, 0, 0, 1, vec![]),
            entry(Kind::Delta, 4, 0, 1, vec![put("d", 4), committed(4)]),
            // A snapshot cut short does not count.
            entry(Kind::Snapshot, 4, 0, 3, vec![put("z", 4)]),
        ];
        let image = fold(entries.into_iter().enumerate().map(|(at, e)| (at as u64 + 1, e)).collect()).unwrap();
        let keys: Vec<&[u8]> = image.states["s"].keys().map(Vec::as_slice).collect();
        assert_eq!(keys, [b"b".as_slice(), b"c", b"d"]);
        assert_eq!(image.last_committed, 4);
        assert_eq!(image.record.unwrap().spout, vec![4]);
    }

    #[test]
    fn big_groups_are_cut_into_chunks_that_fold_back() {
        let ops: Vec<Op> = (0..3000).map(|n| put(&format!("{n:0>400}"), n)).collect();
        let pieces = chunks(ops.clone());
        assert!(pieces.len() > 1);
        let count = pieces.len() as u32;
        let entries = pieces
            .into_iter()
            .enumerate()
            .map(|(at, ops)| (at as u64, entry(Kind::Delta, 1, at as u32, count, ops)))
            .collect();
        assert_eq!(fold(entries).unwrap().states["s"].len(), 3000);
    }
}
