//! Builds a guest directory into a component, as `weir run <DIR>` and
//! `weir bundle <DIR>` do: a Rust crate with cargo, a Python guest with
//! componentize-py, a JavaScript guest with componentize-js, and a
//! directory of several guests (`weir-bundle.json`) into a bundle whose
//! topologies run each operator in the component that provides it.
//!
//! Python and JavaScript builds are kept in the cache directory
//! (`$WEIR_CACHE_DIR/guests`), keyed by a hash of the guest's sources, the
//! SDK, the WIT contract and the tool's version: the same sources are built
//! once, and give the same component, which is then compiled once.

use crate::bundle::{Bundle, BundledTopology};
use crate::load;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use weir_config::SandboxConfig;
use weir_runtime::{self as runtime, ComponentCache};

/// The Rust target guests are built for; it yields components directly.
pub const GUEST_TARGET: &str = "wasm32-wasip2";

/// The componentize-py release Python guests are built with.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// The componentize-js release JavaScript guests are built with.
pub const COMPONENTIZE_JS_VERSION: &str = "0.23.0";

/// The preview2-shim release componentize-js loads at build time (it lists
/// the package only among its development dependencies: a guest's
/// package.json names it beside componentize-js).
pub const PREVIEW2_SHIM_VERSION: &str = "0.25.0";

/// The file that makes a directory a bundle of several guests.
pub const BUNDLE_FILE: &str = "weir-bundle.json";

const WIT: &str = include_str!("../../../wit/topology.wit");

/// The Python SDK, built into every Python guest: (path, source).
const PYTHON_SDK: &[(&str, &str)] = &[
    ("weir/__init__.py", include_str!("../../../guest-sdk/python/weir/__init__.py")),
    ("weir/codec.py", include_str!("../../../guest-sdk/python/weir/codec.py")),
    ("weir/dispatch.py", include_str!("../../../guest-sdk/python/weir/dispatch.py")),
    ("weir/operators.py", include_str!("../../../guest-sdk/python/weir/operators.py")),
    ("weir/topology.py", include_str!("../../../guest-sdk/python/weir/topology.py")),
    ("weir_component.py", include_str!("../../../guest-sdk/python/weir_component.py")),
];

/// The JavaScript SDK, built into every JavaScript guest as the module `weir`.
const JS_SDK: &str = include_str!("../../../guest-sdk/js/weir.js");

/// The module componentize-js builds: the guest's topologies behind the
/// world's exports.
const JS_ENTRY: &str = "import { topology } from \"./app.js\";\n\
                        import { exportsFor } from \"weir\";\n\
                        export const operators = exportsFor(topology());\n";
const JS_ENTRY_FILE: &str = "weir-component.js";

/// What a guest directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestKind {
    /// A Rust crate (`Cargo.toml`).
    Rust,
    /// A Python guest (`app.py`).
    Python,
    /// A JavaScript guest (`app.js`, or a `package.json`).
    JavaScript,
    /// Several guests in one bundle (`weir-bundle.json`).
    Bundle,
}

impl GuestKind {
    /// What `dir` holds, by the files present.
    pub fn of(dir: &Path) -> Option<GuestKind> {
        if dir.join(BUNDLE_FILE).is_file() {
            Some(GuestKind::Bundle)
        } else if dir.join("Cargo.toml").is_file() {
            Some(GuestKind::Rust)
        } else if dir.join("app.py").is_file() {
            Some(GuestKind::Python)
        } else if dir.join("app.js").is_file() || dir.join("package.json").is_file() {
            Some(GuestKind::JavaScript)
        } else {
            None
        }
    }
}

/// Builds the guest in `dir` and returns the component (`.wasm`), or for a
/// directory of several guests the bundle (`.weir`). The tools' own output
/// goes to stderr, as it would on the command line.
pub fn build(dir: &Path) -> Result<PathBuf> {
    match GuestKind::of(dir) {
        Some(GuestKind::Rust) => build_rust(dir),
        Some(GuestKind::Python) => build_python(dir),
        Some(GuestKind::JavaScript) => build_js(dir),
        Some(GuestKind::Bundle) => build_bundle(dir),
        None => bail!(
            "{} is neither a .wasm component nor a guest directory: it has no Cargo.toml (Rust), app.py (Python), \
             app.js (JavaScript) or {BUNDLE_FILE} (several guests)",
            dir.display()
        ),
    }
}

fn target_installed() -> Option<bool> {
    let out = Command::new("rustup").args(["target", "list", "--installed"]).output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == GUEST_TARGET))
}

/// Builds the guest crate in `dir` in release mode and returns its `.wasm`.
fn build_rust(dir: &Path) -> Result<PathBuf> {
    if target_installed() == Some(false) {
        bail!("the {GUEST_TARGET} target is not installed: run `rustup target add {GUEST_TARGET}`");
    }
    let manifest = dir.join("Cargo.toml").canonicalize()?;
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

/// Where built guests are kept.
fn guests_dir() -> PathBuf {
    runtime::default_cache_dir().join("guests")
}

/// The repository this `weir` was built from, if it is still there: its
/// toolchains (installed by `scripts/guest-toolchains`) serve guests anywhere.
fn source_tree() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A guest tool: `$<env>`, else `relative` under the guest's directory, one
/// of its parents or the source tree, else `name` on the PATH.
fn find_tool(dir: &Path, env: &str, relative: &[&str], name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let tree = source_tree();
    for base in dir.ancestors().chain([tree.as_path()]) {
        for candidate in relative {
            let path = base.join(candidate);
            if path.is_file() {
                return path;
            }
        }
    }
    PathBuf::from(name)
}

/// The tool's `--version`, which keys its builds; an error says how to
/// install it.
fn tool_version(tool: &Path, env: &str, install: &str) -> Result<String> {
    let output = Command::new(tool)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}: install it ({install}), or point ${env} at it", tool.display()))?;
    if !output.status.success() {
        bail!("{} --version failed: {}", tool.display(), String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The files of a guest directory that go into its component: relative
/// path and bytes, in order, leaving out hidden entries and what tools
/// write (`node_modules`, `__pycache__`, `target`).
fn sources(dir: &Path, extensions: &[&str]) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    fn walk(root: &Path, dir: &Path, extensions: &[&str], out: &mut Vec<(PathBuf, Vec<u8>)>) -> Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || ["node_modules", "__pycache__", "target"].contains(&name.as_ref()) {
                continue;
            }
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(root, &path, extensions, out)?;
            } else if extensions.iter().any(|ext| name.ends_with(ext)) {
                let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                out.push((path.strip_prefix(root).expect("under the root").to_owned(), bytes));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, extensions, &mut out)?;
    Ok(out)
}

/// A build's key: everything that goes into it.
fn build_key(kind: &str, version: &str, sdk: &[(&str, &str)], files: &[(PathBuf, Vec<u8>)]) -> String {
    let mut hash = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    part(kind.as_bytes());
    part(version.as_bytes());
    part(WIT.as_bytes());
    for (path, source) in sdk {
        part(path.as_bytes());
        part(source.as_bytes());
    }
    for (path, bytes) in files {
        part(path.to_string_lossy().as_bytes());
        part(bytes);
    }
    hex::encode(hash.finalize())
}

/// A scratch directory under `guests`, removed when dropped.
struct Stage(PathBuf);

impl Stage {
    fn new(guests: &Path, key: &str) -> Result<Stage> {
        let dir = guests.join(format!("stage-{}-{}", &key[..16], std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Stage(dir))
    }

    fn write(&self, relative: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().expect("under the stage"))?;
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a componentize tool that writes `out` in `stage`, then keeps the
/// component at `built`.
fn componentize(mut command: Command, tool: &str, dir: &Path, stage: &Stage, built: &Path) -> Result<PathBuf> {
    let out = stage.0.join("component.wasm");
    command.arg("-o").arg(&out).current_dir(&stage.0).stdout(Stdio::null()).stderr(Stdio::inherit());
    let status = command.status().with_context(|| format!("cannot run {tool}"))?;
    if !status.success() || !out.is_file() {
        bail!("building {} with {tool} failed (its errors are above)", dir.display());
    }
    std::fs::rename(&out, built).with_context(|| format!("keeping the component at {}", built.display()))?;
    Ok(built.to_owned())
}

/// Holds the lock on building `key`: processes building the same sources
/// at once wait for the first, and use what it built.
fn lock(guests: &Path, key: &str) -> Result<std::fs::File> {
    std::fs::create_dir_all(guests).with_context(|| format!("creating {}", guests.display()))?;
    let path = guests.join(format!("{key}.lock"));
    let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    file.lock().with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

/// The build of `key` kept from an earlier run, if there is one.
fn kept(guests: &Path, key: &str, dir: &Path) -> Option<PathBuf> {
    let built = guests.join(format!("{key}.wasm"));
    if built.is_file() {
        tracing::info!("{}: sources unchanged, using the component built before", dir.display());
        return Some(built);
    }
    None
}

/// What builds a guest language's components.
struct Toolchain {
    /// The language, as the SDK is named and builds are keyed.
    language: &'static str,
    /// The tool's name on the PATH.
    tool: &'static str,
    /// The variable that points at the tool.
    env: &'static str,
    /// Where the tool is looked for, under the guest's directory, one of its
    /// parents or the source tree.
    relative: &'static [&'static str],
    /// How to install it.
    install: String,
    /// The version Weir's SDK is tested with.
    pinned: &'static str,
    /// The guest's source files.
    extensions: &'static [&'static str],
    /// The SDK files that go into every build, keyed with it.
    sdk: &'static [(&'static str, &'static str)],
}

/// Builds the guest in `dir` with `chain`: its sources and the SDK staged
/// by `stage_sources`, then the tool's arguments added by `args`; a build
/// of the same sources, SDK and tool is kept and used again.
fn build_guest(
    dir: &Path,
    chain: &Toolchain,
    stage_sources: impl FnOnce(&Stage, &[(PathBuf, Vec<u8>)]) -> Result<()>,
    args: impl FnOnce(&mut Command),
) -> Result<PathBuf> {
    let tool = find_tool(dir, chain.env, chain.relative, chain.tool);
    let version = tool_version(&tool, chain.env, &chain.install)?;
    // componentize-py names itself in its version, componentize-js does not.
    let named = if version.starts_with(chain.tool) { version.clone() } else { format!("{} {version}", chain.tool) };
    if !version.contains(chain.pinned) {
        tracing::warn!("{named} builds this guest; Weir's {} SDK is tested with {}", chain.language, chain.pinned);
    }
    let files = sources(dir, chain.extensions)?;
    let key = build_key(&chain.language.to_lowercase(), &version, chain.sdk, &files);
    let guests = guests_dir();
    let _lock = lock(&guests, &key)?;
    if let Some(built) = kept(&guests, &key, dir) {
        return Ok(built);
    }
    let stage = Stage::new(&guests, &key)?;
    stage.write("wit/topology.wit", WIT.as_bytes())?;
    stage_sources(&stage, &files)?;
    tracing::info!("building {} with {named}", dir.display());
    let mut command = Command::new(&tool);
    args(&mut command);
    componentize(command, chain.tool, dir, &stage, &guests.join(format!("{key}.wasm")))
}

/// Builds a Python guest (`app.py` defining `topology()`) with componentize-py.
fn build_python(dir: &Path) -> Result<PathBuf> {
    let chain = Toolchain {
        language: "Python",
        tool: "componentize-py",
        env: "WEIR_COMPONENTIZE_PY",
        relative: &[
            "target/toolchains/python/bin/componentize-py",
            ".venv/bin/componentize-py",
            "venv/bin/componentize-py",
        ],
        install: format!("pip install componentize-py=={COMPONENTIZE_PY_VERSION}, or scripts/guest-toolchains"),
        pinned: COMPONENTIZE_PY_VERSION,
        extensions: &[".py"],
        sdk: PYTHON_SDK,
    };
    let stage_sources = |stage: &Stage, files: &[(PathBuf, Vec<u8>)]| {
        for (path, source) in PYTHON_SDK {
            stage.write(Path::new("sdk").join(path), source.as_bytes())?;
        }
        for (path, bytes) in files {
            stage.write(Path::new("app").join(path), bytes)?;
        }
        Ok(())
    };
    build_guest(dir, &chain, stage_sources, |command| {
        command.args(["-d", "wit", "-w", "topology", "componentize", "weir_component", "-p", "sdk", "-p", "app"]);
    })
}

/// The JavaScript SDK as a guest's build sees it: the module `weir`, and the
/// entry that calls the guest's `app.js`.
const JS_BUILD_SDK: &[(&str, &str)] = &[("weir", JS_SDK), (JS_ENTRY_FILE, JS_ENTRY)];

/// Builds a JavaScript guest (`app.js` exporting `topology()`) with
/// componentize-js; the SDK is the module `weir`.
fn build_js(dir: &Path) -> Result<PathBuf> {
    if !dir.join("app.js").is_file() {
        bail!("{} has no app.js: a JavaScript guest's app.js exports its topology()", dir.display());
    }
    let chain = Toolchain {
        language: "JavaScript",
        tool: "componentize-js",
        env: "WEIR_COMPONENTIZE_JS",
        relative: &["node_modules/.bin/componentize-js", "guest-sdk/js/node_modules/.bin/componentize-js"],
        install: format!(
            "npm install @bytecodealliance/componentize-js@{COMPONENTIZE_JS_VERSION}, or scripts/guest-toolchains"
        ),
        pinned: COMPONENTIZE_JS_VERSION,
        extensions: &[".js", ".mjs"],
        sdk: JS_BUILD_SDK,
    };
    let stage_sources = |stage: &Stage, files: &[(PathBuf, Vec<u8>)]| {
        for (path, bytes) in files {
            stage.write(path, bytes)?;
        }
        // A bare `import ... from "weir"` loads the file `weir` at the root.
        for (path, source) in JS_BUILD_SDK {
            stage.write(path, source.as_bytes())?;
        }
        Ok(())
    };
    build_guest(dir, &chain, stage_sources, |command| {
        command.arg(JS_ENTRY_FILE).args(["-w", "wit", "-n", "topology"]);
        // Operators need no HTTP: leave out what would import it.
        command.args(["-d", "http", "-d", "fetch-event"]);
    })
}

/// `weir-bundle.json`: the guests of a bundle, and which runs which operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BundleDir {
    /// Component name -> its guest directory (or a built `.wasm`), relative
    /// to the bundle's directory.
    components: BTreeMap<String, PathBuf>,
    /// Per topology: operator id -> the component that runs it. Operators
    /// not named run in the component that describes the topology.
    #[serde(default)]
    operators: BTreeMap<String, BTreeMap<String, String>>,
}

/// Builds each guest of a `weir-bundle.json` directory and packs them into
/// a bundle, each topology defined by the one component that describes it.
fn build_bundle(dir: &Path) -> Result<PathBuf> {
    let file = dir.join(BUNDLE_FILE);
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let spec: BundleDir = serde_json::from_str(&text).with_context(|| format!("{} does not parse", file.display()))?;
    if spec.components.is_empty() {
        bail!("{} names no components", file.display());
    }
    let file_name = |name: &str| format!("{name}.wasm");
    let mut components = Vec::new();
    for (name, path) in &spec.components {
        let path = dir.join(path);
        let wasm = if path.is_dir() {
            if GuestKind::of(&path) == Some(GuestKind::Bundle) {
                bail!("{}: component {name} is a bundle itself", file.display());
            }
            build(&path).with_context(|| format!("building component {name} of {}", dir.display()))?
        } else {
            path
        };
        let bytes = std::fs::read(&wasm).with_context(|| format!("reading component {name} ({})", wasm.display()))?;
        components.push((name.clone(), wasm, bytes));
    }
    // Described with the engine `weir run` uses, so that its compilation
    // serves the run.
    let engine = runtime::engine(true)?;
    let cache = ComponentCache::new(runtime::default_cache_dir());
    let mut topologies: Vec<BundledTopology> = Vec::new();
    for (name, wasm, _) in &components {
        for (_, definition) in load::describe_all(&engine, &cache, wasm, &SandboxConfig::default())? {
            if let Some(other) = topologies.iter().find(|t| t.definition.name == definition.name) {
                bail!(
                    "{}: components {} and {name} both describe topology {}; one must define it",
                    file.display(),
                    other.component.trim_end_matches(".wasm"),
                    definition.name
                );
            }
            topologies.push(BundledTopology { component: file_name(name), definition, operators: BTreeMap::new() });
        }
    }
    for (topology, operators) in &spec.operators {
        let Some(bundled) = topologies.iter_mut().find(|t| &t.definition.name == topology) else {
            bail!("{}: no component describes topology {topology}", file.display());
        };
        for (operator, component) in operators {
            if !spec.components.contains_key(component) {
                bail!(
                    "{}: operator {operator} of {topology} names component {component}, which it lacks",
                    file.display()
                );
            }
            bundled.operators.insert(operator.clone(), file_name(component));
        }
    }
    if topologies.is_empty() {
        bail!("{}: no component describes a topology", file.display());
    }
    let bundle =
        Bundle::new(components.into_iter().map(|(name, _, bytes)| (file_name(&name), bytes)).collect(), topologies);
    // Checked as `weir run` will read it.
    let bytes = bundle.to_bytes()?;
    let checked = Bundle::from_bytes(&file, &bytes)?;
    for t in &checked.manifest.topologies {
        weir_plan::check_stream(&t.definition, &weir_config::TopologyLimits::default())
            .with_context(|| format!("invalid topology {} in {}", t.definition.name, dir.display()))?;
    }
    let out = guests_dir().join(format!("{}.weir", crate::bundle::sha256_hex(&bytes)));
    std::fs::create_dir_all(out.parent().expect("under the cache"))?;
    std::fs::write(&out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    tracing::info!("bundled {} ({} components) into {}", dir.display(), spec.components.len(), out.display());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_directory_is_known_by_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let at = |files: &[&str]| {
            let d = tempfile::tempdir_in(dir.path()).unwrap();
            for f in files {
                std::fs::write(d.path().join(f), "").unwrap();
            }
            GuestKind::of(d.path())
        };
        assert_eq!(at(&["Cargo.toml"]), Some(GuestKind::Rust));
        assert_eq!(at(&["app.py", "README.md"]), Some(GuestKind::Python));
        assert_eq!(at(&["app.js"]), Some(GuestKind::JavaScript));
        assert_eq!(at(&["package.json"]), Some(GuestKind::JavaScript));
        assert_eq!(at(&[BUNDLE_FILE, "Cargo.toml"]), Some(GuestKind::Bundle));
        assert_eq!(at(&["notes.txt"]), None);
    }

    #[test]
    fn a_build_key_changes_with_any_source_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.py"), "x = 1").unwrap();
        std::fs::create_dir_all(dir.path().join("__pycache__")).unwrap();
        std::fs::write(dir.path().join("__pycache__/app.pyc"), "junk").unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/state.redb"), "state").unwrap();
        let key = || build_key("python", "componentize-py 0.25.1", PYTHON_SDK, &sources(dir.path(), &[".py"]).unwrap());
        let first = key();
        std::fs::write(dir.path().join("data/state.redb"), "more state").unwrap();
        assert_eq!(key(), first);
        std::fs::write(dir.path().join("app.py"), "x = 2").unwrap();
        assert_ne!(key(), first);
        assert_eq!(sources(dir.path(), &[".py"]).unwrap().len(), 1);
    }
}
