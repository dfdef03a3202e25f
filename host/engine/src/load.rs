//! Loading topologies: from a bundle or a self-describing component, the
//! definitions the components describe, checked into plans; and the copy a
//! data dir keeps of what ran on it, for its queries.

use crate::bundle::{Bundle, BundledTopology, MAX_MANIFEST_BYTES, Manifest};
use crate::instances::Components;
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::Engine;
use weir_config::SandboxConfig;
use weir_plan::{Plan, plan};
use weir_runtime::sandbox::OperatorSandbox;
use weir_runtime::{ComponentCache, LoadedComponent};
use weir_sdk::topology::{TopologyDef, parse_description};

/// A topology ready to run.
pub struct LoadedTopology {
    /// The components holding its operators.
    pub components: Arc<Components>,
    /// What the component says the topology is.
    pub definition: TopologyDef,
    /// The checked plan.
    pub plan: Arc<Plan>,
}

/// What a path holds: its components, each with its name in the bundle (or
/// its file name) and the name errors give it, and the manifest when it is
/// a bundle.
struct Source {
    components: Vec<(String, PathBuf, Vec<u8>)>,
    manifest: Option<Manifest>,
}

fn read_source(path: &Path) -> Result<Source> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read component {}", path.display()))?;
    if !crate::bundle::is_bundle(&bytes) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        return Ok(Source { components: vec![(name, path.to_owned(), bytes)], manifest: None });
    }
    let bundle = Bundle::from_bytes(path, &bytes)?;
    let components = bundle
        .components
        .into_iter()
        .map(|(name, bytes)| {
            let label = PathBuf::from(format!("{}#{name}", path.display()));
            (name, label, bytes)
        })
        .collect();
    Ok(Source { components, manifest: Some(bundle.manifest) })
}

/// A topology as a component describes it, with the components that run
/// its operators.
struct Described {
    components: Arc<Components>,
    definition: TopologyDef,
}

/// Every topology the component or bundle at `path` defines. A bundle's
/// manifest must say what its components describe; a topology's operators
/// run in the component that describes it, but for those the manifest maps
/// to another of its components.
fn describe_source(
    engine: &Engine,
    cache: &ComponentCache,
    path: &Path,
    config: &SandboxConfig,
) -> Result<Vec<Described>> {
    let source = read_source(path)?;
    // The manifest's topologies by the component that describes them, and
    // the components by name: a bundle may list any number of either.
    let mut listed: HashMap<&str, Vec<&BundledTopology>> = HashMap::new();
    for topology in source.manifest.iter().flat_map(|m| &m.topologies) {
        listed.entry(topology.component.as_str()).or_default().push(topology);
    }
    let mut loaded: HashMap<String, Arc<LoadedComponent>> = HashMap::new();
    let mut all: Vec<(Arc<LoadedComponent>, TopologyDef, Option<&BundledTopology>)> = Vec::new();
    for (name, label, bytes) in source.components {
        let component = Arc::new(LoadedComponent::from_bytes(engine, cache, &label, &bytes)?);
        let described = component
            .instantiate("(describe)", "describe", &OperatorSandbox::host_limits(config))
            .and_then(|mut guest| guest.describe());
        let json = described.map_err(|e| {
            anyhow::Error::new(e).context(format!("{}: the component's describe call failed", label.display()))
        })?;
        let definitions = read_description(&json)
            .with_context(|| format!("{} describes its topologies in a form this host cannot read", label.display()))?;
        let mapped: Vec<Option<&BundledTopology>> = match &source.manifest {
            Some(_) => {
                let listed = listed.get(name.as_str()).map_or(&[][..], Vec::as_slice);
                if !listed.iter().map(|t| &t.definition).eq(definitions.iter()) {
                    bail!("{} describes other topologies than the bundle's manifest lists for it", label.display());
                }
                listed.iter().copied().map(Some).collect()
            }
            None => vec![None; definitions.len()],
        };
        all.extend(definitions.into_iter().zip(mapped).map(|(d, m)| (Arc::clone(&component), d, m)));
        loaded.entry(name).or_insert(component);
    }
    all.into_iter()
        .map(|(default, definition, mapped)| {
            let mut by_operator = HashMap::new();
            for (operator, component) in mapped.into_iter().flat_map(|t| &t.operators) {
                let component = loaded
                    .get(component.as_str())
                    .cloned()
                    .with_context(|| format!("{}: no component {component}", path.display()))?;
                by_operator.insert(operator.clone(), component);
            }
            Ok(Described { components: Arc::new(Components { default, by_operator }), definition })
        })
        .collect()
}

/// The topologies a component's `describe` returned. Parsed whole, a
/// description takes several times its size in memory, so it is held to
/// the bound a bundle's manifest, which holds it, is held to.
fn read_description(json: &str) -> Result<Vec<TopologyDef>> {
    if json.len() > MAX_MANIFEST_BYTES {
        bail!("the description is {} bytes, more than the {} MiB a host reads", json.len(), MAX_MANIFEST_BYTES >> 20);
    }
    Ok(parse_description(json)?)
}

/// Every topology the component or bundle at `path` defines, with the
/// component that describes it (and runs the operators no other component
/// of a bundle is given).
pub fn describe_all(
    engine: &Engine,
    cache: &ComponentCache,
    path: &Path,
    config: &SandboxConfig,
) -> Result<Vec<(Arc<LoadedComponent>, TopologyDef)>> {
    let described = describe_source(engine, cache, path, config)?;
    Ok(described.into_iter().map(|d| (Arc::clone(&d.components.default), d.definition)).collect())
}

/// Loads the topologies named in `names` from the component or bundle at
/// `path` (the only one it defines, when `names` is empty), checked against
/// this host's sandbox `config`.
pub fn topologies(
    engine: &Engine,
    cache: &ComponentCache,
    path: &Path,
    names: &[String],
    config: &SandboxConfig,
) -> Result<Vec<LoadedTopology>> {
    let all = describe_source(engine, cache, path, config)?;
    let defined: Vec<&str> = all.iter().map(|d| d.definition.name.as_str()).collect();
    let chosen: Vec<&Described> = match (names, all.as_slice()) {
        ([], [only]) => vec![only],
        ([], []) => bail!("{} defines no topology", path.display()),
        ([], _) => bail!("{} defines several topologies ({}): choose with --topology", path.display(), json!(defined)),
        (names, all) => names
            .iter()
            .map(|name| match all.iter().find(|d| &d.definition.name == name) {
                Some(found) => Ok(found),
                None => bail!("{} defines no topology {} (it defines {})", path.display(), json!(name), json!(defined)),
            })
            .collect::<Result<_>>()?,
    };
    chosen
        .into_iter()
        .map(|described| {
            let definition = &described.definition;
            let plan = plan(definition, config).with_context(|| format!("invalid topology in {}", path.display()))?;
            Ok(LoadedTopology {
                components: Arc::clone(&described.components),
                definition: definition.clone(),
                plan: Arc::new(plan),
            })
        })
        .collect()
}

/// Where a data dir keeps the component (or bundle) of each topology run
/// on it, so that its queries can be answered later.
fn remembered(data: &Path, topology: &str) -> PathBuf {
    data.join("topologies").join(format!("{topology}.weir"))
}

/// The names and kinds of `definition`'s states: what an upgrade must keep.
pub fn state_kinds(definition: &TopologyDef) -> Vec<(String, String)> {
    definition.states().into_iter().map(|state| (state.name.clone(), format!("{:?}", state.kind))).collect()
}

/// Keeps a copy of the component or bundle at `source`, which runs
/// `topology`, in the data dir `data`.
pub fn remember(data: &Path, topology: &str, source: &Path) -> Result<()> {
    let path = remembered(data, topology);
    std::fs::create_dir_all(path.parent().expect("under the data dir"))?;
    let tmp = path.with_extension("tmp");
    std::fs::copy(source, &tmp)
        .with_context(|| format!("keeping a copy of {} in {}", source.display(), data.display()))?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

/// The component or bundle last run for `topology` on the data dir `data`.
pub fn remembered_source(data: &Path, topology: &str) -> Result<PathBuf> {
    let path = remembered(data, topology);
    if !path.is_file() {
        bail!(
            "no topology {topology} has run on data dir {} (weir run keeps its component there); pass --component",
            data.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A description of one topology whose one function lists `outputs`
    /// one-letter output fields.
    fn description(outputs: usize) -> String {
        let fields = serde_json::to_string(&vec!["a"; outputs]).unwrap();
        format!(r#"[{{"name":"t","nodes":[{{"id":"f","op":{{"op":"each","input":["a"],"output":{fields}}}}}]}}]"#)
    }

    #[test]
    fn a_description_past_the_manifests_bound_is_refused_before_it_is_parsed() {
        assert_eq!(read_description(&description(3)).unwrap().len(), 1);
        let huge = description(MAX_MANIFEST_BYTES / 4);
        let error = read_description(&huge).unwrap_err().to_string();
        assert_eq!(error, format!("the description is {} bytes, more than the 4 MiB a host reads", huge.len()));
    }
}
