//! A state's hash slots: the slot each key belongs to, and the encoding
//! of the partials that go to the slots' owners, in pieces that fit a
//! message. What another host sent is read as hostile: every length
//! is checked against the bytes there, and keys must come sorted and once.

use anyhow::{Result, bail};
use weir_sdk::codec::{read_value, write_value};
use weir_state::keyed::KeyedValues;

/// The slot of encoded key `key` among `slots`: FNV-1a, 64 bits, of its
/// bytes. Fixed for good: every deployed topology's stored values,
/// changelog and routing depend on it.
pub fn slot_of(key: &[u8], slots: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(slots.max(1))) as u32
}

/// `partials` as bytes: their count, then each key (length first) and
/// value, in order.
pub fn encode(partials: &KeyedValues) -> Vec<u8> {
    encode_cut(partials, usize::MAX).pop().unwrap_or_else(|| 0u32.to_le_bytes().to_vec())
}

/// `partials` encoded as [`encode`] does, cut into pieces of at most
/// `most` bytes (a key and value larger alone make a piece of their
/// own), each piece a run of the keys in order; none for no keys.
pub fn encode_cut(partials: &KeyedValues, most: usize) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    let mut piece = 0u32.to_le_bytes().to_vec();
    let mut count = 0u32;
    for (key, value) in partials.iter() {
        let before = piece.len();
        piece.extend_from_slice(&(key.len() as u32).to_le_bytes());
        piece.extend_from_slice(key);
        write_value(&mut piece, value.as_ref());
        if piece.len() > most && count > 0 {
            let entry = piece.split_off(before);
            piece[..4].copy_from_slice(&count.to_le_bytes());
            pieces.push(std::mem::replace(&mut piece, [&0u32.to_le_bytes()[..], &entry].concat()));
            count = 0;
        }
        count += 1;
    }
    if count > 0 {
        piece[..4].copy_from_slice(&count.to_le_bytes());
        pieces.push(piece);
    }
    pieces
}

fn take<'a>(bytes: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8]> {
    if bytes.len() < n {
        bail!("partials cut short: {what} needs {n} bytes, {} are left", bytes.len());
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

fn take_u32(bytes: &mut &[u8], what: &str) -> Result<usize> {
    let head = take(bytes, 4, what)?;
    Ok(u32::from_le_bytes(head.try_into().expect("four bytes")) as usize)
}

/// Partials read back from `bytes`, which another host sent.
pub fn decode(mut bytes: &[u8]) -> Result<KeyedValues> {
    let count = take_u32(&mut bytes, "the count")?;
    // Each entry takes at least five bytes: no count can make this
    // allocate more than the bytes there.
    if count > bytes.len() / 5 {
        bail!("partials claim {count} keys in {} bytes", bytes.len());
    }
    let mut out = KeyedValues::with_capacity(count, bytes.len());
    for n in 0..count {
        let len = take_u32(&mut bytes, "a key's length")?;
        let key = take(&mut bytes, len, "a key")?;
        if n > 0 && out.key(n - 1) >= key {
            bail!("partials' key {n} is not after the key before it");
        }
        let (value, rest) = read_value(bytes).map_err(|e| anyhow::anyhow!("partials' value {n}: {e}"))?;
        out.push(key, value.to_owned());
        bytes = rest;
    }
    if !bytes.is_empty() {
        bail!("partials followed by {} bytes more", bytes.len());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::codec::Value;

    fn partials(n: usize) -> KeyedValues {
        let mut keys: Vec<Vec<u8>> = (0..n).map(|i| format!("word{i}").into_bytes()).collect();
        keys.sort();
        keys.into_iter().enumerate().map(|(i, k)| (k, Value::I64(i as i64))).collect()
    }

    #[test]
    fn a_keys_slot_never_changes_and_keys_spread_over_the_slots() {
        // Fixed values: a change of the hash would move every stored key.
        assert_eq!(slot_of(b"", 64), (0xcbf2_9ce4_8422_2325_u64 % 64) as u32);
        assert_eq!(slot_of(b"a", 64), (0xaf63_dc4c_8601_ec8c_u64 % 64) as u32);
        assert_eq!(slot_of(b"a", 1), 0);
        assert_eq!(slot_of(b"a", 0), 0, "no slots at all is read as one");
        let mut per_slot = [0usize; 64];
        for (key, _) in partials(10_000).iter() {
            per_slot[slot_of(key, 64) as usize] += 1;
        }
        let (least, most) = (per_slot.iter().min().unwrap(), per_slot.iter().max().unwrap());
        assert!(*least > 100 && *most < 220, "10,000 keys over 64 slots: {least} to {most} a slot");
    }

    #[test]
    fn partials_cut_in_pieces_keep_every_key_once_in_order() {
        let all = partials(500);
        let whole = encode(&all);
        let pieces = encode_cut(&all, 1000);
        assert!(pieces.len() > 1 && pieces.iter().all(|p| p.len() <= 1000), "{} pieces", pieces.len());
        let decoded: Vec<KeyedValues> = pieces.iter().map(|p| decode(p).unwrap()).collect();
        let keys: Vec<&[u8]> = decoded.iter().flat_map(|d| d.iter().map(|(k, _)| k)).collect();
        assert_eq!(keys, all.iter().map(|(k, _)| k).collect::<Vec<_>>());
        assert_eq!(KeyedValues::merge(decoded, |_, _| unreachable!("no key twice")).unwrap(), all);
        assert_eq!(encode_cut(&all, usize::MAX), vec![whole]);
        // A key larger than a piece is a piece of its own.
        let big: KeyedValues =
            [(vec![b'k'; 3000], Value::I64(1)), (b"z".to_vec(), Value::I64(2))].into_iter().collect();
        let cut = encode_cut(&big, 1000);
        assert_eq!(cut.len(), 2);
        assert_eq!(decode(&cut[1]).unwrap().key(0), b"z");
        assert!(encode_cut(&KeyedValues::default(), 1000).is_empty());
    }

    #[test]
    fn partials_come_back_as_they_went_and_bad_bytes_are_refused() {
        let mut all = partials(3);
        all.push(b"zz", Value::from("text"));
        all.push(b"zzz", Value::Null);
        let bytes = encode(&all);
        assert_eq!(decode(&bytes).unwrap(), all);
        assert_eq!(decode(&encode(&KeyedValues::default())).unwrap(), KeyedValues::default());

        let refused = |bytes: &[u8]| decode(bytes).unwrap_err().to_string();
        assert!(refused(&bytes[..bytes.len() - 1]).contains("value 4"));
        assert!(refused(&[bytes.as_slice(), b"x"].concat()).contains("1 bytes more"));
        assert!(refused(&[0xff, 0xff, 0xff, 0xff, 0]).contains("claim 4294967295 keys"));
        assert!(refused(&[1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0]).contains("a key needs 2147483647 bytes"));
        let unsorted: KeyedValues = [(b"b", Value::Null), (b"a", Value::Null)].into_iter().collect();
        assert!(refused(&encode(&unsorted)).contains("key 1 is not after"));
        let twice: KeyedValues = [(b"a", Value::Null), (b"a", Value::Null)].into_iter().collect();
        assert!(refused(&encode(&twice)).contains("key 1 is not after"));
    }
}
