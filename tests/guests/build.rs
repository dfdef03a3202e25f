//! Builds every guest crate the tests use for wasm32-wasip2, in a target
//! directory of their own, and writes their paths as constants.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, constant naming its component).
const GUESTS: &[(&str, &str)] = &[
    ("word-count", "WORD_COUNT"),
    ("spouts", "SPOUTS"),
    ("reach", "REACH"),
    ("location", "LOCATION"),
    ("global-count", "GLOBAL_COUNT"),
    ("map-filter", "MAP_FILTER"),
    ("stream-ops", "STREAM_OPS"),
    ("bad-topologies", "BAD_TOPOLOGIES"),
    ("test-topologies", "TEST_TOPOLOGIES"),
    ("hostile", "HOSTILE"),
    ("blocking-describe", "BLOCKING_DESCRIBE"),
    ("raw-guest", "RAW_GUEST"),
    ("hostile-topologies", "HOSTILE_TOPOLOGIES"),
    ("unknown-import", "UNKNOWN_IMPORT"),
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().parent().unwrap().to_owned();
    let target_dir = root.join("target").join("guests");
    for dir in ["guest-sdk", "wit", "examples", "tests/guests"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&root)
        .args(["build", "--release", "--target", "wasm32-wasip2", "--target-dir"])
        .arg(&target_dir);
    for (package, _) in GUESTS {
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
        "building the test guests failed; is the wasm32-wasip2 target installed? (rustup target add wasm32-wasip2)"
    );
    let out_dir = target_dir.join("wasm32-wasip2").join("release");
    let mut code = String::new();
    for (package, constant) in GUESTS {
        let wasm = out_dir.join(format!("{}.wasm", package.replace('-', "_")));
        assert!(Path::new(&wasm).exists(), "{} was not built", wasm.display());
        code.push_str(&format!(
            "/// The `{package}` component.\npub const {constant}: &str = {:?};\n",
            wasm.display().to_string()
        ));
    }
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
