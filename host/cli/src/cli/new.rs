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

const PY_APP: &str = r#""""The NAME topology: splits each line of the input into words and keeps an
exactly-once count per word in the state `counts`."""

from weir import Count, FileLines, State, Topology


def split(t):
    """The whitespace-separated words of a line."""
    return t.str("line").split()


def topology():
    return (
        Topology("NAME")
        .new_stream(FileLines("line"))
        .each(["line"], split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State.transactional("counts"), Count, ["count"])
        .name("count")
        .build()
    )
"#;

const PY_TEST: &str = r#""""The operators, in plain Python: `python3 -m unittest`."""

import sys
import unittest

sys.path.insert(0, SDK)

import app  # noqa: E402
from weir import BatchInfo, codec, dispatch  # noqa: E402


class Split(unittest.TestCase):
    def test_split_emits_every_word_of_a_line(self):
        info = BatchInfo(topology="NAME", operator="split", txid=1, fields=["line"])
        out = dispatch.run_function([app.topology()], info, codec.encode(1, [(0, ["to be or not"])]))
        words = [values[0] for _, values in codec.decode(out)[1]]
        self.assertEqual(words, ["to", "be", "or", "not"])


if __name__ == "__main__":
    unittest.main()
"#;

const PY_README: &str = r#"# NAME

A Weir topology in Python: it splits each line of its input into words and
keeps an exactly-once count per word in the state `counts`. `app.py`
defines it; `weir run` builds the directory into a component with
componentize-py (`pip install componentize-py==VERSION`, or Weir's
`scripts/guest-toolchains`; `$WEIR_COMPONENTIZE_PY` names another).

```sh
python3 -m unittest                           # the operators, in plain Python
weir run . --data data --input some-text.txt  # builds the component and runs it
weir state scan --data data --topology NAME --state counts
weir bundle . -o NAME.weir                    # one file to deploy
```
"#;

const JS_APP: &str = r#"// The NAME topology: splits each line of the input into words and keeps an
// exactly-once count per word in the state `counts`.

import { Count, FileLines, State, Topology } from "weir";

/** The whitespace-separated words of a line. */
export const split = (t) => t.str("line").split(/\s+/).filter((word) => word.length > 0);

export function topology() {
  return new Topology("NAME")
    .newStream(new FileLines("line"))
    .each(["line"], split, ["word"])
    .name("split")
    .groupBy(["word"])
    .persistentAggregate(State.transactional("counts"), Count, ["count"])
    .name("count")
    .build();
}
"#;

const JS_TEST: &str = r#"// The operators, in Node: `npm install`, then `npm test`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { BatchInfo, decode, encode, runFunction } from "weir";
import { topology } from "./app.js";

test("split emits every word of a line", () => {
  const info = new BatchInfo({ topology: "NAME", operator: "split", txid: 1n, fields: ["line"] });
  const out = runFunction([topology()], info, encode(1, [[0, ["to be or not"]]]));
  assert.deepEqual(
    decode(out).rows.map(([, [word]]) => word),
    ["to", "be", "or", "not"],
  );
});
"#;

const JS_README: &str = r#"# NAME

A Weir topology in JavaScript: it splits each line of its input into words
and keeps an exactly-once count per word in the state `counts`. `app.js`
defines it; `weir run` builds the directory into a component with
componentize-js (`npm install` puts it in `node_modules`; Weir's
`scripts/guest-toolchains` installs one for every guest;
`$WEIR_COMPONENTIZE_JS` names another). 64-bit integers are bigints.

```sh
npm install && npm test                       # the operators, in Node
weir run . --data data --input some-text.txt  # builds the component and runs it
weir state scan --data data --topology NAME --state counts
weir bundle . -o NAME.weir                    # one file to deploy
```
"#;

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
