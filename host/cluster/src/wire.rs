//! What a cluster's hosts say to each other about a topology's batches,
//! over core NATS: the leader's word that a batch starts, the partials a
//! host sends the owners of their slots, each host's report, and reads of
//! the state a host owns. Nothing here needs to outlive a batch: a lost
//! message fails the batch, and the batch replays. Everything another host
//! sent is read as hostile: lengths are checked against the bytes there.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use weir_state::keyed::KeyedValues;

/// Most bytes of partials one message carries: well under NATS's default
/// largest payload (1 MiB).
pub const CHUNK_BYTES: usize = 512 << 10;

/// The hex of the first 16 bytes of `bytes`' SHA-256: names and keys of
/// any bytes become one subject token of a bounded length.
pub(crate) fn token(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

/// Where one message of a changelog stands: chunk `index` of `count` of
/// what the owner at `epoch` wrote as of `txid`. Both changelogs (a slot's,
/// a whole topology's) put it after the message's kind byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkHead {
    pub epoch: u64,
    pub txid: u64,
    pub index: u32,
    pub count: u32,
}

impl ChunkHead {
    /// Epoch and txid (8 bytes each, big-endian), index and count (4 each).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.txid.to_be_bytes());
        out.extend_from_slice(&self.index.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
    }
}

/// Reads a message's fields front to back; `None` past its end.
pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A byte string after its length (4).
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A changelog message's [`ChunkHead`]; `None` also for an index not
    /// below its count.
    fn chunk_head(&mut self) -> Option<ChunkHead> {
        let head = ChunkHead { epoch: self.u64()?, txid: self.u64()?, index: self.u32()?, count: self.u32()? };
        (head.index < head.count).then_some(head)
    }
}

/// A changelog message read back: its kind byte (as `kind` reads it), its
/// [`ChunkHead`], then items (as `item` reads each) to its end; `None`
/// for anything malformed.
pub(crate) fn decode_chunk<K, T>(
    bytes: &[u8],
    kind: impl Fn(u8) -> Option<K>,
    mut item: impl FnMut(&mut Reader<'_>) -> Option<T>,
) -> Option<(K, ChunkHead, Vec<T>)> {
    let mut reader = Reader(bytes);
    let kind = kind(reader.u8()?)?;
    let head = reader.chunk_head()?;
    let mut items = Vec::new();
    while !reader.0.is_empty() {
        items.push(item(&mut reader)?);
    }
    Some((kind, head, items))
}

/// Most bytes of a partials message's header.
const MAX_HEADER: usize = 64 << 10;

/// The subjects of one topology's batches in one cluster.
#[derive(Clone, Debug)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    pub fn new(cluster: &str, topology: &str) -> Subjects {
        Subjects { prefix: format!("weir.batch.{}", token(format!("{cluster}/{topology}").as_bytes())) }
    }

    /// Where the leader says a batch starts.
    pub fn start(&self) -> String {
        format!("{}.start", self.prefix)
    }

    /// Where `host` takes the partials of its slots.
    pub fn partials(&self, host: &str) -> String {
        format!("{}.partials.{}", self.prefix, token(host.as_bytes()))
    }

    /// Where hosts report to the leader.
    pub fn done(&self) -> String {
        format!("{}.done", self.prefix)
    }
}

/// Where `host` of `cluster` answers reads of the state it owns.
pub fn reads(cluster: &str, host: &str) -> String {
    format!("weir.read.{}.{}", token(cluster.as_bytes()), token(host.as_bytes()))
}

/// The leader's word: batch `txid`, attempt `attempt`, is the stream's
/// span `after+1..=until`, processed and committed under assignment
/// `epoch`; `next`, the span recorded already for `txid + 1`, which a
/// partition owner may read while this batch commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub txid: u64,
    pub attempt: u32,
    pub epoch: u64,
    pub after: u64,
    pub until: u64,
    pub time_ms: u64,
    #[serde(default)]
    pub next: Option<(u64, u64)>,
}

impl Start {
    /// Which try at which batch, in the order tries come.
    pub fn id(&self) -> (u64, u32) {
        (self.txid, self.attempt)
    }
}

/// A host's report on a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    pub txid: u64,
    pub attempt: u32,
    pub host: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Its partitions were read and processed, and their partials sent.
    Processed { tuples: u64 },
    /// Its slots' writes are committed here and in the changelog.
    Committed { keys: u64 },
    /// It failed; the batch replays.
    Failed { error: String },
}

/// Who sent a message of partials, and which of its messages this is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialsHeader {
    pub txid: u64,
    pub attempt: u32,
    pub from: String,
    /// This message's place among the sender's messages to one host.
    pub chunk: u32,
    pub chunks: u32,
    /// Messages of the span the sender read from its partitions.
    pub read: u64,
    /// Each state's partials in the body, with their length in bytes.
    pub states: Vec<(String, u64)>,
}

/// One message: the header's length, the header (JSON), then each state's
/// partials as [`super::slots::encode`] writes them.
pub fn encode_partials(header: &PartialsHeader, bodies: &[Vec<u8>]) -> Result<Vec<u8>> {
    let head = serde_json::to_vec(header)?;
    let mut out = Vec::with_capacity(4 + head.len() + bodies.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    for body in bodies {
        out.extend_from_slice(body);
    }
    Ok(out)
}

/// Reads a message [`encode_partials`] wrote, from another host.
pub fn decode_partials(bytes: &[u8]) -> Result<(PartialsHeader, Vec<(String, KeyedValues)>)> {
    let Some((len, rest)) = bytes.split_first_chunk::<4>() else {
        bail!("a partials message of {} bytes", bytes.len())
    };
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_HEADER || len > rest.len() {
        bail!("a partials message's header claims {len} bytes of {}", rest.len());
    }
    let (head, mut body) = rest.split_at(len);
    let header: PartialsHeader = serde_json::from_slice(head).context("a partials message's header")?;
    if header.chunks == 0 || header.chunk >= header.chunks {
        bail!("partials message {} of {}", header.chunk, header.chunks);
    }
    let mut states = Vec::with_capacity(header.states.len().min(64));
    for (state, len) in &header.states {
        let len = usize::try_from(*len).ok().filter(|len| *len <= body.len());
        let Some(len) = len else { bail!("partials of state {state:?} claim more bytes than the message holds") };
        let (part, rest) = body.split_at(len);
        let partials = super::slots::decode(part).with_context(|| format!("partials of state {state:?}"))?;
        states.push((state.clone(), partials));
        body = rest;
    }
    if !body.is_empty() {
        bail!("a partials message has {} bytes past its states", body.len());
    }
    Ok((header, states))
}

/// A read of the state a host owns: one key, or a page of keys after
/// `after` (encoded keys, hex).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    pub topology: String,
    pub state: String,
    pub key: Option<String>,
    pub after: Option<String>,
    pub limit: usize,
    /// The slots the asker takes the host to own: it answers for those,
    /// and only once it holds every one.
    pub slots: Vec<u32>,
}

/// Its answer: keys and stored records, hex, in key order; whether more
/// may follow; or why it could not be answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadAnswer {
    pub entries: Vec<(String, String)>,
    pub more: bool,
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::codec::Value;

    #[test]
    fn partials_messages_round_trip_and_lies_about_lengths_are_refused() {
        let mut counts = KeyedValues::default();
        counts.push(b"a", Value::I64(2));
        counts.push(b"b", Value::I64(5));
        let body = super::super::slots::encode(&counts);
        let header = PartialsHeader {
            txid: 7,
            attempt: 1,
            from: "h1".into(),
            chunk: 0,
            chunks: 1,
            read: 0,
            states: vec![("counts".into(), body.len() as u64)],
        };
        let bytes = encode_partials(&header, std::slice::from_ref(&body)).unwrap();
        let (read, states) = decode_partials(&bytes).unwrap();
        assert_eq!(read, header);
        assert_eq!(states.len(), 1);
        assert_eq!(states[0].1.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>(), [b"a".to_vec(), b"b".to_vec()]);

        let lying = PartialsHeader { states: vec![("counts".into(), body.len() as u64 + 1)], ..header.clone() };
        let bytes = encode_partials(&lying, std::slice::from_ref(&body)).unwrap();
        assert!(format!("{:#}", decode_partials(&bytes).unwrap_err()).contains("claim more bytes"));
        let bad_chunk = PartialsHeader { chunk: 1, ..header.clone() };
        assert!(decode_partials(&encode_partials(&bad_chunk, std::slice::from_ref(&body)).unwrap()).is_err());
        assert!(decode_partials(&[200, 0, 0, 0, b'{']).is_err());
        assert!(decode_partials(&[]).is_err());
        let mut trailing = encode_partials(&header, &[body]).unwrap();
        trailing.push(0);
        assert!(format!("{:#}", decode_partials(&trailing).unwrap_err()).contains("past its states"));
    }
}
