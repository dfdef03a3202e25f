//! Weir: Trident-style exactly-once stream topologies whose operators are
//! WebAssembly components, with state in redb.

pub mod bindings;
pub mod bundle;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod coordinator;
pub mod exec;
pub mod fault;
pub mod guest_build;
pub mod instances;
pub mod json;
pub mod load;
pub mod metrics;
pub mod nats;
pub mod plan;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod sink;
pub mod spout;
pub mod state;

#[cfg(test)]
mod architecture_doc {
    use std::path::Path;

    /// The paths `docs/architecture.md` names: what is written in backticks
    /// and holds a `/` (the repository's own files and folders).
    fn named_paths(doc: &str) -> Vec<&str> {
        doc.split('`').skip(1).step_by(2).filter(|s| s.contains('/') && !s.contains(' ')).collect()
    }

    #[test]
    fn every_path_the_architecture_names_exists() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
        let paths = named_paths(&doc);
        assert!(paths.len() > 30, "the map names the rooms' files: {paths:?}");
        let missing: Vec<&&str> = paths.iter().filter(|p| !root.join(p).exists()).collect();
        assert!(missing.is_empty(), "docs/architecture.md names paths that do not exist: {missing:?}");
    }

    #[test]
    fn a_named_path_is_found_in_backticks_only() {
        assert_eq!(named_paths("see `host/src/a.rs` and host/src/b.rs, `a b/c`, `plain`"), ["host/src/a.rs"]);
    }
}
