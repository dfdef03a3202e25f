//! The built-in transactional spout over the lines of a file.
//!
//! A batch is a byte range of whole lines. The range of txid n is recorded
//! before the batch is processed; a replay reads exactly that range again, so
//! it emits exactly the same tuples. Lines appended to the file later are
//! picked up by the next batches.
//!
//! A range also keeps a hash of its last bytes. A run that resumes after a
//! recorded range first checks that the input still holds those bytes there:
//! an input truncated or replaced since would otherwise be read from the
//! middle of other lines, or not at all, and the topology would count
//! nothing without a word. Ranges recorded before the hash was kept (24
//! bytes of metadata) resume with the size check alone.

use super::contract::{Emitted, Spout};
use super::input::InputScope;
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use weir_plan::SpoutKind;
use weir_sdk::codec::{Batch, BatchWriter, Buffers, ValueRef};

/// Bytes at the end of a range whose hash its metadata keeps.
const TAIL: u64 = 1024;

/// Bytes of one line. A line is one tuple, which a guest must hold in its
/// memory (64 MiB by default) with what it makes of it; without a bound, an
/// input with no newline (a binary file, or a hostile one) would be read
/// whole into the host's memory.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Bytes of input one batch takes: a batch of long lines ends short of its
/// line count here, so that a batch, like the batches in flight together
/// (`RunConfig::max_pending_bytes`), holds a bounded share of the input.
const MAX_BATCH_BYTES: u64 = 64 << 20;

/// The input no longer holds what earlier batches read from it: neither a
/// replay nor a retry can cure it, and the topology halts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputChanged(pub String);

impl fmt::Display for InputChanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputChanged {}

/// Whether `error` says that an input changed under batches that read it.
pub fn input_changed(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<InputChanged>())
}

/// The lines of a batch: bytes `start..end` of the file, `lines` lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRange {
    /// Offset of the first line.
    pub start: u64,
    /// Offset just past the last line (and its newline).
    pub end: u64,
    /// Number of lines.
    pub lines: u64,
    /// Hash of the range's last bytes (up to 1 KiB); `None` in metadata
    /// written before it was kept.
    pub tail: Option<u64>,
}

impl LineRange {
    /// The offsets and line count, as the metadata's first 24 bytes.
    pub(super) fn span(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        for (i, n) in [self.start, self.end, self.lines].into_iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&n.to_le_bytes());
        }
        out
    }

    /// The range of `span` (see [`LineRange::span`]) with `tail`.
    pub(super) fn from_span(span: &[u8; 24], tail: Option<u64>) -> LineRange {
        let n = |i: usize| u64::from_le_bytes(span[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        LineRange { start: n(0), end: n(1), lines: n(2), tail }
    }

    /// The metadata stored for the batch: the span, then the tail's hash.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.span().to_vec();
        out.extend(self.tail.map(u64::to_le_bytes).into_iter().flatten());
        out
    }

    /// Reads what [`LineRange::encode`] wrote, or the 24 bytes of a range
    /// recorded before the tail's hash was kept.
    pub fn decode(bytes: &[u8]) -> Result<LineRange> {
        let Some((span, tail)) = bytes.split_first_chunk::<24>() else {
            bail!("stored line range has {} bytes, expected 24 or 32", bytes.len())
        };
        let tail = match tail {
            [] => None,
            tail => Some(u64::from_le_bytes(
                tail.try_into()
                    .map_err(|_| anyhow::anyhow!("stored line range has {} bytes, expected 24 or 32", bytes.len()))?,
            )),
        };
        Ok(LineRange::from_span(span, tail))
    }
}

/// Reads batches of lines from a file.
pub struct FileLines {
    path: PathBuf,
    reader: BufReader<File>,
    position: u64,
    line: Vec<u8>,
    batch_size: usize,
    /// The last range this spout read or checked: what follows it needs no
    /// check.
    known: Option<LineRange>,
    /// The file may still grow (the topology follows it): a last line
    /// without its newline may be half written, and waits for it.
    follows: bool,
    /// Buffers for the next batch ([`Spout::recycle`]).
    spare: Buffers,
}

impl Spout for FileLines {
    fn kind(&self) -> SpoutKind {
        SpoutKind::Transactional
    }

    fn asks_cheaply(&self) -> bool {
        true
    }

    fn emit(&mut self, txid: u64, _attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        let previous = previous.map(LineRange::decode).transpose()?;
        if let Some(previous) = &previous {
            self.check_read(previous, txid)?;
        }
        let batch = self.next_batch(previous.map_or(0, |r| r.end), self.batch_size)?;
        Ok(batch.map(|(range, batch)| Emitted { meta: range.encode(), batch }))
    }

    fn replay(&mut self, _txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        self.read_range(&LineRange::decode(meta)?)
    }

    fn recycle(&mut self, buffers: Buffers) {
        if buffers.capacity() > self.spare.capacity() {
            self.spare = buffers;
        }
    }

    fn lag(&mut self, committed: Option<&[u8]>) -> Option<u64> {
        let done = committed.map(LineRange::decode).transpose().ok()?.map_or(0, |r| r.end);
        // The file opened, not whatever its path names now.
        let size = self.reader.get_ref().metadata().ok()?.len();
        Some(size.saturating_sub(done))
    }
}

impl FileLines {
    /// Opens the input file, for batches of `batch_size` lines.
    pub fn open(path: &Path, batch_size: usize) -> Result<FileLines> {
        FileLines::open_in(&InputScope::Anywhere, path, batch_size)
    }

    /// Opens the input file if `scope` allows it, for batches of
    /// `batch_size` lines.
    pub fn open_in(scope: &InputScope, path: &Path, batch_size: usize) -> Result<FileLines> {
        Ok(FileLines::reading(scope.open_file(path)?, path, batch_size))
    }

    /// Reads the opened input `file`, named `path` in errors.
    pub(super) fn reading(file: File, path: &Path, batch_size: usize) -> FileLines {
        FileLines {
            path: path.to_owned(),
            reader: BufReader::with_capacity(1 << 20, file),
            position: 0,
            line: Vec::new(),
            batch_size,
            known: None,
            follows: false,
            spare: Buffers::default(),
        }
    }

    /// Treats the file as one that may still grow: a last line is emitted
    /// once its newline is written, never half.
    pub fn following(self, follows: bool) -> FileLines {
        FileLines { follows, ..self }
    }

    /// Checks that the input still holds `range`, which the batch before
    /// `txid` read (in this run or an earlier one): a range this spout has
    /// just read needs no check. The error is an [`InputChanged`].
    pub fn check_read(&mut self, range: &LineRange, txid: u64) -> Result<()> {
        if self.known == Some(*range) {
            return Ok(());
        }
        let path = self.path.display().to_string();
        let size = self.reader.get_ref().metadata()?.len();
        if size < range.end {
            bail!(InputChanged(format!(
                "input {path} holds {size} bytes, fewer than the {} that the batches before txid {txid} read: it \
                 was truncated or replaced since they were committed (restore it, or start again on a new data dir)",
                range.end
            )));
        }
        if let Some(tail) = range.tail
            && self.tail_hash(range)? != tail
        {
            bail!(InputChanged(format!(
                "input {path} changed: bytes {}..{}, the last that the batches before txid {txid} read, are not \
                 what they were: it was replaced or rewritten since they were committed (restore it, or start \
                 again on a new data dir)",
                range.end - range.tail_len(),
                range.end
            )));
        }
        self.known = Some(*range);
        Ok(())
    }

    /// The hash of `range`'s last bytes as the input holds them now; the
    /// reader is left at the range's end.
    fn tail_hash(&mut self, range: &LineRange) -> Result<u64> {
        let len = range.tail_len();
        let at = range.end - len;
        if self.position == range.end {
            // Just read: the tail is usually still in the reader's buffer.
            self.reader.seek_relative(-(len as i64))?;
            self.position = at;
        } else {
            self.seek(at)?;
        }
        let mut tail = vec![0u8; len as usize];
        self.reader.read_exact(&mut tail).with_context(|| format!("reading input {}", self.path.display()))?;
        self.position = range.end;
        Ok(hash(&tail))
    }

    fn seek(&mut self, offset: u64) -> Result<()> {
        if offset != self.position {
            self.reader.seek(SeekFrom::Start(offset))?;
            self.position = offset;
        }
        Ok(())
    }

    /// Appends the next line to `writer`, without its line ending; false at
    /// the end of the file. A line that lies whole in the reader's buffer
    /// is copied once, from there into the batch.
    fn push_next_line(&mut self, writer: &mut BatchWriter) -> Result<bool> {
        let start = self.position;
        let buffered = self.reader.fill_buf()?;
        if let Some(newline) = memchr::memchr(b'\n', buffered) {
            push_line(writer, &self.path, start, &buffered[..=newline])?;
            self.reader.consume(newline + 1);
            self.position += newline as u64 + 1;
            return Ok(true);
        }
        // The line runs past the buffer, or is the last one and has no
        // newline: gather it.
        self.line.clear();
        // Until the read ends, where the reader stands is unknown: a
        // failure leaves the next batch to seek.
        self.position = u64::MAX;
        let n = (&mut self.reader).take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut self.line)?;
        self.position = start + n as u64;
        if n > MAX_LINE_BYTES && self.line.last() != Some(&b'\n') {
            bail!(
                "input {}: the line at byte {start} is longer than {} MiB",
                self.path.display(),
                MAX_LINE_BYTES >> 20
            );
        }
        if self.follows && n > 0 && self.line.last() != Some(&b'\n') {
            // Perhaps half written: read it again when its newline comes.
            self.position = u64::MAX;
            self.reader.seek_relative(-(n as i64))?;
            self.position = start;
            return Ok(false);
        }
        if n > 0 {
            push_line(writer, &self.path, start, &self.line)?;
        }
        Ok(n > 0)
    }

    /// A writer for a batch of about `bytes` bytes, into the spare buffers.
    fn writer(&mut self, bytes: usize) -> BatchWriter {
        BatchWriter::reusing(1, bytes, std::mem::take(&mut self.spare))
    }

    /// The next batch: up to `max_lines` lines from byte `start`, packed one
    /// line per tuple. `None` when no line is left.
    pub fn next_batch(&mut self, start: u64, max_lines: usize) -> Result<Option<(LineRange, Batch<'static>)>> {
        self.seek(start)?;
        let mut writer = self.writer(max_lines * 64);
        while writer.rows() < max_lines
            && self.position - start < MAX_BATCH_BYTES
            && self.push_next_line(&mut writer)?
        {}
        if writer.rows() == 0 {
            return Ok(None);
        }
        let mut range = LineRange { start, end: self.position, lines: writer.rows() as u64, tail: None };
        range.tail = Some(self.tail_hash(&range)?);
        self.known = Some(range);
        Ok(Some((range, writer.finish_batch())))
    }

    /// The batch of a recorded range, exactly as first emitted.
    pub fn read_range(&mut self, range: &LineRange) -> Result<Batch<'static>> {
        self.seek(range.start)?;
        let mut writer = self.writer((range.end - range.start) as usize + 16 * range.lines as usize);
        while self.position < range.end && self.push_next_line(&mut writer)? {}
        let changed = self.position != range.end
            || writer.rows() as u64 != range.lines
            || range.tail.is_some_and(|tail| self.tail_hash(range).ok() != Some(tail));
        if changed {
            bail!(InputChanged(format!(
                "input {} changed: bytes {}..{} no longer hold the {} lines recorded for this batch",
                self.path.display(),
                range.start,
                range.end,
                range.lines
            )));
        }
        self.known = Some(*range);
        Ok(writer.finish_batch())
    }
}

impl LineRange {
    /// Bytes of the range that its tail's hash covers.
    fn tail_len(&self) -> u64 {
        (self.end - self.start).min(TAIL)
    }
}

/// The first eight bytes of `bytes`' SHA-256.
fn hash(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(Sha256::digest(bytes)[..8].try_into().expect("8 bytes"))
}

/// Appends `line` (read at byte `offset` of the input `path`), less its
/// line ending, as a tuple of one string.
fn push_line(writer: &mut BatchWriter, path: &Path, offset: u64, line: &[u8]) -> Result<()> {
    let line = match line.strip_suffix(b"\n") {
        Some(line) => line.strip_suffix(b"\r").unwrap_or(line),
        None => line,
    };
    let line = weir_sdk::codec::utf8(line)
        .map_err(|e| anyhow::anyhow!("input {}: the line at byte {offset} is not UTF-8 ({e})", path.display()))?;
    writer.push_row(0, [ValueRef::Str(line)]).expect("one value per row");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file `in.txt` holding `contents`, in a directory removed when dropped.
    fn input(contents: impl AsRef<[u8]>) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, contents).unwrap();
        (dir, path)
    }

    fn lines(batch: &Batch<'_>) -> Vec<String> {
        batch.rows().map(|r| r.get(0).map(|v| format!("{v:?}")).unwrap()).collect()
    }

    #[test]
    fn batches_cover_the_file_and_replay_exactly() {
        let (_dir, path) = input("a b\r\nc\n\nlast");
        let mut spout = FileLines::open(&path, 2).unwrap();
        let (first, batch1) = spout.next_batch(0, 2).unwrap().unwrap();
        assert_eq!(first, LineRange { start: 0, end: 7, lines: 2, tail: Some(hash(b"a b\r\nc\n")) });
        assert_eq!(lines(&batch1), ["Str(\"a b\")", "Str(\"c\")"]);
        // Later batches are written into the buffers of dropped ones.
        let dropped = || {
            let mut writer = BatchWriter::new(1);
            for tag in 0..20 {
                writer.push_row(tag, [ValueRef::Str("a line left over")]).unwrap();
            }
            writer.finish_batch().into_buffers().expect("an owned batch")
        };
        spout.recycle(dropped());
        let (second, batch2) = spout.next_batch(first.end, 2).unwrap().unwrap();
        assert_eq!(second, LineRange { start: 7, end: 12, lines: 2, tail: Some(hash(b"\nlast")) });
        assert_eq!(lines(&batch2), ["Str(\"\")", "Str(\"last\")"]);
        assert!(spout.next_batch(second.end, 2).unwrap().is_none());
        spout.recycle(dropped());
        let replayed = spout.read_range(&first).unwrap();
        assert_eq!((replayed.bytes(), replayed.len()), (batch1.bytes(), 2));
        assert_eq!(LineRange::decode(&second.encode()).unwrap(), second);
    }

    #[test]
    fn a_followed_file_emits_a_half_written_last_line_once_it_is_whole() {
        let (_dir, path) = input("one\ntw");
        let mut spout = FileLines::open(&path, 10).unwrap().following(true);
        let first = spout.emit(1, 0, None).unwrap().unwrap();
        assert_eq!(lines(&first.batch), ["Str(\"one\")"]);
        assert!(spout.emit(2, 0, Some(&first.meta)).unwrap().is_none());
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"o\nthree").unwrap();
        let second = spout.emit(2, 0, Some(&first.meta)).unwrap().unwrap();
        assert_eq!(lines(&second.batch), ["Str(\"two\")"]);
        // Not followed, the file is whole as it is: its last line is too.
        let mut whole = FileLines::open(&path, 10).unwrap();
        let all = whole.emit(1, 0, None).unwrap().unwrap();
        assert_eq!(lines(&all.batch), ["Str(\"one\")", "Str(\"two\")", "Str(\"three\")"]);
    }

    #[test]
    fn lines_across_the_read_buffer_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        let expected: Vec<String> = (0..100_000).map(|i| format!("line {i} {}", "x".repeat(i % 23))).collect();
        std::fs::write(&path, expected.join("\n")).unwrap();
        let mut spout = FileLines::open(&path, 1).unwrap();
        let (range, batch) = spout.next_batch(0, 200_000).unwrap().unwrap();
        assert!(range.end > 1 << 20, "the file is larger than the read buffer");
        assert_eq!(lines(&batch), expected.iter().map(|l| format!("Str({l:?})")).collect::<Vec<_>>());
    }

    #[test]
    fn a_line_past_the_bound_is_an_error_naming_its_offset_and_long_lines_end_a_batch_early() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        let longest = "x".repeat(MAX_LINE_BYTES);
        std::fs::write(&path, format!("ok\n{longest}\n{longest}\n{longest}\n{longest}\n{longest}\nlast\n")).unwrap();
        // Lines of the longest length are read; a batch of them ends once
        // it has taken 64 MiB of input.
        let mut spout = FileLines::open(&path, 10).unwrap();
        let (first, batch) = spout.next_batch(0, 10).unwrap().unwrap();
        assert_eq!(batch.len(), 5, "ok and four of the longest lines");
        let (_, rest) = spout.next_batch(first.end, 10).unwrap().unwrap();
        assert_eq!(lines(&rest).last().unwrap(), "Str(\"last\")");
        // One byte longer, followed or not, newline or none: an error.
        for (text, follows) in [(format!("ok\n{longest}x\n"), false), (format!("ok\n{longest}x"), true)] {
            std::fs::write(&path, text).unwrap();
            let mut spout = FileLines::open(&path, 10).unwrap().following(follows);
            // A retry reads the same line again, and fails the same way.
            for _ in 0..2 {
                let err = spout.next_batch(3, 10).unwrap_err();
                assert!(err.to_string().ends_with("the line at byte 3 is longer than 16 MiB"), "{err}");
            }
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error_naming_its_offset() {
        let (_dir, path) = input(b"ok\n\xff bad\nmore\n");
        let err = FileLines::open(&path, 10).unwrap().next_batch(0, 10).unwrap_err();
        assert!(err.to_string().contains("the line at byte 3 is not UTF-8"), "{err}");
    }

    #[test]
    fn lag_is_the_input_not_yet_committed() {
        let (_dir, path) = input("one\ntwo\n");
        let mut spout = FileLines::open(&path, 1).unwrap();
        assert_eq!(Spout::lag(&mut spout, None), Some(8));
        let first = spout.emit(1, 0, None).unwrap().unwrap();
        assert_eq!(Spout::lag(&mut spout, Some(&first.meta)), Some(4));
    }

    #[test]
    fn a_changed_file_is_an_error_on_replay() {
        let (_dir, path) = input("one\ntwo\n");
        let mut spout = FileLines::open(&path, 2).unwrap();
        let (range, _) = spout.next_batch(0, 10).unwrap().unwrap();
        std::fs::write(&path, "one\n").unwrap();
        let err = FileLines::open(&path, 2).unwrap().read_range(&range).unwrap_err();
        assert!(err.to_string().contains("changed"), "{err}");
    }

    /// `text` in `dir/in.txt`, and the range of its first batch of 2 lines.
    fn committed(dir: &Path, text: &str) -> (PathBuf, LineRange) {
        let path = dir.join("in.txt");
        std::fs::write(&path, text).unwrap();
        let first = FileLines::open(&path, 2).unwrap().emit(1, 0, None).unwrap().unwrap();
        (path, LineRange::decode(&first.meta).unwrap())
    }

    fn resumed(path: &Path, range: &LineRange) -> Result<Option<Emitted>> {
        FileLines::open(path, 2).unwrap().emit(2, 0, Some(&range.encode()))
    }

    #[test]
    fn a_run_resumes_where_the_last_one_stopped_in_a_file_that_grew() {
        let dir = tempfile::tempdir().unwrap();
        let (path, range) = committed(dir.path(), "one\ntwo\nthree\n");
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"four\n").unwrap();
        let next = resumed(&path, &range).unwrap().unwrap();
        assert_eq!(lines(&next.batch), ["Str(\"three\")", "Str(\"four\")"]);
    }

    #[test]
    fn an_input_truncated_or_replaced_under_committed_batches_halts_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let (path, range) = committed(dir.path(), "one\ntwo\nthree\n");
        std::fs::write(&path, "one\n").unwrap();
        let err = resumed(&path, &range).err().unwrap();
        assert!(input_changed(&err));
        let expected = format!(
            "input {} holds 4 bytes, fewer than the 8 that the batches before txid 2 read: it was truncated or \
             replaced since they were committed (restore it, or start again on a new data dir)",
            path.display()
        );
        assert_eq!(err.to_string(), expected);
        // Replaced by other lines at least as long: the same size check
        // passes, the tail's hash does not.
        std::fs::write(&path, "uno\ndos\ntres\n").unwrap();
        let err = resumed(&path, &range).err().unwrap();
        assert!(input_changed(&err));
        assert!(err.to_string().contains("changed: bytes 0..8, the last that the batches before txid 2 read"), "{err}");
        let err = FileLines::open(&path, 2).unwrap().read_range(&range).unwrap_err();
        assert!(input_changed(&err), "a replay of the range finds the change too: {err}");
    }

    #[test]
    fn a_range_recorded_by_an_earlier_release_still_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let (path, range) = committed(dir.path(), "one\ntwo\nthree\n");
        let old = LineRange { tail: None, ..range };
        assert_eq!(old.encode(), range.encode()[..24], "24 bytes: offsets and line count");
        assert_eq!(LineRange::decode(&old.encode()).unwrap(), old);
        let next = FileLines::open(&path, 2).unwrap().emit(2, 0, Some(&old.encode())).unwrap().unwrap();
        assert_eq!(lines(&next.batch), ["Str(\"three\")"]);
        assert_eq!(FileLines::open(&path, 2).unwrap().replay(1, 1, &old.encode()).unwrap().len(), 2);
        std::fs::write(&path, "one\n").unwrap();
        let err = FileLines::open(&path, 2).unwrap().emit(2, 0, Some(&old.encode())).err().unwrap();
        assert!(input_changed(&err), "the size check still holds: {err}");
        let err = LineRange::decode(&[0; 30]).unwrap_err();
        assert_eq!(err.to_string(), "stored line range has 30 bytes, expected 24 or 32");
    }

    #[test]
    fn missing_input_is_a_clear_error() {
        let err = FileLines::open(Path::new("/nonexistent/input.txt"), 1).err().unwrap();
        assert!(err.to_string().contains("cannot read input /nonexistent/input.txt"), "{err}");
    }
}
