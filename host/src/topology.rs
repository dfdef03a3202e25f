//! Loading a topology: the component, the definition it describes, the plan.

use crate::plan::{Plan, plan};
use crate::runtime::{ComponentCache, LoadedComponent};
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

/// Loads the component at `path` and the topology named `name` from it
/// (the only one it defines, when `name` is `None`).
pub fn load(engine: &Engine, cache: &ComponentCache, path: &Path, name: Option<&str>) -> Result<LoadedTopology> {
    let component = LoadedComponent::load(engine, cache, path)?;
    let json = component.instantiate("describe")?.describe()?;
    let definitions = parse_description(&json)
        .with_context(|| format!("{} describes its topologies in a form this host cannot read", path.display()))?;
    let names: Vec<&str> = definitions.iter().map(|d| d.name.as_str()).collect();
    let definition = match (name, definitions.as_slice()) {
        (None, [only]) => only.clone(),
        (None, []) => bail!("{} defines no topology", path.display()),
        (None, _) => bail!("{} defines several topologies ({names:?}): choose one with --topology", path.display()),
        (Some(name), defs) => match defs.iter().find(|d| d.name == name) {
            Some(def) => def.clone(),
            None => bail!("{} defines no topology {name:?} (it defines {names:?})", path.display()),
        },
    };
    let plan = plan(&definition).with_context(|| format!("invalid topology in {}", path.display()))?;
    Ok(LoadedTopology { component: Arc::new(component), definition, plan: Arc::new(plan) })
}
