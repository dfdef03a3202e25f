//! `weir bundle`: build a guest directory and pack it into a `.weir` bundle.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use weir_config::SandboxConfig;
use weir_engine::bundle::{Bundle, BundledTopology, is_bundle};
use weir_engine::{guest_build, load};
use weir_plan as plan;

#[derive(Args, Debug)]
pub struct BundleArgs {
    /// A guest directory (a Rust crate, a Python or JavaScript guest, or
    /// several guests with a weir-bundle.json), built first, or a built
    /// component (.wasm).
    path: PathBuf,
    /// Where to write the bundle [default: <name>.weir in the current directory].
    #[arg(short, long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    compile: super::compile::CompileArgs,
    #[command(flatten)]
    topology_limits: super::limits::TopologyLimitArgs,
}

pub fn run(args: BundleArgs) -> Result<()> {
    let wasm = if args.path.is_dir() { guest_build::build(&args.path)? } else { args.path.clone() };
    // The engine `weir run` uses by default: describing compiles the
    // component, and that compilation then serves the run from the cache.
    let (engine, cache) = args.compile.engine_and_cache(true)?;
    let config = SandboxConfig { topology: args.topology_limits.limits(), ..SandboxConfig::default() };
    let stem = args.path.file_stem().and_then(|s| s.to_str()).unwrap_or("topology").to_owned();
    let output = args.output.clone().unwrap_or_else(|| PathBuf::from(format!("{stem}.weir")));
    let bytes = std::fs::read(&wasm).with_context(|| format!("reading {}", wasm.display()))?;
    if is_bundle(&bytes) {
        // A directory of several guests builds into a bundle, checked as it
        // was built.
        let bundle = Bundle::from_bytes(&wasm, &bytes)?;
        std::fs::write(&output, &bytes).with_context(|| format!("writing {}", output.display()))?;
        let names: Vec<&str> = bundle.manifest.topologies.iter().map(|t| t.definition.name.as_str()).collect();
        let components: Vec<&str> = bundle.manifest.components.iter().map(|c| c.name.as_str()).collect();
        println!(
            "wrote {} ({} bytes): {} from {}",
            output.display(),
            bytes.len(),
            names.join(", "),
            components.join(", ")
        );
        return Ok(());
    }
    let described = load::describe_all(&engine, &cache, &wasm, &config)?;
    if described.is_empty() {
        bail!("{} defines no topology", wasm.display());
    }
    let name = wasm.file_name().and_then(|n| n.to_str()).context("the component's file name")?.to_owned();
    let mut topologies = Vec::new();
    for (_, definition) in described {
        plan::check_stream(&definition, &config.topology)
            .with_context(|| format!("invalid topology in {}", wasm.display()))?;
        topologies.push(BundledTopology::single(name.clone(), definition));
    }
    let bundle = Bundle::new(vec![(name.clone(), bytes)], topologies);
    let encoded = bundle.to_bytes()?;
    std::fs::write(&output, &encoded).with_context(|| format!("writing {}", output.display()))?;
    let names: Vec<&str> = bundle.manifest.topologies.iter().map(|t| t.definition.name.as_str()).collect();
    println!("wrote {} ({} bytes): {} from {name}", output.display(), encoded.len(), names.join(", "));
    Ok(())
}
