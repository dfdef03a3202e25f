//! `weir inspect`: what a bundle or component holds.

use anyhow::{Context, Result};
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;
use weir_config::SandboxConfig;
use weir_engine::bundle::{Bundle, BundledTopology, ComponentEntry, Manifest, is_bundle, sha256_hex};
use weir_engine::load;
use weir_io::spout::SpoutKind;
use weir_plan::{self as plan, builtin_name};
use weir_runtime::bindings::WIT_PACKAGE;
use weir_sdk::topology::{
    AggregatorDef, AggregatorKind, NodeDef, OperationDef, Partitioning, QueryDef, SandboxDef, SinkDef, SinkPayloadDef,
    SpoutDef, TopologyDef, WindowDef,
};
use weir_state::rules::kind_name;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A bundle (.weir) or a component (.wasm).
    path: PathBuf,
    /// Print the manifest as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    compile: super::compile::CompileArgs,
    #[command(flatten)]
    topology_limits: super::limits::TopologyLimitArgs,
}

/// The manifest of a bundle, or the one a bundle of this component would
/// have; its topologies within this host's caps, so that what is shown is
/// bounded and its names are safe to print.
fn manifest(args: &InspectArgs) -> Result<Manifest> {
    let manifest = read_manifest(args)?;
    let limits = args.topology_limits.limits();
    for topology in &manifest.topologies {
        plan::check_limits(&topology.definition, &limits)
            .with_context(|| format!("{} holds a topology this host refuses", args.path.display()))?;
    }
    Ok(manifest)
}

fn read_manifest(args: &InspectArgs) -> Result<Manifest> {
    let bytes = std::fs::read(&args.path).with_context(|| format!("cannot read {}", args.path.display()))?;
    if is_bundle(&bytes) {
        return Ok(Bundle::from_bytes(&args.path, &bytes)?.manifest);
    }
    // With the CPU limit, as `weir run` describes: a description that
    // spins is interrupted, and the compiled component serves a later run.
    let (engine, cache) = args.compile.engine_and_cache(true)?;
    let name = args.path.file_name().and_then(|n| n.to_str()).unwrap_or("component.wasm").to_owned();
    let topologies = load::describe_all(&engine, &cache, &args.path, &SandboxConfig::default())?
        .into_iter()
        .map(|(_, definition)| BundledTopology::single(name.clone(), definition))
        .collect();
    let component = ComponentEntry { name, size: bytes.len() as u64, sha256: sha256_hex(&bytes) };
    Ok(Manifest { wit: WIT_PACKAGE.to_owned(), components: vec![component], topologies })
}

/// What a topology's JSON calls `value` (a kind, a partitioning).
fn name_of(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        Ok(serde_json::Value::Object(fields)) => {
            fields.get("kind").and_then(|k| k.as_str()).unwrap_or_default().to_owned()
        }
        _ => String::new(),
    }
}

fn fields(names: &[String]) -> String {
    format!("[{}]", names.join(", "))
}

fn spout(def: &SpoutDef) -> String {
    let kind = match SpoutKind::of(def) {
        SpoutKind::Transactional => "transactional",
        SpoutKind::Opaque => "opaque",
        SpoutKind::NonTransactional => "non-transactional",
    };
    let what = match def {
        SpoutDef::FileLines { .. } => "file lines (built in)".to_owned(),
        SpoutDef::DirectoryLines { .. } => "directory lines (built in)".to_owned(),
        SpoutDef::Generator { count, .. } => format!("generator of {count} integers (built in)"),
        SpoutDef::Guest { promise, .. } => format!("guest spout ({})", name_of(promise)),
        SpoutDef::JetStream(stream) => {
            format!("NATS JetStream stream {}, subjects {} (built in)", stream.stream, stream.subjects.join(", "))
        }
        SpoutDef::Kafka(topic) => match &topic.partitions {
            Some(list) => {
                let list: Vec<String> = list.iter().map(u32::to_string).collect();
                format!("Kafka topic {}, partitions {} (built in)", topic.topic, list.join(", "))
            }
            None => format!("Kafka topic {}, every partition (built in)", topic.topic),
        },
    };
    format!("{what}, {kind} -> {}", fields(&def.fields()))
}

fn aggregator(a: &AggregatorDef) -> String {
    let kind = match a.kind {
        AggregatorKind::Builtin(builtin) => format!("built-in {} (in the host)", builtin_name(builtin)),
        AggregatorKind::Combiner => "guest combiner".to_owned(),
        AggregatorKind::Reducer => "guest reducer".to_owned(),
        AggregatorKind::General => "guest aggregator".to_owned(),
    };
    format!("{kind} {}: {} -> {}", a.id, fields(&a.input), fields(&a.output))
}

fn grouped(group: &[String]) -> String {
    if group.is_empty() { String::new() } else { format!("group by {}, ", fields(group)) }
}

/// One node: its kind and id, what it reads from, and what it does.
fn node_line(def: &TopologyDef, node: &NodeDef) -> String {
    let inputs: Vec<&str> = node.inputs.iter().filter_map(|&i| def.nodes.get(i)).map(|n| n.id.as_str()).collect();
    let from = if inputs.is_empty() { String::new() } else { format!(" <- {}", inputs.join(", ")) };
    let parallelism = if node.parallelism > 1 { format!(" (x{})", node.parallelism) } else { String::new() };
    let what = match &node.op {
        OperationDef::Spout { spout } => fields(&spout.fields()),
        OperationDef::QueryStream { name } => format!("query {name} -> [args]"),
        OperationDef::Each { input, output }
        | OperationDef::Map { input, output }
        | OperationDef::FlatMap { input, output } => format!("{} -> {}", fields(input), fields(output)),
        OperationDef::Peek { input } | OperationDef::Filter { input } => fields(input),
        OperationDef::Project { fields: kept } => fields(kept),
        OperationDef::Partition { by } => match by {
            Partitioning::Fields { fields: by } => format!("by {}", fields(by)),
            other => name_of(other),
        },
        OperationDef::Aggregate { group, aggregators, .. } => {
            let all: Vec<String> = aggregators.iter().map(aggregator).collect();
            format!("{}{}", grouped(group), all.join("; "))
        }
        OperationDef::PersistentAggregate { state, group, aggregator: a } => {
            format!("{}{}, into state {}", grouped(group), aggregator(a), state.name)
        }
        OperationDef::Window { window, state, group, aggregator: a } => {
            let span = |size: &u64, slide: &u64, unit: &str| match size == slide {
                true => format!("tumbling windows of {size} {unit}"),
                false => format!("windows of {size} {unit} every {slide}"),
            };
            let watermark = |max_delay_ms, lateness_ms, idle_timeout_ms: Option<u64>| match idle_timeout_ms {
                None => format!("(max delay {max_delay_ms} ms, lateness {lateness_ms} ms)"),
                Some(idle) => format!(
                    "(max delay {max_delay_ms} ms, lateness {lateness_ms} ms, a spout partition idle after {idle} ms)"
                ),
            };
            let cut = match window {
                WindowDef::Count { size, slide } => span(size, slide, "tuples"),
                WindowDef::Duration { size_ms, slide_ms } => {
                    format!("{} by the time each batch was emitted", span(size_ms, slide_ms, "ms"))
                }
                WindowDef::EventTime { field, size_ms, slide_ms, max_delay_ms, lateness_ms, idle_timeout_ms } => {
                    format!(
                        "{} by event time {field} {}",
                        span(size_ms, slide_ms, "ms"),
                        watermark(max_delay_ms, lateness_ms, *idle_timeout_ms)
                    )
                }
                WindowDef::Session { field, gap_ms, max_delay_ms, lateness_ms, idle_timeout_ms } => format!(
                    "sessions ended by {gap_ms} ms without a tuple, by event time {field} {}",
                    watermark(max_delay_ms, lateness_ms, *idle_timeout_ms)
                ),
            };
            format!("{}{cut}: {}, open windows in state {}", grouped(group), aggregator(a), state.name)
        }
        OperationDef::PartitionPersist { state, input, output } => {
            format!("guest state updater: {} -> {}, into state {}", fields(input), fields(output), state.name)
        }
        OperationDef::StateQuery { state, input, query, output } => {
            let query = match query {
                QueryDef::MapGet => "map-get (in the host)",
                QueryDef::Guest => "guest query function",
            };
            format!("{} -> {} with {query} on state {state}", fields(input), fields(output))
        }
        OperationDef::Merge => String::new(),
        OperationDef::LateTuples => "the tuples the window found late".to_owned(),
        OperationDef::Join { fields: on, kinds, output } => {
            let on: Vec<String> =
                on.iter().zip(kinds).map(|(f, k)| format!("{} ({})", fields(f), name_of(k))).collect();
            format!("on {} -> {}", on.join(" = "), fields(output))
        }
        OperationDef::Extreme { by, .. } => {
            format!("by {}", if by.is_empty() { "every field".into() } else { fields(by) })
        }
        OperationDef::Sink { sink: SinkDef::JetStream { subject, payload } } => match payload {
            SinkPayloadDef::Json => format!("to JetStream subject {subject}, each tuple as JSON"),
            SinkPayloadDef::Raw { field } => format!("to JetStream subject {subject}, field {field} as the payload"),
        },
        OperationDef::Sink { sink: SinkDef::Kafka { topic, payload } } => match payload {
            SinkPayloadDef::Json => format!("to Kafka topic {topic}, each tuple as JSON"),
            SinkPayloadDef::Raw { field } => format!("to Kafka topic {topic}, field {field} as the value"),
        },
    };
    format!("{} {}{from}{parallelism}: {what}", node.op.kind_name(), node.id)
}

fn sandbox(def: &SandboxDef) -> String {
    let mut parts = Vec::new();
    for (what, value) in [
        ("memory MiB", def.memory_mib),
        ("CPU ms per call", def.call_ms),
        ("output MiB", def.output_mib),
        ("output tuples", def.output_tuples),
    ] {
        if let Some(value) = value {
            parts.push(format!("{what} {value}"));
        }
    }
    for grant in &def.read_only_dirs {
        parts.push(format!("read-only {} at {}", grant.host, grant.guest));
    }
    parts.join(", ")
}

fn describe(manifest: &Manifest) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "WIT {}", manifest.wit);
    for c in &manifest.components {
        let _ = writeln!(out, "component {} ({} bytes, sha256 {})", c.name, c.size, c.sha256);
    }
    for t in &manifest.topologies {
        let d = &t.definition;
        let _ = writeln!(out, "\ntopology {} (component {})", d.name, t.component);
        if let Some(def) = d.spout() {
            let _ = writeln!(out, "  spout: {}", spout(def));
        }
        for state in d.states() {
            let cache = state.cache_size.map_or(String::new(), |n| format!(", cache {n} entries"));
            let _ = writeln!(out, "  state {} ({}{cache})", state.name, kind_name(state.kind));
        }
        for query in d.queries() {
            let _ = writeln!(out, "  query {query}");
        }
        for node in &d.nodes {
            let _ = writeln!(out, "  {}", node_line(d, node));
        }
        if d.sandbox.is_empty() {
            let _ = writeln!(out, "  sandbox: the host's limits, no capabilities");
        }
        for (id, asked) in &d.sandbox {
            let _ = writeln!(out, "  sandbox of {id}: {}", sandbox(asked));
        }
    }
    out
}

pub fn run(args: InspectArgs) -> Result<()> {
    let manifest = manifest(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&manifest)?);
    } else {
        print!("{}", describe(&manifest));
    }
    Ok(())
}
