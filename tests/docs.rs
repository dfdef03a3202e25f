//! The docs name the repository's own files: every path a page names in
//! backticks must exist, and every page must be reachable from the README.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The paths a page names: what is written in backticks and holds a `/`
/// (the repository's own files and folders).
fn named_paths(doc: &str) -> Vec<&str> {
    doc.split('`').skip(1).step_by(2).filter(|s| s.contains('/') && !s.contains(' ')).collect()
}

/// Every Markdown page under `docs/`, and the README.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.push(root().join("README.md"));
    pages.sort();
    pages
}

#[test]
fn the_architecture_names_the_rooms_files() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let paths = named_paths(&doc);
    assert!(paths.len() > 30, "the map names the rooms' files: {paths:?}");
}

#[test]
fn every_path_a_doc_page_names_exists() {
    let mut missing = Vec::new();
    for page in pages() {
        let doc = std::fs::read_to_string(&page).unwrap();
        for path in named_paths(&doc) {
            if !root().join(path.trim_end_matches(['.', ','])).exists() && !is_not_a_path(path) {
                missing.push(format!("{}: {path}", page.strip_prefix(root()).unwrap().display()));
            }
        }
    }
    assert!(missing.is_empty(), "pages name paths that do not exist: {missing:#?}");
}

/// What is written like a path but names none of the repository's files: a
/// URL, a route of the HTTP API or of the dashboard (`#/...`), a subject or
/// an absolute path elsewhere.
fn is_not_a_path(s: &str) -> bool {
    s.contains("://")
        || s.starts_with('/')
        || s.starts_with("#/")
        || s.starts_with('~')
        || s.starts_with('$')
        || s.contains(['<', '*', '{', '='])
}

#[test]
fn every_doc_page_is_linked_from_the_readme() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let unlinked: Vec<String> = pages()
        .iter()
        .filter(|page| page.parent().unwrap().ends_with("docs"))
        .map(|page| format!("docs/{}", page.file_name().unwrap().to_str().unwrap()))
        .filter(|page| !readme.contains(&format!("({page})")))
        .collect();
    assert!(unlinked.is_empty(), "doc pages the README does not link: {unlinked:?}");
}

#[test]
fn a_named_path_is_found_in_backticks_only() {
    assert_eq!(named_paths("see `host/src/a.rs` and host/src/b.rs, `a b/c`, `plain`"), ["host/src/a.rs"]);
}
