//! The built-in transactional spout over the lines of a directory's files,
//! file by file in name order. A batch never spans two files; its metadata is
//! the batch's line range and the file's name. Files added later are read
//! when their turn comes; a file must not change once written, and a run that
//! resumes in a file that was truncated or replaced halts, as
//! [`FileLines`] does.

use super::contract::{Emitted, Spout};
use super::file_lines::{FileLines, LineRange};
use super::input::{InputDir, InputScope};
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use weir_plan::SpoutKind;
use weir_sdk::codec::{Batch, Buffers};

/// Reads batches of lines from the files of a directory.
pub struct DirectoryLines {
    dir: PathBuf,
    input: InputDir,
    batch_size: usize,
    open: Option<(String, FileLines)>,
}

/// The range's span, the file's name, then a NUL and the hash of the
/// range's tail (a file name holds no NUL: metadata written before the
/// hash was kept ends with the name).
fn encode(file: &str, range: &LineRange) -> Vec<u8> {
    let mut meta = range.span().to_vec();
    meta.extend_from_slice(file.as_bytes());
    if let Some(tail) = range.tail {
        meta.push(0);
        meta.extend_from_slice(&tail.to_le_bytes());
    }
    meta
}

fn decode(meta: &[u8]) -> Result<(String, LineRange)> {
    let Some((span, rest)) = meta.split_first_chunk::<24>() else {
        bail!("directory metadata has {} bytes, expected at least 24", meta.len());
    };
    let (file, tail) = match rest.iter().position(|&b| b == 0) {
        None => (rest, None),
        Some(at) => {
            let tail: [u8; 8] = rest[at + 1..]
                .try_into()
                .map_err(|_| anyhow::anyhow!("directory metadata has {} bytes after its file name", rest.len() - at))?;
            (&rest[..at], Some(u64::from_le_bytes(tail)))
        }
    };
    Ok((String::from_utf8(file.to_vec())?, LineRange::from_span(span, tail)))
}

impl DirectoryLines {
    /// Reads the files of `dir`, `batch_size` lines per batch.
    pub fn open(dir: &Path, batch_size: usize) -> Result<DirectoryLines> {
        DirectoryLines::open_in(&InputScope::Anywhere, dir, batch_size)
    }

    /// Reads the files of `dir` if `scope` allows it (each file checked as
    /// it is opened), `batch_size` lines per batch.
    pub fn open_in(scope: &InputScope, dir: &Path, batch_size: usize) -> Result<DirectoryLines> {
        let input = scope.open_dir(dir)?;
        Ok(DirectoryLines { dir: dir.to_owned(), input, batch_size, open: None })
    }

    fn file(&mut self, name: &str) -> Result<&mut FileLines> {
        if self.open.as_ref().is_none_or(|(open, _)| open != name) {
            let file = self.input.open_file(name)?;
            let lines = FileLines::reading(file, &self.dir.join(name), self.batch_size);
            self.open = Some((name.to_owned(), lines));
        }
        Ok(&mut self.open.as_mut().expect("opened above").1)
    }

    /// Names of the directory's files after `after`, in order.
    fn files_after(&self, after: Option<&str>) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in self.input.read_dir()? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let Ok(name) = entry.file_name().into_string() else { continue };
            if after.is_none_or(|after| name.as_str() > after) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
}

impl Spout for DirectoryLines {
    fn kind(&self) -> SpoutKind {
        SpoutKind::Transactional
    }

    fn emit(&mut self, txid: u64, _attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        let previous = previous.map(decode).transpose()?;
        if let Some((file, range)) = &previous {
            let batch_size = self.batch_size;
            let lines = self.file(file)?;
            lines.check_read(range, txid)?;
            if let Some((range, batch)) = lines.next_batch(range.end, batch_size)? {
                return Ok(Some(Emitted { meta: encode(file, &range), batch }));
            }
        }
        for file in self.files_after(previous.as_ref().map(|(f, _)| f.as_str()))? {
            let batch_size = self.batch_size;
            if let Some((range, batch)) = self.file(&file)?.next_batch(0, batch_size)? {
                return Ok(Some(Emitted { meta: encode(&file, &range), batch }));
            }
        }
        Ok(None)
    }

    fn replay(&mut self, _txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        let (file, range) = decode(meta)?;
        self.file(&file)?.read_range(&range)
    }

    fn recycle(&mut self, buffers: Buffers) {
        if let Some((_, lines)) = &mut self.open {
            lines.recycle(buffers);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(batch: &Batch<'_>) -> Vec<String> {
        batch.rows().map(|r| format!("{:?}", r.get(0).unwrap())).collect()
    }

    #[test]
    fn files_are_read_in_name_order_and_new_ones_are_picked_up() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.txt"), "b1\n").unwrap();
        std::fs::write(dir.path().join("a.txt"), "a1\na2\na3\n").unwrap();
        let mut spout = DirectoryLines::open(dir.path(), 2).unwrap();
        let one = spout.emit(1, 0, None).unwrap().unwrap();
        let two = spout.emit(2, 0, Some(&one.meta)).unwrap().unwrap();
        let three = spout.emit(3, 0, Some(&two.meta)).unwrap().unwrap();
        assert_eq!(lines(&one.batch), ["Str(\"a1\")", "Str(\"a2\")"]);
        assert_eq!(lines(&two.batch), ["Str(\"a3\")"]);
        assert_eq!(lines(&three.batch), ["Str(\"b1\")"]);
        assert!(spout.emit(4, 0, Some(&three.meta)).unwrap().is_none());
        std::fs::write(dir.path().join("c.txt"), "c1\n").unwrap();
        let four = spout.emit(4, 0, Some(&three.meta)).unwrap().unwrap();
        assert_eq!(lines(&four.batch), ["Str(\"c1\")"]);
        assert_eq!(spout.replay(2, 1, &two.meta).unwrap().bytes(), two.batch.bytes());
    }

    #[test]
    fn metadata_of_an_earlier_release_still_resumes_and_a_replaced_file_halts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a1\na2\na3\n").unwrap();
        let mut spout = DirectoryLines::open(dir.path(), 2).unwrap();
        let one = spout.emit(1, 0, None).unwrap().unwrap();
        let (file, range) = decode(&one.meta).unwrap();
        assert_eq!((file.as_str(), range.tail.is_some()), ("a.txt", true));
        // The earlier layout: the span, then the name.
        let old = [&range.span()[..], b"a.txt"].concat();
        assert_eq!(decode(&old).unwrap(), ("a.txt".to_owned(), LineRange { tail: None, ..range }));
        let next = DirectoryLines::open(dir.path(), 2).unwrap().emit(2, 0, Some(&old)).unwrap().unwrap();
        assert_eq!(lines(&next.batch), ["Str(\"a3\")"]);
        std::fs::write(dir.path().join("a.txt"), "b1\nb2\nb3\n").unwrap();
        let err = DirectoryLines::open(dir.path(), 2).unwrap().emit(2, 0, Some(&one.meta)).err().unwrap();
        assert!(super::super::input_changed(&err), "{err}");
        assert!(err.to_string().contains("a.txt changed: bytes 0..6"), "{err}");
    }
}
