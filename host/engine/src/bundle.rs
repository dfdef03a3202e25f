//! Topology bundles: one `.weir` file holding the topology definitions, the
//! components that run them, their checksums and the WIT version they
//! target. A single self-describing `.wasm` is accepted wherever a bundle is.
//!
//! Layout: the magic `WEIRBNDL`, a format version (u32, little-endian), the
//! manifest's length (u32) and the manifest (JSON), then each component's
//! bytes in the manifest's order.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use weir_runtime::bindings::WIT_PACKAGE;
use weir_sdk::topology::{OperationDef, TopologyDef};

const MAGIC: &[u8; 8] = b"WEIRBNDL";
const FORMAT_VERSION: u32 = 1;

/// Components a bundle may hold: each is compiled and asked to describe
/// itself when the bundle loads, one at a time, so their number bounds how
/// long one upload holds the server's compiling. A topology in several
/// languages needs one per language.
pub const MAX_COMPONENTS: usize = 16;

/// Bytes of a bundle's manifest: it is parsed whole, into several times
/// its size in memory (a list of one-letter names, 22 times), so one the
/// size of an upload would take gigabytes. A topology's description at
/// every cap of a host's defaults takes less than 3 MiB.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// WIT packages (by major: for 0.x versions, the minor) this host runs.
pub const SUPPORTED_WIT: &[&str] = &["weir:topology@0.1"];

/// What a bundle holds, in words a person can read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The WIT package the components target.
    pub wit: String,
    /// The components, in the order their bytes follow the manifest.
    pub components: Vec<ComponentEntry>,
    /// The topologies, each with the component that runs it.
    pub topologies: Vec<BundledTopology>,
}

/// One component of a bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentEntry {
    /// The component's file name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256, in hex.
    pub sha256: String,
}

/// A topology of a bundle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundledTopology {
    /// Name of the component that defines it and runs its operators.
    pub component: String,
    /// Its definition, as the component describes it.
    pub definition: TopologyDef,
    /// Operators run by another component of the bundle (operator id ->
    /// component name): a topology's operators may be written in several
    /// languages.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operators: BTreeMap<String, String>,
}

impl BundledTopology {
    /// A topology whose one component runs every operator.
    pub fn single(component: String, definition: TopologyDef) -> BundledTopology {
        BundledTopology { component, definition, operators: BTreeMap::new() }
    }
}

/// The operator ids of a topology: its nodes' and its aggregators'.
pub fn operator_ids(definition: &TopologyDef) -> Vec<&str> {
    let mut ids = Vec::new();
    for node in &definition.nodes {
        ids.push(node.id.as_str());
        match &node.op {
            OperationDef::Aggregate { aggregators, .. } => ids.extend(aggregators.iter().map(|a| a.id.as_str())),
            OperationDef::PersistentAggregate { aggregator, .. } | OperationDef::Window { aggregator, .. } => {
                ids.push(aggregator.id.as_str())
            }
            _ => {}
        }
    }
    ids
}

/// A bundle read and checked.
pub struct Bundle {
    /// What it holds.
    pub manifest: Manifest,
    /// Each component's name and bytes.
    pub components: Vec<(String, Vec<u8>)>,
}

/// SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether `bytes` start like a bundle.
pub fn is_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

fn wit_major(wit: &str) -> String {
    // weir:topology@0.1.0 -> weir:topology@0.1 ; @1.2.3 -> @1
    let Some((package, version)) = wit.split_once('@') else { return wit.to_owned() };
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or_default();
    if major == "0" {
        format!("{package}@0.{}", parts.next().unwrap_or_default())
    } else {
        format!("{package}@{major}")
    }
}

/// Whether this host runs components targeting `wit`.
pub fn supports_wit(wit: &str) -> bool {
    SUPPORTED_WIT.contains(&wit_major(wit).as_str())
}

impl Bundle {
    /// A bundle of `components` (name, bytes) running `topologies`.
    pub fn new(components: Vec<(String, Vec<u8>)>, topologies: Vec<BundledTopology>) -> Bundle {
        let entries = components
            .iter()
            .map(|(name, bytes)| ComponentEntry {
                name: name.clone(),
                size: bytes.len() as u64,
                sha256: sha256_hex(bytes),
            })
            .collect();
        Bundle { manifest: Manifest { wit: WIT_PACKAGE.to_owned(), components: entries, topologies }, components }
    }

    /// The bundle's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let manifest = serde_json::to_vec_pretty(&self.manifest)?;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&u32::try_from(manifest.len())?.to_le_bytes());
        out.extend_from_slice(&manifest);
        for (_, bytes) in &self.components {
            out.extend_from_slice(bytes);
        }
        Ok(out)
    }

    /// Reads and checks a bundle: its layout, the WIT version it targets,
    /// and every component's size and checksum. `name` names it in errors.
    pub fn from_bytes(name: &Path, bytes: &[u8]) -> Result<Bundle> {
        let at_fault = || format!("bundle {}", name.display());
        if !is_bundle(bytes) {
            bail!("{} is not a Weir bundle (no WEIRBNDL header)", at_fault());
        }
        let header = |at: usize| -> Result<u32> {
            let field = bytes.get(at..at + 4).with_context(|| format!("{} is truncated in its header", at_fault()))?;
            Ok(u32::from_le_bytes(field.try_into().expect("4 bytes")))
        };
        let version = header(8)?;
        if version != FORMAT_VERSION {
            bail!("{} has format version {version}; this host reads version {FORMAT_VERSION}", at_fault());
        }
        let manifest_len = header(12)? as usize;
        if manifest_len > MAX_MANIFEST_BYTES {
            bail!(
                "{}: its manifest is {manifest_len} bytes, more than the {} MiB a host reads",
                at_fault(),
                MAX_MANIFEST_BYTES >> 20
            );
        }
        let manifest_bytes =
            bytes.get(16..16 + manifest_len).with_context(|| format!("{} is truncated in its manifest", at_fault()))?;
        let manifest: Manifest = serde_json::from_slice(manifest_bytes)
            .with_context(|| format!("{}: the manifest does not parse", at_fault()))?;
        if !supports_wit(&manifest.wit) {
            bail!(
                "{} targets {}, which this host does not run; it supports {}",
                at_fault(),
                manifest.wit,
                SUPPORTED_WIT.iter().map(|w| format!("{w}.x")).collect::<Vec<_>>().join(", ")
            );
        }
        if manifest.components.len() > MAX_COMPONENTS {
            bail!(
                "{} holds {} components; a bundle may hold at most {MAX_COMPONENTS}",
                at_fault(),
                manifest.components.len()
            );
        }
        let mut rest = &bytes[16 + manifest_len..];
        let mut components = Vec::new();
        for entry in &manifest.components {
            let size = usize::try_from(entry.size)?;
            if rest.len() < size {
                bail!("{} is truncated in component {}", at_fault(), entry.name);
            }
            let (component, tail) = rest.split_at(size);
            rest = tail;
            let sum = sha256_hex(component);
            if sum != entry.sha256 {
                bail!(
                    "{}: component {} does not match its checksum (sha256 {sum}, manifest says {})",
                    at_fault(),
                    entry.name,
                    entry.sha256
                );
            }
            components.push((entry.name.clone(), component.to_vec()));
        }
        if !rest.is_empty() {
            bail!("{} has {} bytes after its last component", at_fault(), rest.len());
        }
        // In sets: a manifest may list any number of topologies and operators.
        let names: HashSet<&str> = components.iter().map(|(c, _)| c.as_str()).collect();
        for topology in &manifest.topologies {
            let name = &topology.definition.name;
            for component in std::iter::once(&topology.component).chain(topology.operators.values()) {
                if !names.contains(component.as_str()) {
                    bail!("{}: topology {name} names component {component}, which the bundle lacks", at_fault());
                }
            }
            let ids: HashSet<&str> = operator_ids(&topology.definition).into_iter().collect();
            if let Some(operator) = topology.operators.keys().find(|op| !ids.contains(op.as_str())) {
                bail!("{}: topology {name} maps operator {operator}, which it does not have", at_fault());
            }
        }
        Ok(Bundle { manifest, components })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bundle {
        Bundle::new(vec![("a.wasm".into(), b"\0asm component".to_vec())], vec![])
    }

    #[test]
    fn a_bundle_round_trips() {
        let bytes = sample().to_bytes().unwrap();
        let read = Bundle::from_bytes(Path::new("b.weir"), &bytes).unwrap();
        assert_eq!(read.manifest, sample().manifest);
        assert_eq!(read.components, sample().components);
    }

    #[test]
    fn damaged_bundles_are_refused_with_the_reason() {
        let name = Path::new("b.weir");
        let bytes = sample().to_bytes().unwrap();
        let err = |bytes: &[u8]| format!("{:#}", Bundle::from_bytes(name, bytes).err().unwrap());
        assert!(err(b"garbage").contains("is not a Weir bundle"));
        assert!(err(&bytes[..bytes.len() - 3]).contains("truncated in component a.wasm"));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(err(&flipped).contains("does not match its checksum"));
        let mut other = sample();
        other.manifest.wit = "weir:topology@2.0.0".into();
        let message = err(&other.to_bytes().unwrap());
        assert!(
            message
                .contains("targets weir:topology@2.0.0, which this host does not run; it supports weir:topology@0.1.x"),
            "{message}"
        );
        let mut huge = sample();
        huge.manifest.components[0].name = "a".repeat(MAX_MANIFEST_BYTES);
        let message = err(&huge.to_bytes().unwrap());
        assert!(message.contains("bundle b.weir: its manifest is 4194"), "{message}");
        assert!(message.ends_with("bytes, more than the 4 MiB a host reads"), "{message}");
        let many = (0..=MAX_COMPONENTS).map(|i| (format!("c{i}.wasm"), b"\0asm".to_vec())).collect();
        let message = err(&Bundle::new(many, vec![]).to_bytes().unwrap());
        assert!(message.contains("bundle b.weir holds 17 components; a bundle may hold at most 16"), "{message}");
    }

    #[test]
    fn an_operator_map_names_the_bundles_components_and_the_topologys_operators() {
        let definition: TopologyDef = serde_json::from_str(
            r#"{"name":"t","nodes":[{"id":"spout","op":{"op":"spout","spout":{"kind":"file-lines","field":"line"}}},
                {"id":"split","inputs":[0],"op":{"op":"each","input":["line"],"output":["word"]}}]}"#,
        )
        .unwrap();
        let read = |operator: &str, component: &str| {
            let mut topology = BundledTopology::single("a.wasm".into(), definition.clone());
            topology.operators.insert(operator.into(), component.into());
            let components = vec![("a.wasm".into(), b"a".to_vec()), ("b.wasm".into(), b"b".to_vec())];
            let bytes = Bundle::new(components, vec![topology]).to_bytes().unwrap();
            Bundle::from_bytes(Path::new("b.weir"), &bytes).map(|b| b.manifest.topologies[0].operators.clone())
        };
        assert_eq!(read("split", "b.wasm").unwrap()["split"], "b.wasm");
        let err = format!("{:#}", read("split", "c.wasm").err().unwrap());
        assert!(err.contains("topology t names component c.wasm, which the bundle lacks"), "{err}");
        let err = format!("{:#}", read("nope", "b.wasm").err().unwrap());
        assert!(err.contains("topology t maps operator nope, which it does not have"), "{err}");
    }

    #[test]
    fn wit_versions_compare_by_major() {
        assert!(supports_wit("weir:topology@0.1.0"));
        assert!(supports_wit("weir:topology@0.1.7"));
        assert!(!supports_wit("weir:topology@0.2.0"));
        assert!(!supports_wit("other:topology@0.1.0"));
    }
}
