//! Loading a topology: the component, the definition it describes, the plan.

use crate::config::SandboxConfig;
use crate::plan::{Plan, plan};
use crate::runtime::{ComponentCache, LoadedComponent};
use crate::sandbox::OperatorSandbox;
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::sync::Arc;
use wasmtime::Engine;
use weir_sdk::topology::{TopologyDef, parse_description};

/// A topology ready to run.
pub struct LoadedTopology {
    /// The component holding its operators.
    pub component: Arc<LoadedComponent>,
    /// What the component says the topology is.
    pub definition: TopologyDef,
    /// The checked plan.
    pub plan: Arc<Plan>,
}

/// Loads the component at `path` and the topologies named in `names` from
/// it (the only one it defines, when `names` is empty), checked against this
/// host's sandbox `config`.
pub fn load(
    engine: &Engine,
    cache: &ComponentCache,
    path: &Path,
    names: &[String],
    config: &SandboxConfig,
) -> Result<Vec<LoadedTopology>> {
    let component = Arc::new(LoadedComponent::load(engine, cache, path)?);
    let json = component.instantiate("describe", &OperatorSandbox::host_limits(config))?.describe()?;
    let definitions = parse_description(&json)
        .with_context(|| format!("{} describes its topologies in a form this host cannot read", path.display()))?;
    let defined: Vec<&str> = definitions.iter().map(|d| d.name.as_str()).collect();
    let chosen: Vec<TopologyDef> = match (names, definitions.as_slice()) {
        ([], [only]) => vec![only.clone()],
        ([], []) => bail!("{} defines no topology", path.display()),
        ([], _) => bail!("{} defines several topologies ({defined:?}): choose with --topology", path.display()),
        (names, defs) => names
            .iter()
            .map(|name| match defs.iter().find(|d| &d.name == name) {
                Some(def) => Ok(def.clone()),
                None => bail!("{} defines no topology {name:?} (it defines {defined:?})", path.display()),
            })
            .collect::<Result<_>>()?,
    };
    chosen
        .into_iter()
        .map(|definition| {
            let plan = plan(&definition, config).with_context(|| format!("invalid topology in {}", path.display()))?;
            Ok(LoadedTopology { component: Arc::clone(&component), definition, plan: Arc::new(plan) })
        })
        .collect()
}
