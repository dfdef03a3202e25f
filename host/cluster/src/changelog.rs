//! A topology's state changelog in JetStream: the copy of every slot's
//! state that outlives the host that owns it. One stream per topology; per
//! state and slot, a log of messages and a fence.
//!
//! A slot's owner publishes each commit's writes to the slot as one delta
//! (in chunks of at most [`wire::CHUNK_BYTES`]), stamped with the owner's
//! assignment epoch, and waits for every acknowledgement before it
//! acknowledges the commit. Every few txids (`--snapshot-every`) it publishes the
//! whole slot as a snapshot and purges the slot's log before it, so that a
//! rebuild reads at most one snapshot and the deltas after it, as Flink
//! restores from a checkpoint. One message per slot and commit rather than
//! one per key: nats-server 2.9 spends close to a millisecond of CPU per
//! message on a stream keeping the last records of thousands of subjects,
//! more than the batch's own work (measured, `docs/cluster.md`).
//!
//! A host taking a slot over first publishes a fence holding its epoch,
//! then rebuilds the slot: a message stamped with an older epoch that the
//! stream took after the fence was written by a host that had lost the slot
//! (paused past its lease, say), and the rebuild passes over it. An owner
//! purges only after reading the fence once its snapshot is stored: a
//! newer fence means the slot is no longer its own and nothing is purged;
//! a fence written later comes after the snapshot, so the purge (bounded by
//! the snapshot's sequence) cannot reach the new owner's messages.

use super::wire::{self, ChunkHead, Reader, token};
use anyhow::{Context, Result, bail};
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, stream};
use futures_util::StreamExt;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Txids between two snapshots of a slot, unless `weir serve` is told
/// otherwise.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 16;

/// Publishes in flight before the oldest is waited for.
const IN_FLIGHT: usize = 1024;

/// How long the server remembers a message's id, so that a publish
/// repeated after a lost acknowledgement is stored once.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// A key's record in a slot's log: its value (`None`: removed).
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// One slot's share of a commit, written by its owner at `epoch`: in a
/// delta the keys the commit wrote, in a snapshot every key of the slot.
#[derive(Clone, Debug)]
pub struct SlotWrites {
    pub state: String,
    pub slot: u32,
    pub epoch: u64,
    pub records: Vec<Write>,
}

/// What a message of a slot's log holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Delta,
    Snapshot,
}

/// One message of a slot's log: chunk `index` of `count` of what its owner
/// at `epoch` wrote as of `txid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub kind: Kind,
    pub epoch: u64,
    pub txid: u64,
    pub index: u32,
    pub count: u32,
    pub records: Vec<Write>,
}

/// A fence: from stream sequence `sequence` on, the slot belongs to the
/// owner at `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    pub epoch: u64,
    pub sequence: u64,
}

/// What a rebuild found of a slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Each key's value and the txid of the message it came from; removed
    /// keys are left out.
    pub values: BTreeMap<Vec<u8>, (u64, Vec<u8>)>,
    /// The slot's latest fence.
    pub fence: Option<Fence>,
    /// Records passed over: written by a host after it was fenced.
    pub fenced_records: usize,
}

/// The changelog of one topology of one cluster.
pub struct Changelog {
    js: jetstream::Context,
    stream: String,
    /// Every subject's first tokens.
    prefix: String,
}

impl Message {
    /// The message's bytes: kind (1 byte), epoch and txid (8 bytes each,
    /// big-endian), index and count (4 each), then each record: the key's
    /// length (4) and the key, and the value's length (4) and the value
    /// after a 1, or a 0 for a removal.
    pub fn encode(&self) -> Vec<u8> {
        encode_message(self.kind, self.epoch, self.txid, (self.index, self.count), &self.records)
    }

    /// A message read back from the changelog; anything else is an error.
    pub fn decode(bytes: &[u8]) -> Result<Message> {
        let malformed = || anyhow::anyhow!("a changelog message of {} bytes is malformed", bytes.len());
        // The kind byte: 0 for a delta, 1 for a snapshot.
        let kind = |byte: u8| [Kind::Delta, Kind::Snapshot].get(usize::from(byte)).copied();
        let (kind, ChunkHead { epoch, txid, index, count }, records) =
            wire::decode_chunk(bytes, kind, read_record).ok_or_else(malformed)?;
        Ok(Message { kind, epoch, txid, index, count, records })
    }
}

/// A record's key, then a 0 for a removal or a 1 and its value.
fn read_record(reader: &mut Reader) -> Option<Write> {
    let key = reader.bytes()?.to_vec();
    let value = match reader.u8()? {
        0 => None,
        1 => Some(reader.bytes()?.to_vec()),
        _ => return None,
    };
    Some((key, value))
}

fn record_len((key, value): &Write) -> usize {
    9 + key.len() + value.as_ref().map_or(0, |v| 4 + v.len())
}

/// The bytes of a message of `records` (see [`Message::encode`]), made
/// from them where they are.
fn encode_message(kind: Kind, epoch: u64, txid: u64, (index, count): (u32, u32), records: &[Write]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(25 + records.iter().map(record_len).sum::<usize>());
    bytes.push(u8::from(kind == Kind::Snapshot));
    ChunkHead { epoch, txid, index, count }.encode_into(&mut bytes);
    for (key, value) in records {
        encode_record(&mut bytes, key, value.as_deref());
    }
    bytes
}

fn encode_record(bytes: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    bytes.extend_from_slice(&(key.len() as u32).to_be_bytes());
    bytes.extend_from_slice(key);
    match value {
        Some(value) => {
            bytes.push(1);
            bytes.extend_from_slice(&(value.len() as u32).to_be_bytes());
            bytes.extend_from_slice(value);
        }
        None => bytes.push(0),
    }
}

/// `records` cut into chunks of at most [`wire::CHUNK_BYTES`] (one record
/// past that alone in its chunk); at least one chunk, empty for none.
fn chunks(records: &[Write]) -> Vec<&[Write]> {
    let mut out = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (at, record) in records.iter().enumerate() {
        let len = record_len(record);
        if bytes + len > wire::CHUNK_BYTES && at > from {
            out.push(&records[from..at]);
            (from, bytes) = (at, 0);
        }
        bytes += len;
    }
    out.push(&records[from..]);
    out
}

impl Changelog {
    /// The changelog of topology `name` of cluster `cluster`, its stream
    /// made when missing.
    pub async fn open(js: &jetstream::Context, cluster: &str, name: &str) -> Result<Changelog> {
        let id = token(format!("{cluster}/{name}").as_bytes());
        let changelog = Changelog {
            js: js.clone(),
            stream: format!("weir-changelog-{id}"),
            prefix: format!("weir.changelog.{id}"),
        };
        let config = stream::Config {
            name: changelog.stream.clone(),
            description: Some(format!("weir: the state changelog of topology {name} of cluster {cluster}")),
            subjects: vec![format!("{}.>", changelog.prefix)],
            duplicate_window: DUPLICATE_WINDOW,
            storage: stream::StorageType::File,
            ..Default::default()
        };
        let doing = || format!("opening the changelog of topology {name} (stream {})", changelog.stream);
        let mut stream = js.get_or_create_stream(config).await.with_context(doing)?;
        // A slot's log must keep every message up to its purge.
        let kept = stream.info().await.with_context(doing)?.config.max_messages_per_subject;
        if kept > 0 {
            bail!(
                "{}: the stream keeps {kept} messages per subject, and a slot's log needs all of them \
                 (set its max_msgs_per_subject to -1, or delete it to start the changelog afresh)",
                doing()
            );
        }
        Ok(changelog)
    }

    /// Deletes the changelog of topology `name` of cluster `cluster`, if
    /// it has one: the topology is gone.
    pub async fn delete(js: &jetstream::Context, cluster: &str, name: &str) -> Result<()> {
        let stream = format!("weir-changelog-{}", token(format!("{cluster}/{name}").as_bytes()));
        match js.delete_stream(&stream).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("not found") => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting topology {name}'s changelog (stream {stream})")),
        }
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The subject of the log of a topology placed whole on one host
    /// (`whole_log`).
    pub fn whole_subject(&self) -> String {
        format!("{}.whole", self.prefix)
    }

    fn slot_subject(&self, state: &str, slot: u32) -> String {
        format!("{}.{}.{slot}", self.prefix, token(state.as_bytes()))
    }

    fn fence_subject(&self, state: &str, slot: u32) -> String {
        format!("{}.fence", self.slot_subject(state, slot))
    }

    fn log_subject(&self, state: &str, slot: u32, kind: Kind) -> String {
        let tail = match kind {
            Kind::Delta => "d",
            Kind::Snapshot => "s",
        };
        format!("{}.log.{tail}", self.slot_subject(state, slot))
    }

    /// Publishes the writes of `txid` to every slot in `slots` as one delta
    /// each, and returns once the server has stored every message.
    pub async fn publish(&self, txid: u64, slots: &[SlotWrites]) -> Result<()> {
        self.put(Kind::Delta, txid, slots).await?;
        Ok(())
    }

    /// Publishes every slot in `slots` whole, as of `txid`, and purges each
    /// slot's log before its snapshot while the slot is not fenced past
    /// its owner's epoch.
    pub async fn snapshot(&self, txid: u64, slots: &[SlotWrites]) -> Result<()> {
        let firsts = self.put(Kind::Snapshot, txid, slots).await?;
        let stream = self.js.get_stream(&self.stream).await.context("the changelog stream")?;
        for (writes, first) in slots.iter().zip(firsts) {
            let doing = || format!("purging slot {} of state {} before txid {txid}", writes.slot, writes.state);
            if self
                .fence_of(&stream, &writes.state, writes.slot)
                .await
                .with_context(doing)?
                .is_some_and(|f| f.epoch > writes.epoch)
            {
                bail!("slot {} of state {} was fenced past epoch {}", writes.slot, writes.state, writes.epoch);
            }
            let filter = format!("{}.log.*", self.slot_subject(&writes.state, writes.slot));
            stream.purge().filter(filter).sequence(first).await.with_context(doing)?;
        }
        Ok(())
    }

    /// Publishes `slots` as messages of `kind` and waits for every one to
    /// be stored; returns the sequence of each slot's first message.
    async fn put(&self, kind: Kind, txid: u64, slots: &[SlotWrites]) -> Result<Vec<u64>> {
        let what = |s: &SlotWrites| {
            format!("publishing txid {txid} of slot {} of state {} to changelog {}", s.slot, s.state, self.stream)
        };
        let mut in_flight: VecDeque<(PublishAckFuture, usize, bool)> = VecDeque::new();
        let mut firsts = vec![0; slots.len()];
        let mut stored = async |(ack, at, first): (PublishAckFuture, usize, bool)| {
            let ack = ack.await.with_context(|| what(&slots[at]))?;
            if first {
                firsts[at] = ack.sequence;
            }
            anyhow::Ok(())
        };
        for (at, writes) in slots.iter().enumerate() {
            let subject = self.log_subject(&writes.state, writes.slot, kind);
            let pieces = chunks(&writes.records);
            let count = pieces.len() as u32;
            for (index, records) in pieces.into_iter().enumerate() {
                let message = encode_message(kind, writes.epoch, txid, (index as u32, count), records);
                let mut headers = HeaderMap::new();
                // The epoch is in the id: a fenced host's message must not be
                // taken for the new owner's of the same txid.
                headers
                    .insert("Nats-Msg-Id", format!("{}.{}.{index}.{txid}.{}", subject, writes.epoch, count).as_str());
                let ack = self
                    .js
                    .publish_with_headers(subject.clone(), headers, message.into())
                    .await
                    .with_context(|| what(writes))?;
                in_flight.push_back((ack, at, index == 0));
                if in_flight.len() >= IN_FLIGHT {
                    stored(in_flight.pop_front().expect("in flight")).await?;
                }
            }
        }
        while let Some(next) = in_flight.pop_front() {
            stored(next).await?;
        }
        Ok(firsts)
    }

    /// The slot's latest fence.
    async fn fence_of(&self, stream: &stream::Stream, state: &str, slot: u32) -> Result<Option<Fence>> {
        match stream.get_last_raw_message_by_subject(&self.fence_subject(state, slot)).await {
            Ok(last) => {
                let epoch: u64 = serde_json::from_slice(&last.payload).context("a fence")?;
                Ok(Some(Fence { epoch, sequence: last.sequence }))
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Fences slot `slot` of `state` for its new owner at `epoch`: messages
    /// of older epochs the stream takes from now on are passed over. A
    /// slot fenced at `epoch` or later already keeps that fence: fencing
    /// again later would let through what came between.
    pub async fn fence(&self, state: &str, slot: u32, epoch: u64) -> Result<Fence> {
        let doing = || format!("fencing slot {slot} of state {state} at epoch {epoch}");
        let stream = self.js.get_stream(&self.stream).await.with_context(doing)?;
        if let Some(fence) = self.fence_of(&stream, state, slot).await.with_context(doing)?
            && fence.epoch >= epoch
        {
            return Ok(fence);
        }
        let payload = serde_json::to_vec(&epoch)?;
        let ack = self
            .js
            .publish(self.fence_subject(state, slot), payload.into())
            .await
            .with_context(doing)?
            .await
            .with_context(doing)?;
        Ok(Fence { epoch, sequence: ack.sequence })
    }

    /// Reads slot `slot` of `state` back, every key's value as its owners
    /// last wrote it, passing over fenced hosts' messages.
    pub async fn rebuild(&self, state: &str, slot: u32) -> Result<Rebuilt> {
        let doing = || format!("rebuilding slot {slot} of state {state} from changelog {}", self.stream);
        let stream = self.js.get_stream(&self.stream).await.with_context(doing)?;
        let config = pull::Config {
            filter_subject: format!("{}.>", self.slot_subject(state, slot)),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            memory_storage: true,
            ..Default::default()
        };
        let mut consumer = stream.create_consumer(config).await.with_context(doing)?;
        let mut remaining = consumer.info().await.with_context(doing)?.num_pending;
        let mut messages: Vec<(u64, Message)> = Vec::new();
        let mut fence: Option<Fence> = None;
        let fence_subject = self.fence_subject(state, slot);
        while remaining > 0 {
            let mut batch = consumer
                .fetch()
                .max_messages(remaining.min(1_000) as usize)
                .expires(Duration::from_secs(5))
                .messages()
                .await?;
            let mut got = 0;
            while let Some(message) = batch.next().await {
                let message = message.map_err(|e| anyhow::anyhow!("{e}")).with_context(doing)?;
                let info = message.info().map_err(|e| anyhow::anyhow!("{e}")).with_context(doing)?;
                let sequence = info.stream_sequence;
                got += 1;
                if message.subject.as_str() == fence_subject {
                    // The highest epoch's first fence holds.
                    let epoch: u64 = serde_json::from_slice(&message.payload).with_context(doing)?;
                    if fence.is_none_or(|f| epoch > f.epoch) {
                        fence = Some(Fence { epoch, sequence });
                    }
                } else {
                    messages.push((sequence, Message::decode(&message.payload).with_context(doing)?));
                }
            }
            if got == 0 {
                bail!("{}: the stream stopped answering with {remaining} messages unread", doing());
            }
            remaining = remaining.saturating_sub(got);
        }
        let _ = stream.delete_consumer(&consumer.cached_info().name).await;
        Ok(fold(messages, fence))
    }
}

/// The slot as its messages (in stream order) hold it: the latest complete
/// snapshot that no fence rules out, then the deltas after it.
fn fold(messages: Vec<(u64, Message)>, fence: Option<Fence>) -> Rebuilt {
    let mut rebuilt = Rebuilt { fence, ..Rebuilt::default() };
    let mut kept = Vec::with_capacity(messages.len());
    for (sequence, message) in messages {
        if fence.is_some_and(|f| sequence > f.sequence && message.epoch < f.epoch) {
            rebuilt.fenced_records += message.records.len();
        } else {
            kept.push(message);
        }
    }
    // Snapshots by (txid, epoch, count): complete when every chunk came.
    let mut snapshots: BTreeMap<(u64, u64, u32), BTreeSet<u32>> = BTreeMap::new();
    for message in kept.iter().filter(|m| m.kind == Kind::Snapshot) {
        snapshots.entry((message.txid, message.epoch, message.count)).or_default().insert(message.index);
    }
    let base = snapshots.iter().rev().find(|((_, _, count), got)| got.len() as u32 == *count).map(|(id, _)| *id);
    let mut taken = BTreeSet::new();
    for message in kept {
        let from_base = message.kind == Kind::Snapshot
            && Some((message.txid, message.epoch, message.count)) == base
            && taken.insert(message.index);
        let after_base = message.kind == Kind::Delta && base.is_none_or(|(txid, _, _)| message.txid > txid);
        if !(from_base || after_base) {
            continue;
        }
        for (key, value) in message.records {
            match value {
                Some(value) => rebuilt.values.insert(key, (message.txid, value)),
                None => rebuilt.values.remove(&key),
            };
        }
    }
    rebuilt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(
        kind: Kind,
        epoch: u64,
        txid: u64,
        (index, count): (u32, u32),
        pairs: &[(&str, Option<&str>)],
    ) -> Message {
        let records = pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))).collect();
        Message { kind, epoch, txid, index, count, records }
    }

    fn delta(epoch: u64, txid: u64, pairs: &[(&str, Option<&str>)]) -> Message {
        message(Kind::Delta, epoch, txid, (0, 1), pairs)
    }

    fn values(rebuilt: &Rebuilt) -> Vec<(&str, u64, &str)> {
        fn text(bytes: &[u8]) -> &str {
            std::str::from_utf8(bytes).unwrap()
        }
        rebuilt.values.iter().map(|(k, (t, v))| (text(k), *t, text(v))).collect()
    }

    #[test]
    fn a_rebuild_keeps_each_keys_latest_record_but_those_of_fenced_hosts() {
        let messages = vec![
            (1, delta(1, 1, &[("a", Some("a1")), ("b", Some("b1"))])),
            (2, delta(1, 2, &[("a", Some("a2")), ("c", Some("c2"))])),
            // Fence at sequence 3, epoch 2; then the old owner's late write.
            (4, delta(1, 3, &[("a", Some("stale"))])),
            (5, delta(2, 3, &[("b", Some("b3")), ("c", None)])),
        ];
        let rebuilt = fold(messages, Some(Fence { epoch: 2, sequence: 3 }));
        assert_eq!(values(&rebuilt), [("a", 2, "a2"), ("b", 3, "b3")]);
        assert_eq!(rebuilt.fenced_records, 1);
    }

    #[test]
    fn a_rebuild_starts_from_the_latest_complete_snapshot_that_no_fence_rules_out() {
        let messages = vec![
            (1, delta(1, 1, &[("a", Some("a1"))])),
            (2, message(Kind::Snapshot, 1, 1, (0, 2), &[("a", Some("a1"))])),
            (3, message(Kind::Snapshot, 1, 1, (1, 2), &[("z", Some("z0"))])),
            (4, delta(1, 2, &[("b", Some("b2"))])),
            // A later snapshot that lost its second chunk: not a base.
            (5, message(Kind::Snapshot, 1, 2, (0, 2), &[("a", Some("a1")), ("b", Some("b2"))])),
            (6, delta(1, 3, &[("z", None)])),
            // Fenced at 7: the old owner's late snapshot is passed over.
            (8, message(Kind::Snapshot, 1, 4, (0, 1), &[("a", Some("stale"))])),
            (9, delta(2, 4, &[("c", Some("c4"))])),
        ];
        let rebuilt = fold(messages, Some(Fence { epoch: 2, sequence: 7 }));
        assert_eq!(values(&rebuilt), [("a", 1, "a1"), ("b", 2, "b2"), ("c", 4, "c4")]);
        assert_eq!(rebuilt.fenced_records, 1);
        // Deltas at or before the base's txid are in it already.
        let messages = vec![
            (1, message(Kind::Snapshot, 1, 5, (0, 1), &[("a", Some("a5"))])),
            (2, delta(1, 5, &[("a", Some("a5")), ("b", Some("old"))])),
        ];
        assert_eq!(values(&fold(messages, None)), [("a", 5, "a5")]);
    }

    #[test]
    fn a_message_reads_back_as_written_and_malformed_bytes_are_refused() {
        let written = [
            message(Kind::Snapshot, 3, 9, (1, 2), &[("key", Some("value")), ("gone", None), ("", Some(""))]),
            message(Kind::Delta, 1, 2, (0, 1), &[]),
        ];
        for message in written {
            assert_eq!(Message::decode(&message.encode()).unwrap(), message);
        }
        let bytes = message(Kind::Delta, 3, 9, (0, 1), &[("key", Some("value"))]).encode();
        for cut in (0..bytes.len()).filter(|&cut| cut != 25) {
            assert!(Message::decode(&bytes[..cut]).is_err(), "{cut} bytes");
        }
        let mut bad = bytes.clone();
        bad[0] = 2;
        assert!(Message::decode(&bad).is_err(), "an unknown kind");
        let mut bad = bytes.clone();
        bad[17..21].copy_from_slice(&5u32.to_be_bytes());
        assert!(Message::decode(&bad).is_err(), "a chunk past the count");
        let mut bad = bytes.clone();
        bad[25..29].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Message::decode(&bad).is_err(), "a key longer than the message");
    }

    #[test]
    fn records_are_cut_into_chunks_of_bounded_size_and_none_makes_one_empty_chunk() {
        let big = vec![0u8; wire::CHUNK_BYTES / 3];
        let records: Vec<Write> = (0..7).map(|i| (vec![i], Some(big.clone()))).collect();
        let pieces = chunks(&records);
        assert_eq!(pieces.iter().map(|p| p.len()).collect::<Vec<_>>(), [2, 2, 2, 1]);
        assert_eq!(pieces.concat(), records);
        assert_eq!(chunks(&[]).len(), 1);
    }
}
