//! Builds every guest crate (each `cdylib` in a folder under `examples/`
//! and `tests/guests/`) for wasm32-wasip2, in a target directory of their
//! own, and writes their paths as constants named for their packages, and
//! the list of them all.

use cargo_metadata::MetadataCommand;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Folders whose every direct subfolder holding a `Cargo.toml` is a guest
/// crate: the examples users copy and the guests only tests run.
const GUEST_DIRS: &[&str] = &["examples", "tests/guests"];

/// The guest crates' package names: the workspace's members that build a
/// component (a `cdylib`) and whose manifest sits in a direct subfolder of
/// one of [`GUEST_DIRS`], in that order and then by folder. A library there
/// (`examples/common`) is code the guests share, not a guest.
fn discover(root: &Path) -> Vec<String> {
    let metadata = MetadataCommand::new()
        .manifest_path(root.join("Cargo.toml"))
        .no_deps()
        .exec()
        .expect("cargo metadata of the workspace");
    let mut packages = Vec::new();
    for dir in GUEST_DIRS {
        let dir = root.join(dir);
        let mut found: Vec<(PathBuf, String)> = metadata
            .workspace_packages()
            .into_iter()
            .filter(|package| package.targets.iter().any(|target| target.is_cdylib()))
            .map(|package| (package.manifest_path.clone().into_std_path_buf(), package.name.to_string()))
            .filter(|(manifest, _)| manifest.parent().and_then(Path::parent) == Some(dir.as_path()))
            .collect();
        found.sort();
        packages.extend(found.into_iter().map(|(_, name)| name));
    }
    packages
}

/// The constant naming a package's component: `hostile-topologies` is
/// `HOSTILE_TOPOLOGIES`.
fn constant(package: &str) -> String {
    package.to_uppercase().replace('-', "_")
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().parent().unwrap().to_owned();
    let target_dir = root.join("target").join("guests");
    for dir in ["guest-sdk", "wit", "examples", "tests/guests"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let guests = discover(&root);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&root)
        .args(["build", "--release", "--target", "wasm32-wasip2", "--target-dir"])
        .arg(&target_dir);
    for package in &guests {
        command.args(["-p", package]);
    }
    // The outer build's settings are for the host, not for the guests.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        command.env_remove(var);
    }
    for (key, _) in std::env::vars() {
        if key.starts_with("CARGO_PROFILE_") || key.starts_with("CARGO_CFG_") {
            command.env_remove(key);
        }
    }
    let status = command.status().expect("run cargo to build the guests");
    assert!(
        status.success(),
        "building the test guests failed; is the wasm32-wasip2 target installed (rustup target add wasm32-wasip2), and \
         is every guest crate a member of the workspace?"
    );
    let out_dir = target_dir.join("wasm32-wasip2").join("release");
    let mut code = String::new();
    let mut list = String::new();
    for package in &guests {
        let wasm = out_dir.join(format!("{}.wasm", package.replace('-', "_")));
        assert!(Path::new(&wasm).exists(), "{} was not built", wasm.display());
        let (constant, wasm) = (constant(package), wasm.display().to_string());
        code.push_str(&format!("/// The `{package}` component.\npub const {constant}: &str = {wasm:?};\n"));
        list.push_str(&format!("    Guest {{ package: {package:?}, constant: {constant:?}, component: {wasm:?} }},\n"));
    }
    code.push_str(&format!(
        "/// Every guest, as found under {GUEST_DIRS:?}.\npub const GUESTS: &[Guest] = &[\n{list}];\n"
    ));
    code.push_str(&format!(
        "/// The repository's root.\npub const REPO_ROOT: &str = {:?};\n",
        root.display().to_string()
    ));
    code.push_str(&format!(
        "/// The target directory the guests are built in.\npub const GUEST_TARGET_DIR: &str = {:?};\n",
        target_dir.display().to_string()
    ));
    std::fs::write(PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("components.rs"), code).unwrap();
}
