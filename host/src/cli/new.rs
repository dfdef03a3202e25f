//! `weir new`: scaffold a guest crate that builds and runs at once.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Lang {
    /// A Rust crate built for wasm32-wasip2 with the weir-sdk crate.
    Rust,
}

#[derive(Args, Debug)]
pub struct NewArgs {
    /// Name of the topology and of the directory created for it.
    name: String,
    /// Language of the guest.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    lang: Lang,
    /// The weir-sdk crate to depend on [default: the one this weir was built from].
    #[arg(long)]
    sdk: Option<PathBuf>,
}

fn default_sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk")
}

const LIB: &str = r#"//! The NAME topology: splits each line of the input into words and keeps an
//! exactly-once count per word in the state `counts`.

use weir_sdk::prelude::*;

/// Splits a line into its whitespace-separated words.
pub struct Split;

impl Function for Split {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        for word in tuple.str("line")?.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

/// The topology.
pub fn topology() -> Topology {
    Topology::new("NAME")
        .new_stream(FileLines::new("line"))
        .each(["line"], Split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count")
        .build()
}

weir_sdk::export!(topology);

#[cfg(test)]
mod tests {
    use weir_sdk::codec::{Batch, BatchWriter, ValueRef};
    use weir_sdk::{BatchInfo, dispatch};

    #[test]
    fn split_emits_every_word_of_a_line() {
        let mut input = BatchWriter::new(1);
        input.push_row(0, [ValueRef::Str("to be or not")]).unwrap();
        let info = BatchInfo {
            topology: "NAME".into(),
            operator: "split".into(),
            txid: 1,
            fields: vec!["line".into()],
            ..BatchInfo::default()
        };
        let out = dispatch::run_function(&super::weir_topologies(), &info, &input.finish()).unwrap();
        let batch = Batch::decode(&out).unwrap();
        let words: Vec<_> = batch.rows().map(|r| r.get(0).unwrap()).collect();
        assert_eq!(words, ["to", "be", "or", "not"].map(ValueRef::Str));
    }
}
"#;

const README: &str = r#"# NAME

A Weir topology: it splits each line of its input into words and keeps an
exactly-once count per word in the state `counts`.

```sh
cargo test                                    # the operators, natively
weir run . --data data --input some-text.txt  # builds for wasm32-wasip2 and runs
weir state scan --data data --topology NAME --state counts
weir bundle . -o NAME.weir                    # one file to deploy
```
"#;

pub fn run(args: NewArgs) -> Result<()> {
    let Lang::Rust = args.lang;
    let name = &args.name;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("{name:?} is not a usable name: use letters, digits, '-' and '_'");
    }
    let dir = PathBuf::from(name);
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let sdk = args.sdk.unwrap_or_else(default_sdk);
    let sdk = sdk
        .canonicalize()
        .with_context(|| format!("the weir-sdk crate is not at {}: give its directory with --sdk", sdk.display()))?;
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
    println!("created {}: `weir run {} --data data --input FILE` builds and runs it", dir.display(), dir.display());
    Ok(())
}
