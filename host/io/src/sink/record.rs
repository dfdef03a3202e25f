//! A sink's outbox record: one per committed batch with output, holding
//! all of that batch's messages, so that a batch costs its commit one
//! insert (and its acknowledgement one removal) whatever its size.
//!
//! Key: the txid, big-endian (keys sort in publishing order). Value:
//! [`VERSION`], the message count (u32, little-endian), then each message
//! as its length (u32, little-endian) and its bytes. Message `n` of the
//! record is the batch's message `n`: its id is `<topology>/<sink>/<txid>/<n>`.
//!
//! A data dir written before kept one record per message (key: txid and
//! place, 12 bytes; value: the payload): such a record still reads, as a
//! record of one message starting at that place.

use anyhow::{Result, bail};
use bytes::Bytes;

/// The layout of the value, first byte.
const VERSION: u8 = 1;

/// Bytes before the messages: the version and the count.
const HEADER: usize = 5;

/// The outbox key of batch `txid`.
pub fn key(txid: u64) -> Vec<u8> {
    txid.to_be_bytes().to_vec()
}

/// Writes one record's value, message by message.
pub struct RecordWriter {
    value: Vec<u8>,
    count: u32,
}

impl RecordWriter {
    /// A record with room for `bytes` of messages.
    pub fn with_capacity(bytes: usize) -> RecordWriter {
        let mut value = Vec::with_capacity(HEADER + bytes);
        value.push(VERSION);
        value.extend_from_slice(&0u32.to_le_bytes());
        RecordWriter { value, count: 0 }
    }

    /// Adds the next message.
    pub fn push(&mut self, message: &[u8]) {
        self.value.extend_from_slice(&(message.len() as u32).to_le_bytes());
        self.value.extend_from_slice(message);
        self.count += 1;
    }

    /// The value, its count filled in.
    pub fn finish(mut self) -> Vec<u8> {
        self.value[1..HEADER].copy_from_slice(&self.count.to_le_bytes());
        self.value
    }
}

/// One outbox record, read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its key in the outbox, to remove it by.
    pub key: Vec<u8>,
    /// The batch whose output it holds.
    pub txid: u64,
    /// The place in the batch's output of its first message.
    pub first: u32,
    /// Its messages, in order: slices of the value, not copies.
    pub messages: Vec<Bytes>,
}

impl Record {
    /// The place in the batch's output of message `m` of the record.
    pub fn place(&self, m: usize) -> u32 {
        self.first.saturating_add(m as u32)
    }
}

/// Reads the record of `key` and `value`; `outbox` names the outbox in
/// errors. Bytes that are not a record give an error saying what is
/// wrong, never a panic.
pub fn decode(outbox: &str, key: Vec<u8>, value: Vec<u8>) -> Result<Record> {
    match key.len() {
        8 => {
            let txid = u64::from_be_bytes(key.as_slice().try_into().expect("8 bytes"));
            let messages = messages(&Bytes::from(value))
                .map_err(|e| anyhow::anyhow!("{outbox}: the record of txid {txid} is corrupt: {e}"))?;
            Ok(Record { key, txid, first: 0, messages })
        }
        // One message, as a data dir written before kept them.
        12 => {
            let (txid, place) = key.split_at(8);
            let txid = u64::from_be_bytes(txid.try_into().expect("8 bytes"));
            let first = u32::from_be_bytes(place.try_into().expect("4 bytes"));
            Ok(Record { key, txid, first, messages: vec![Bytes::from(value)] })
        }
        n => bail!("{outbox}: a record key of {n} bytes is neither a txid (8) nor a txid and place (12)"),
    }
}

/// The messages of a record's `value`.
fn messages(value: &Bytes) -> Result<Vec<Bytes>, String> {
    let Some((&version, rest)) = value.split_first() else { return Err("it is empty".into()) };
    if version != VERSION {
        return Err(format!("layout {version} is not one this host reads (layout {VERSION})"));
    }
    let Some((count, _)) = rest.split_first_chunk::<4>() else {
        return Err(format!("{} bytes hold no message count", value.len()));
    };
    let count = u32::from_le_bytes(*count) as usize;
    // Each message takes at least its length: a count past that is corrupt,
    // found before anything is allocated for it.
    if count > (value.len() - HEADER) / 4 {
        return Err(format!("it claims {count} messages in {} bytes", value.len()));
    }
    let mut messages = Vec::with_capacity(count);
    let mut at = HEADER;
    for m in 0..count {
        let Some(len) = value.get(at..at + 4) else {
            return Err(format!("message {m} of {count} has no length: the record ends at byte {at}"));
        };
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        at += 4;
        if len > value.len() - at {
            return Err(format!("message {m} of {count} claims {len} bytes where {} are left", value.len() - at));
        }
        messages.push(value.slice(at..at + len));
        at += len;
    }
    if at != value.len() {
        return Err(format!("{} bytes follow its {count} messages", value.len() - at));
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTBOX: &str = "sink s's outbox";

    /// `messages` as one record's value.
    fn encode<'a>(messages: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
        let mut writer = RecordWriter::with_capacity(0);
        messages.into_iter().for_each(|m| writer.push(m));
        writer.finish()
    }

    fn record(messages: &[&[u8]]) -> Vec<u8> {
        encode(messages.iter().copied())
    }

    #[test]
    fn a_record_reads_back_its_messages_in_order() {
        let value = record(&[b"{\"a\":1}", b"", b"third"]);
        let read = decode(OUTBOX, key(42), value).unwrap();
        assert_eq!((read.txid, read.first, read.key.clone()), (42, 0, key(42)));
        assert_eq!(read.messages, vec![Bytes::from_static(b"{\"a\":1}"), Bytes::new(), Bytes::from_static(b"third")]);
        assert_eq!(read.place(2), 2);
        let empty = decode(OUTBOX, key(1), record(&[])).unwrap();
        assert!(empty.messages.is_empty());
    }

    #[test]
    fn keys_sort_in_txid_order_and_before_the_older_layouts_of_later_txids() {
        assert!(key(255) < key(256));
        let old = |txid: u64, n: u32| [txid.to_be_bytes().as_slice(), &n.to_be_bytes()].concat();
        assert!(old(4, 70_000) < key(5));
        assert!(key(5) < old(5, 0));
    }

    #[test]
    fn a_record_of_the_older_layout_reads_as_one_message_at_its_place() {
        let old = [7u64.to_be_bytes().as_slice(), &3u32.to_be_bytes()].concat();
        let read = decode(OUTBOX, old.clone(), b"payload".to_vec()).unwrap();
        assert_eq!(read.place(0), 3);
        assert_eq!((read.txid, read.first, read.key), (7, 3, old));
        assert_eq!(read.messages, vec![Bytes::from_static(b"payload")]);
    }

    #[test]
    fn corrupt_bytes_give_an_error_naming_the_outbox_and_txid_not_a_panic() {
        let good = record(&[b"one", b"two"]);
        let error = |key: Vec<u8>, value: Vec<u8>| format!("{:#}", decode(OUTBOX, key, value).unwrap_err());
        assert!(error(b"short".to_vec(), good.clone()).contains("a record key of 5 bytes"));
        let e = error(key(9), Vec::new());
        assert!(e.contains("sink s's outbox") && e.contains("txid 9") && e.contains("empty"), "{e}");
        let mut other = good.clone();
        other[0] = 9;
        assert!(error(key(9), other).contains("layout 9"));
        assert!(error(key(9), vec![VERSION, 1, 0]).contains("no message count"));
        // A count no value could hold is refused before it is allocated.
        let mut huge = vec![VERSION];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(error(key(9), huge).contains("claims 4294967295 messages"));
        // Every cut of a good record, and every length made too long.
        for cut in 0..good.len() {
            assert!(decode(OUTBOX, key(9), good[..cut].to_vec()).is_err(), "cut at {cut}");
        }
        let mut long = good.clone();
        long[HEADER] = 200;
        assert!(error(key(9), long).contains("message 0 of 2 claims 200 bytes"));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(error(key(9), trailing).contains("1 bytes follow its 2 messages"));
        // Arbitrary bytes, most of them of this layout, never panic.
        let mut state = 1u64;
        for len in 0..2_000 {
            let mut bytes: Vec<u8> = (0..len % 64)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    // Small lengths and counts, so that some records read.
                    ((state >> 56) as u8) % if len % 2 == 0 { 8 } else { 255 }
                })
                .collect();
            if let Some(first) = bytes.first_mut().filter(|_| len % 3 != 0) {
                *first = VERSION;
            }
            if let Ok(read) = decode(OUTBOX, key(1), bytes.clone()) {
                assert_eq!(encode(read.messages.iter().map(|m| &m[..])), bytes);
            }
        }
    }
}
