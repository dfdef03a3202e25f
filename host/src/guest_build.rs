//! Builds a guest crate into a component, as `weir run <DIR>` does.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Rust target guests are built for; it yields components directly.
pub const GUEST_TARGET: &str = "wasm32-wasip2";

fn target_installed() -> Option<bool> {
    let out = Command::new("rustup").args(["target", "list", "--installed"]).output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == GUEST_TARGET))
}

/// Builds the guest crate in `dir` in release mode and returns its `.wasm`.
/// Cargo's own output goes to stderr, as it would on the command line.
pub fn build(dir: &Path) -> Result<PathBuf> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        bail!("{} is neither a .wasm component nor a guest crate (it has no Cargo.toml)", dir.display());
    }
    if target_installed() == Some(false) {
        bail!("the {GUEST_TARGET} target is not installed: run `rustup target add {GUEST_TARGET}`");
    }
    let manifest = manifest.canonicalize()?;
    tracing::info!("building {} for {GUEST_TARGET}", dir.display());
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--release", "--target", GUEST_TARGET, "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo to build the guest")?;
    if !output.status.success() {
        bail!("building the guest crate {} failed (cargo's errors are above)", dir.display());
    }
    let mut wasm = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let ours = message["manifest_path"].as_str().map(Path::new) == Some(manifest.as_path());
        if message["reason"] == "compiler-artifact" && ours {
            let files = message["filenames"].as_array().into_iter().flatten();
            if let Some(file) = files.filter_map(|f| f.as_str()).find(|f| f.ends_with(".wasm")) {
                wasm = Some(PathBuf::from(file));
            }
        }
    }
    wasm.with_context(|| {
        format!("{} built no .wasm: its Cargo.toml needs `[lib] crate-type = [\"cdylib\"]`", dir.display())
    })
}
