//! A topology's state changelog in JetStream: the copy of every slot's
//! state that outlives the host that owns it, as Kafka Streams keeps a
//! store's changelog topic. One stream per topology; one subject per state,
//! slot and key, holding that key's last two records; one fence subject
//! per state and slot.
//!
//! A slot's owner publishes a commit's writes, each record stamped with the
//! owner's assignment epoch, and waits for every acknowledgement before it
//! acknowledges the commit. A host taking a slot over first publishes a
//! fence holding its epoch, then rebuilds the slot: a record stamped with an
//! older epoch that the stream took after the fence was written by a host
//! that had lost the slot (paused past its lease, say), and the rebuild
//! passes over it for the record before it. A fenced host has at most one
//! commit in hand (commits go one txid at a time), so it writes at most one
//! such record per key, and keeping two records per key always leaves the
//! good one.

use anyhow::{Context, Result, bail};
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, stream};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Records kept per key: the latest, and the one before it for when the
/// latest is a fenced host's.
const RECORDS_PER_KEY: i64 = 2;

/// Publishes in flight before the oldest is waited for.
const IN_FLIGHT: usize = 4096;

/// How long the server remembers a record's id, so that a publish repeated
/// after a lost acknowledgement is stored once.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// One record of a key: its value as of `txid` (`None`: the key was
/// removed), written by the owner of the key's slot at `epoch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub epoch: u64,
    pub txid: u64,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// A fence: from stream sequence `sequence` on, the slot belongs to the
/// owner at `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub epoch: u64,
    pub sequence: u64,
}

/// What a rebuild found of a slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Each key's value and the txid it was written at; removed keys are
    /// left out.
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

/// The hex of the first 16 bytes of `bytes`' SHA-256: names and keys of
/// any bytes become one subject token of a bounded length.
pub(crate) fn token(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
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
            max_messages_per_subject: RECORDS_PER_KEY,
            duplicate_window: DUPLICATE_WINDOW,
            storage: stream::StorageType::File,
            ..Default::default()
        };
        js.get_or_create_stream(config)
            .await
            .with_context(|| format!("opening the changelog of topology {name} (stream {})", changelog.stream))?;
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

    fn slot_subject(&self, state: &str, slot: u32) -> String {
        format!("{}.{}.{slot}", self.prefix, token(state.as_bytes()))
    }

    /// Publishes the writes of `txid` to slot `slot` of `state`, made by its
    /// owner at `epoch`, and returns once the server has stored every one.
    pub async fn publish(
        &self,
        state: &str,
        slot: u32,
        epoch: u64,
        txid: u64,
        writes: &[(Vec<u8>, Option<Vec<u8>>)],
    ) -> Result<()> {
        let what = || format!("publishing txid {txid} of slot {slot} of state {state} to changelog {}", self.stream);
        let slot_subject = self.slot_subject(state, slot);
        let mut in_flight: VecDeque<PublishAckFuture> = VecDeque::new();
        for (key, value) in writes {
            let key_token = token(key);
            let record = Record { epoch, txid, key: key.clone(), value: value.clone() };
            let mut headers = HeaderMap::new();
            // The epoch is in the id: a fenced host's record must not be
            // taken for the new owner's record of the same txid and key.
            headers.insert("Nats-Msg-Id", format!("{epoch}.{txid}.{slot}.{key_token}").as_str());
            let payload = serde_json::to_vec(&record)?;
            let subject = format!("{slot_subject}.k.{key_token}");
            let ack = self.js.publish_with_headers(subject, headers, payload.into()).await.with_context(what)?;
            in_flight.push_back(ack);
            if in_flight.len() >= IN_FLIGHT {
                in_flight.pop_front().expect("in flight").await.with_context(what)?;
            }
        }
        for ack in in_flight {
            ack.await.with_context(what)?;
        }
        Ok(())
    }

    /// Fences slot `slot` of `state` for its new owner at `epoch`: records
    /// of older epochs the stream takes from now on are passed over. A
    /// slot fenced at `epoch` or later already keeps that fence: fencing
    /// again later would let through what came between.
    pub async fn fence(&self, state: &str, slot: u32, epoch: u64) -> Result<Fence> {
        let doing = || format!("fencing slot {slot} of state {state} at epoch {epoch}");
        let subject = format!("{}.fence", self.slot_subject(state, slot));
        let stream = self.js.get_stream(&self.stream).await.with_context(doing)?;
        match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(last) => {
                let fenced: u64 = serde_json::from_slice(&last.payload).with_context(doing)?;
                if fenced >= epoch {
                    return Ok(Fence { epoch: fenced, sequence: last.sequence });
                }
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {}
            Err(e) => return Err(e).with_context(doing),
        }
        let payload = serde_json::to_vec(&epoch)?;
        let ack = self.js.publish(subject, payload.into()).await.with_context(doing)?.await.with_context(doing)?;
        Ok(Fence { epoch, sequence: ack.sequence })
    }

    /// Reads slot `slot` of `state` back, every key's value as its owners
    /// last wrote it, passing over fenced hosts' records.
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
        let mut records: Vec<(u64, Record)> = Vec::new();
        let mut fence: Option<Fence> = None;
        while remaining > 0 {
            let mut batch = consumer.fetch().max_messages(remaining.min(10_000) as usize).messages().await?;
            let mut got = 0;
            while let Some(message) = batch.next().await {
                let message = message.map_err(|e| anyhow::anyhow!("{e}")).with_context(doing)?;
                let info = message.info().map_err(|e| anyhow::anyhow!("{e}")).with_context(doing)?;
                let sequence = info.stream_sequence;
                got += 1;
                if message.subject.ends_with(".fence") {
                    // The highest epoch's first fence holds.
                    let epoch: u64 = serde_json::from_slice(&message.payload).with_context(doing)?;
                    if fence.is_none_or(|f| epoch > f.epoch) {
                        fence = Some(Fence { epoch, sequence });
                    }
                } else {
                    let record: Record = serde_json::from_slice(&message.payload).with_context(doing)?;
                    records.push((sequence, record));
                }
            }
            if got == 0 {
                bail!("{}: the stream stopped answering with {remaining} records unread", doing());
            }
            remaining = remaining.saturating_sub(got);
        }
        let _ = stream.delete_consumer(&consumer.cached_info().name).await;
        Ok(fold(records, fence))
    }
}

/// Each key's latest record that no fence rules out, in stream order.
fn fold(records: Vec<(u64, Record)>, fence: Option<Fence>) -> Rebuilt {
    let mut rebuilt = Rebuilt { fence, ..Rebuilt::default() };
    let mut latest: BTreeMap<Vec<u8>, Record> = BTreeMap::new();
    for (sequence, record) in records {
        if fence.is_some_and(|f| sequence > f.sequence && record.epoch < f.epoch) {
            rebuilt.fenced_records += 1;
            continue;
        }
        latest.insert(record.key.clone(), record);
    }
    for (key, record) in latest {
        if let Some(value) = record.value {
            rebuilt.values.insert(key, (record.txid, value));
        }
    }
    rebuilt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(epoch: u64, txid: u64, key: &str, value: Option<&str>) -> Record {
        Record { epoch, txid, key: key.into(), value: value.map(Into::into) }
    }

    #[test]
    fn a_rebuild_keeps_each_keys_latest_record_but_those_of_fenced_hosts() {
        let records = vec![
            (1, record(1, 1, "a", Some("a1"))),
            (2, record(1, 1, "b", Some("b1"))),
            (3, record(1, 2, "a", Some("a2"))),
            (4, record(1, 2, "c", Some("c2"))),
            // Fence at sequence 5, epoch 2; then the old owner's late write.
            (6, record(1, 3, "a", Some("stale"))),
            (7, record(2, 3, "b", Some("b3"))),
            (8, record(2, 3, "c", None)),
        ];
        let rebuilt = fold(records, Some(Fence { epoch: 2, sequence: 5 }));
        let values: Vec<(&[u8], u64, &[u8])> =
            rebuilt.values.iter().map(|(k, (t, v))| (k.as_slice(), *t, v.as_slice())).collect();
        assert_eq!(values, [(&b"a"[..], 2, &b"a2"[..]), (b"b", 3, b"b3")]);
        assert_eq!(rebuilt.fenced_records, 1);
    }
}
