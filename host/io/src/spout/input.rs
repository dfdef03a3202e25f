//! Opening a spout's input: anywhere for `weir run` (the user's own files),
//! only under the allowed directories for `weir serve` (`--input-dir`).
//!
//! A served input is checked on the file actually opened, every time one
//! is opened (restarts and each file of a directory included): the real
//! path of the open descriptor must lie under an allowed directory, so no
//! symlink or rename between a check and the open leads outside. A path
//! outside gets one answer whether it exists or not.

use anyhow::{Context, Result, anyhow, bail};
use std::ffi::CString;
use std::fs::{File, OpenOptions, ReadDir};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where a spout may read its input from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum InputScope {
    /// Anywhere this process can read.
    #[default]
    Anywhere,
    /// Only under these directories (and what lies below them), wherever
    /// symlinks point.
    Under(Vec<PathBuf>),
}

/// Flags for opening a served input: a FIFO must not block the open, a
/// terminal must not become the controlling one.
const CONFINED_FLAGS: i32 = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;

impl InputScope {
    /// Opens the input file `path` for reading.
    pub fn open_file(&self, path: &Path) -> Result<File> {
        let cannot = |e: std::io::Error| anyhow!("cannot read input {}: {e}", path.display());
        let file = match self {
            InputScope::Anywhere => File::open(path).map_err(cannot)?,
            InputScope::Under(_) => {
                self.check_before_opening(path)?;
                let file = OpenOptions::new().read(true).custom_flags(CONFINED_FLAGS).open(path).map_err(cannot)?;
                self.check_opened(&file, path)?;
                file
            }
        };
        check_is_file(&file, path, matches!(self, InputScope::Under(_)))?;
        Ok(file)
    }

    /// Opens the input directory `path`, whose files are then opened
    /// through it.
    pub fn open_dir(&self, path: &Path) -> Result<InputDir> {
        let cannot = |e: std::io::Error| anyhow!("cannot read input {}: {e}", path.display());
        if matches!(self, InputScope::Under(_)) {
            self.check_before_opening(path)?;
        }
        let dir =
            OpenOptions::new().read(true).custom_flags(CONFINED_FLAGS | libc::O_DIRECTORY).open(path).map_err(|e| {
                match e.raw_os_error() {
                    Some(libc::ENOTDIR) => anyhow!("cannot read input {}: it is not a directory", path.display()),
                    _ => cannot(e),
                }
            })?;
        self.check_opened(&dir, path)?;
        Ok(InputDir { dir, scope: self.clone(), shown: path.to_owned() })
    }

    fn refused(path: &Path) -> anyhow::Error {
        anyhow!("input {} is not under a directory this server allows (--input-dir)", path.display())
    }

    /// Whether the real path `real` lies under an allowed directory.
    fn allows(&self, real: &Path) -> bool {
        match self {
            InputScope::Anywhere => true,
            InputScope::Under(dirs) => {
                dirs.iter().filter_map(|d| d.canonicalize().ok()).any(|allowed| real.starts_with(allowed))
            }
        }
    }

    /// Refuses, before anything is opened, a path that resolves outside
    /// (what lies there, a device or a FIFO, is never opened), and answers a
    /// missing path with "no such file" only where its nearest existing
    /// ancestor lies inside: outside, missing and present read the same.
    fn check_before_opening(&self, path: &Path) -> Result<()> {
        for ancestor in path.ancestors() {
            let ancestor = if ancestor.as_os_str().is_empty() { Path::new(".") } else { ancestor };
            match ancestor.canonicalize() {
                Ok(real) if !self.allows(&real) => return Err(Self::refused(path)),
                Ok(_) if ancestor == path => return Ok(()),
                Ok(_) => bail!("cannot read input {}: no such file or directory", path.display()),
                // A link that leads nowhere (or in a loop) may lead outside.
                Err(_) if std::fs::symlink_metadata(ancestor).is_ok() => return Err(Self::refused(path)),
                Err(_) => continue,
            }
        }
        Err(Self::refused(path))
    }

    /// Refuses an opened descriptor whose real path lies outside: what was
    /// opened, not what a path named a moment before.
    fn check_opened(&self, file: &File, path: &Path) -> Result<()> {
        if matches!(self, InputScope::Anywhere) {
            return Ok(());
        }
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .with_context(|| format!("cannot tell where input {} leads", path.display()))?;
        if !self.allows(&real) {
            return Err(Self::refused(path));
        }
        Ok(())
    }
}

/// Refuses a directory, and where `regular` a FIFO, device or socket too (a
/// served input is a file someone put there, not a stream).
fn check_is_file(file: &File, path: &Path, regular: bool) -> Result<()> {
    let kind = file.metadata().with_context(|| format!("cannot read input {}", path.display()))?.file_type();
    if kind.is_dir() {
        bail!("cannot read input {}: it is a directory", path.display());
    }
    if regular && !kind.is_file() {
        bail!("cannot read input {}: it is not a regular file", path.display());
    }
    Ok(())
}

/// An opened input directory: listed and read through its descriptor, so a
/// rename or a re-pointed link of its path changes nothing, and each file
/// checked as it is opened.
pub struct InputDir {
    dir: File,
    scope: InputScope,
    shown: PathBuf,
}

impl InputDir {
    /// The directory's entries.
    pub fn read_dir(&self) -> Result<ReadDir> {
        std::fs::read_dir(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
            .with_context(|| format!("listing {}", self.shown.display()))
    }

    /// Opens the directory's file `name` (one path component).
    pub fn open_file(&self, name: &str) -> Result<File> {
        let shown = self.shown.join(name);
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            bail!("input {}: {name:?} is not a file name", self.shown.display());
        }
        let c_name = CString::new(Path::new(name).as_os_str().as_bytes())
            .map_err(|_| anyhow!("input {}: {name:?} is not a file name", self.shown.display()))?;
        // SAFETY: `c_name` is a NUL-terminated string that outlives the
        // call; the descriptor returned, if any, is owned by the File.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), c_name.as_ptr(), libc::O_RDONLY | CONFINED_FLAGS) };
        if fd < 0 {
            bail!("cannot read input {}: {}", shown.display(), std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        self.scope.check_opened(&file, &shown)?;
        check_is_file(&file, &shown, true)?;
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A directory `in` with the folder `sub` inside it, beside a directory
    /// `out`, in a directory removed when dropped.
    fn inside_and_outside(sub: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let (inside, outside) = (dir.path().join("in"), dir.path().join("out"));
        std::fs::create_dir_all(inside.join(sub)).unwrap();
        std::fs::create_dir(&outside).unwrap();
        (dir, inside, outside)
    }

    fn message(result: Result<impl Sized>) -> String {
        format!("{:#}", result.err().expect("refused"))
    }

    #[test]
    fn a_served_input_is_opened_only_under_the_allowed_directories() {
        let (_dir, inside, outside) = inside_and_outside("sub");
        std::fs::write(inside.join("a.txt"), "a\n").unwrap();
        std::fs::write(outside.join("secret.txt"), "s\n").unwrap();
        symlink(inside.join("a.txt"), inside.join("ok-link")).unwrap();
        symlink(outside.join("secret.txt"), inside.join("bad-link")).unwrap();
        symlink(&outside, inside.join("bad-dir")).unwrap();
        let scope = InputScope::Under(vec![inside.clone()]);

        assert!(scope.open_file(&inside.join("a.txt")).is_ok());
        assert!(scope.open_file(&inside.join("ok-link")).is_ok());
        assert!(scope.open_file(&inside.join("sub/../a.txt")).is_ok());
        let refused = "is not under a directory this server allows";
        for path in [
            inside.join("bad-link"),
            inside.join("bad-dir/secret.txt"),
            inside.join("../out/secret.txt"),
            outside.join("secret.txt"),
            // Missing outside reads as present outside.
            outside.join("missing.txt"),
            inside.join("bad-dir/missing.txt"),
            PathBuf::from("/nonexistent/x"),
        ] {
            assert!(message(scope.open_file(&path)).contains(refused), "{}", path.display());
        }
        let missing = message(scope.open_file(&inside.join("missing.txt")));
        assert!(missing.contains("no such file"), "{missing}");
        assert!(message(scope.open_file(&inside.join("sub"))).contains("it is a directory"));
        assert!(message(scope.open_dir(&inside.join("bad-dir"))).contains(refused));
        assert!(message(scope.open_dir(&inside.join("a.txt"))).contains("it is not a directory"));
    }

    #[test]
    fn a_directory_checks_each_file_as_it_opens_it() {
        let (_dir, inside, outside) = inside_and_outside("files");
        std::fs::write(inside.join("files/a.txt"), "a\n").unwrap();
        std::fs::write(outside.join("b.txt"), "b\n").unwrap();
        let scope = InputScope::Under(vec![inside.clone()]);
        let files = scope.open_dir(&inside.join("files")).unwrap();
        assert!(files.open_file("a.txt").is_ok());
        // Replaced by a link outside after the directory was opened.
        std::fs::remove_file(inside.join("files/a.txt")).unwrap();
        symlink(outside.join("b.txt"), inside.join("files/a.txt")).unwrap();
        assert!(message(files.open_file("a.txt")).contains("is not under a directory this server allows"));
        assert!(message(files.open_file("../out/b.txt")).contains("is not a file name"));
        // The directory itself renamed away: still listed through what was opened.
        std::fs::rename(inside.join("files"), inside.join("moved")).unwrap();
        let names: Vec<_> = files.read_dir().unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["a.txt"]);
    }

    #[test]
    fn anywhere_opens_any_readable_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        assert!(InputScope::Anywhere.open_file(&dir.path().join("a.txt")).is_ok());
        let missing = message(InputScope::Anywhere.open_file(Path::new("/nonexistent/input.txt")));
        assert!(missing.contains("cannot read input /nonexistent/input.txt"), "{missing}");
    }
}
