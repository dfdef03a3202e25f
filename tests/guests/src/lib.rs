//! Paths of the guest components the tests run, built once per test run by
//! this crate's build script (as wasmtime's `test-programs` and Spin's
//! `test-components` do). Every crate under `examples/` and `tests/guests/`
//! is a guest and gets a constant named for its package; a guest no test
//! names fails this crate's test.

/// A guest crate, as the build script found it.
#[derive(Clone, Copy, Debug)]
pub struct Guest {
    /// Its package name.
    pub package: &'static str,
    /// The constant holding its component's path.
    pub constant: &'static str,
    /// Its built component.
    pub component: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/components.rs"));

/// The identifiers `source` uses outside its `//` comments.
pub fn identifiers(source: &str) -> std::collections::BTreeSet<&str> {
    let code = source.lines().map(|line| line.find("//").map_or(line, |at| &line[..at]));
    code.flat_map(|line| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| !word.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// Where tests name guests: the integration tests (not the guests
    /// themselves) and the host's unit tests.
    const TEST_SOURCES: &[&str] = &["tests", "host"];

    /// The `.rs` files under `dir`, leaving out the guests' own sources.
    fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
        if dir == Path::new(REPO_ROOT).join("tests/guests") {
            return;
        }
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }

    #[test]
    fn every_guest_is_used_by_some_test() {
        let mut files = Vec::new();
        for dir in TEST_SOURCES {
            rust_files(&Path::new(REPO_ROOT).join(dir), &mut files);
        }
        let sources: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
        let used: std::collections::BTreeSet<&str> = sources.iter().flat_map(|s| identifiers(s)).collect();
        let unused: Vec<&str> = GUESTS.iter().filter(|g| !used.contains(g.constant)).map(|g| g.package).collect();
        assert!(
            unused.is_empty(),
            "no test under {TEST_SOURCES:?} runs the guests {unused:?}: use them or remove them"
        );
    }

    #[test]
    fn a_guest_is_used_only_where_its_whole_constant_is_named_outside_comments() {
        let source = "let c = HOSTILE_TOPOLOGIES; // HOSTILE\n/// WORD_COUNT\nrun(common::SPOUTS)";
        let words = identifiers(source);
        for (word, named) in [("HOSTILE_TOPOLOGIES", true), ("SPOUTS", true), ("HOSTILE", false), ("WORD_COUNT", false)]
        {
            assert_eq!(words.contains(word), named, "{word} in {words:?}");
        }
    }

    #[test]
    fn every_crate_under_the_guest_folders_is_found() {
        let packages: Vec<&str> = GUESTS.iter().map(|g| g.package).collect();
        // One from each folder.
        for package in ["word-count", "hostile"] {
            assert!(packages.contains(&package), "{package} missing from {packages:?}");
        }
        for guest in GUESTS {
            assert!(Path::new(guest.component).is_file(), "{} was not built", guest.component);
        }
    }
}
