//! `weir new`: scaffold a guest, in Rust, Python or JavaScript, that builds
//! and runs at once.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use weir_engine::guest_build;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// A Rust crate built for wasm32-wasip2 with the weir-sdk crate.
    Rust,
    /// A Python guest (app.py) built with componentize-py.
    Python,
    /// A JavaScript guest (app.js) built with componentize-js.
    Js,
}

#[derive(Args, Debug)]
pub struct NewArgs {
    /// Name of the topology and of the directory created for it.
    name: String,
    /// Language of the guest.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    lang: Lang,
    /// The SDK to use: the weir-sdk crate, or the Python or JavaScript SDK's
    /// directory, for the guest's own tests [default: the one this weir was
    /// built from].
    #[arg(long)]
    sdk: Option<PathBuf>,
}

fn default_sdk(lang: Lang) -> PathBuf {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk");
    match lang {
        Lang::Rust => sdk,
        Lang::Python => sdk.join("python"),
        Lang::Js => sdk.join("js"),
    }
}

// The files a new guest starts from, with NAME (and SDK, VERSION) filled in.
const LIB: &str = include_str!("../../templates/rust/lib.rs.tmpl");
const README: &str = include_str!("../../templates/rust/README.md.tmpl");

const PY_APP: &str = include_str!("../../templates/python/app.py.tmpl");
const PY_TEST: &str = include_str!("../../templates/python/test_app.py.tmpl");
const PY_README: &str = include_str!("../../templates/python/README.md.tmpl");

const JS_APP: &str = include_str!("../../templates/js/app.js.tmpl");
const JS_TEST: &str = include_str!("../../templates/js/app.test.js.tmpl");
const JS_README: &str = include_str!("../../templates/js/README.md.tmpl");

fn rust(dir: &Path, name: &str, sdk: &Path) -> Result<()> {
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
         [lib]\ncrate-type = [\"cdylib\", \"rlib\"]\n\n\
         [dependencies]\nweir-sdk = {{ path = {:?} }}\n\n\
         [profile.release]\nstrip = \"debuginfo\"\n\n\
         # A crate of its own, not part of any workspace around it.\n[workspace]\n",
        sdk.display().to_string()
    );
    std::fs::create_dir_all(dir.join("src")).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(dir.join("src/lib.rs"), LIB.replace("NAME", name))?;
    std::fs::write(dir.join("README.md"), README.replace("NAME", name))?;
    std::fs::write(dir.join(".gitignore"), "/target\n/data\n")?;
    Ok(())
}

fn python(dir: &Path, name: &str, sdk: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("app.py"), PY_APP.replace("NAME", name))?;
    let sdk = serde_json::to_string(&sdk.display().to_string())?;
    std::fs::write(dir.join("test_app.py"), PY_TEST.replace("NAME", name).replace("SDK", &sdk))?;
    let readme = PY_README.replace("NAME", name).replace("VERSION", guest_build::COMPONENTIZE_PY_VERSION);
    std::fs::write(dir.join("README.md"), readme)?;
    std::fs::write(dir.join(".gitignore"), "/data\n__pycache__/\n")?;
    Ok(())
}

fn js(dir: &Path, name: &str, sdk: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("app.js"), JS_APP.replace("NAME", name))?;
    std::fs::write(dir.join("app.test.js"), JS_TEST.replace("NAME", name))?;
    let package = format!(
        "{{\n  \"name\": {},\n  \"version\": \"0.1.0\",\n  \"private\": true,\n  \"type\": \"module\",\n  \
         \"main\": \"app.js\",\n  \"scripts\": {{ \"test\": \"node --test\" }},\n  \
         \"dependencies\": {{ \"weir\": {} }},\n  \
         \"devDependencies\": {{\n    \"@bytecodealliance/componentize-js\": \"{}\",\n    \
         \"@bytecodealliance/preview2-shim\": \"{}\"\n  }}\n}}\n",
        serde_json::to_string(name)?,
        serde_json::to_string(&format!("file:{}", sdk.display()))?,
        guest_build::COMPONENTIZE_JS_VERSION,
        guest_build::PREVIEW2_SHIM_VERSION
    );
    std::fs::write(dir.join("package.json"), package)?;
    std::fs::write(dir.join("README.md"), JS_README.replace("NAME", name))?;
    std::fs::write(dir.join(".gitignore"), "/node_modules\n/data\n")?;
    Ok(())
}

pub fn run(args: NewArgs) -> Result<()> {
    let name = &args.name;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("{name:?} is not a usable name: use letters, digits, '-' and '_'");
    }
    let dir = PathBuf::from(name);
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let sdk = args.sdk.unwrap_or_else(|| default_sdk(args.lang));
    let what = match args.lang {
        Lang::Rust => "the weir-sdk crate",
        Lang::Python => "Weir's Python SDK",
        Lang::Js => "Weir's JavaScript SDK",
    };
    let sdk = sdk
        .canonicalize()
        .with_context(|| format!("{what} is not at {}: give its directory with --sdk", sdk.display()))?;
    match args.lang {
        Lang::Rust => rust(&dir, name, &sdk)?,
        Lang::Python => python(&dir, name, &sdk)?,
        Lang::Js => js(&dir, name, &sdk)?,
    }
    println!("created {}: `weir run {} --data data --input FILE` builds and runs it", dir.display(), dir.display());
    Ok(())
}
