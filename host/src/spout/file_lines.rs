//! The built-in transactional spout over the lines of a file.
//!
//! A batch is a byte range of whole lines. The range of txid n is recorded
//! before the batch is processed; a replay reads exactly that range again, so
//! it emits exactly the same tuples. Lines appended to the file later are
//! picked up by the next batches.

use super::{Emitted, InputScope, Spout, SpoutKind};
use anyhow::{Result, bail};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use weir_sdk::codec::{Batch, BatchWriter, ValueRef};

/// The lines of a batch: bytes `start..end` of the file, `lines` lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRange {
    /// Offset of the first line.
    pub start: u64,
    /// Offset just past the last line (and its newline).
    pub end: u64,
    /// Number of lines.
    pub lines: u64,
}

impl LineRange {
    /// The metadata stored for the batch.
    pub fn encode(&self) -> Vec<u8> {
        [self.start, self.end, self.lines].iter().flat_map(|n| n.to_le_bytes()).collect()
    }

    /// Reads what [`LineRange::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<LineRange> {
        let Ok(bytes) = <[u8; 24]>::try_from(bytes) else {
            bail!("stored line range has {} bytes, expected 24", bytes.len())
        };
        let n = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Ok(LineRange { start: n(0), end: n(1), lines: n(2) })
    }
}

/// Reads batches of lines from a file.
pub struct FileLines {
    path: PathBuf,
    reader: BufReader<File>,
    position: u64,
    line: Vec<u8>,
    batch_size: usize,
}

impl Spout for FileLines {
    fn kind(&self) -> SpoutKind {
        SpoutKind::Transactional
    }

    fn emit(&mut self, _txid: u64, _attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        let start = previous.map(LineRange::decode).transpose()?.map_or(0, |r| r.end);
        let batch = self.next_batch(start, self.batch_size)?;
        Ok(batch.map(|(range, batch)| Emitted { meta: range.encode(), batch }))
    }

    fn replay(&mut self, _txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        self.read_range(&LineRange::decode(meta)?)
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
        }
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
        let n = self.reader.read_until(b'\n', &mut self.line)?;
        self.position += n as u64;
        if n > 0 {
            push_line(writer, &self.path, start, &self.line)?;
        }
        Ok(n > 0)
    }

    /// The next batch: up to `max_lines` lines from byte `start`, packed one
    /// line per tuple. `None` when no line is left.
    pub fn next_batch(&mut self, start: u64, max_lines: usize) -> Result<Option<(LineRange, Batch<'static>)>> {
        self.seek(start)?;
        let mut writer = BatchWriter::with_capacity(1, max_lines * 64);
        while writer.rows() < max_lines && self.push_next_line(&mut writer)? {}
        if writer.rows() == 0 {
            return Ok(None);
        }
        let range = LineRange { start, end: self.position, lines: writer.rows() as u64 };
        Ok(Some((range, writer.finish_batch())))
    }

    /// The batch of a recorded range, exactly as first emitted.
    pub fn read_range(&mut self, range: &LineRange) -> Result<Batch<'static>> {
        self.seek(range.start)?;
        let mut writer = BatchWriter::with_capacity(1, (range.end - range.start) as usize + 16 * range.lines as usize);
        while self.position < range.end && self.push_next_line(&mut writer)? {}
        if self.position != range.end || writer.rows() as u64 != range.lines {
            bail!(
                "input {} changed: bytes {}..{} no longer hold the {} lines recorded for this batch",
                self.path.display(),
                range.start,
                range.end,
                range.lines
            );
        }
        Ok(writer.finish_batch())
    }
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

    fn lines(batch: &Batch<'_>) -> Vec<String> {
        batch.rows().map(|r| r.get(0).map(|v| format!("{v:?}")).unwrap()).collect()
    }

    #[test]
    fn batches_cover_the_file_and_replay_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "a b\r\nc\n\nlast").unwrap();
        let mut spout = FileLines::open(&path, 2).unwrap();
        let (first, batch1) = spout.next_batch(0, 2).unwrap().unwrap();
        assert_eq!(first, LineRange { start: 0, end: 7, lines: 2 });
        assert_eq!(lines(&batch1), ["Str(\"a b\")", "Str(\"c\")"]);
        let (second, batch2) = spout.next_batch(first.end, 2).unwrap().unwrap();
        assert_eq!(second, LineRange { start: 7, end: 12, lines: 2 });
        assert_eq!(lines(&batch2), ["Str(\"\")", "Str(\"last\")"]);
        assert!(spout.next_batch(second.end, 2).unwrap().is_none());
        assert_eq!(spout.read_range(&first).unwrap().bytes(), batch1.bytes());
        assert_eq!(LineRange::decode(&second.encode()).unwrap(), second);
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
    fn a_line_that_is_not_utf8_is_an_error_naming_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, b"ok\n\xff bad\nmore\n").unwrap();
        let err = FileLines::open(&path, 10).unwrap().next_batch(0, 10).unwrap_err();
        assert!(err.to_string().contains("the line at byte 3 is not UTF-8"), "{err}");
    }

    #[test]
    fn lag_is_the_input_not_yet_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        let mut spout = FileLines::open(&path, 1).unwrap();
        assert_eq!(Spout::lag(&mut spout, None), Some(8));
        let first = spout.emit(1, 0, None).unwrap().unwrap();
        assert_eq!(Spout::lag(&mut spout, Some(&first.meta)), Some(4));
    }

    #[test]
    fn a_changed_file_is_an_error_on_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        let mut spout = FileLines::open(&path, 2).unwrap();
        let (range, _) = spout.next_batch(0, 10).unwrap().unwrap();
        std::fs::write(&path, "one\n").unwrap();
        let err = FileLines::open(&path, 2).unwrap().read_range(&range).unwrap_err();
        assert!(err.to_string().contains("changed"), "{err}");
    }

    #[test]
    fn missing_input_is_a_clear_error() {
        let err = FileLines::open(Path::new("/nonexistent/input.txt"), 1).err().unwrap();
        assert!(err.to_string().contains("cannot read input /nonexistent/input.txt"), "{err}");
    }
}
