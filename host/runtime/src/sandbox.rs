//! What each operator instance may use: its limits (what the topology asks
//! for, capped by the host) and its capabilities (none, unless granted).

use crate::call_deadline;
use crate::memory_pool::TopologyMemory;
use anyhow::{Context, Result, bail};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;
use weir_config::{LogLimits, SandboxConfig, StateLimits};
use weir_sdk::topology::{SandboxDef, TopologyDef};

const MIB: u64 = 1024 * 1024;

/// The sandbox of one operator's instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorSandbox {
    /// Largest linear memory, in bytes.
    pub memory_bytes: u64,
    /// CPU time per call, in milliseconds.
    pub call_ms: u64,
    /// Bytes a call may return.
    pub output_bytes: u64,
    /// Tuples a call may emit.
    pub output_tuples: u64,
    /// Read-only directories: host path (canonical) and guest path.
    pub read_only_dirs: Vec<(PathBuf, String)>,
    /// What a call may write to stdout and stderr.
    pub log: LogLimits,
    /// The pool the topology's instances draw their memory from.
    pub memory_pool: TopologyMemory,
}

impl OperatorSandbox {
    /// The host's own limits, and no capabilities, in a topology pool of
    /// its own.
    pub fn host_limits(config: &SandboxConfig) -> OperatorSandbox {
        OperatorSandbox {
            memory_bytes: config.max_memory_mib * MIB,
            call_ms: config.max_call_ms,
            output_bytes: config.max_output_mib * MIB,
            output_tuples: config.max_output_tuples,
            read_only_dirs: Vec::new(),
            log: config.log,
            memory_pool: TopologyMemory::new(config.max_topology_memory_mib.saturating_mul(MIB)),
        }
    }
}

/// The sandboxes of a topology's operators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandboxes {
    default: OperatorSandbox,
    operators: HashMap<String, OperatorSandbox>,
    /// What the topology's guests may read and write through its states.
    pub state: StateLimits,
}

impl Sandboxes {
    /// The sandbox of operator `id`.
    pub fn of(&self, id: &str) -> &OperatorSandbox {
        self.operators.get(id).unwrap_or(&self.default)
    }

    /// The longest any one call may hold its thread before it is abandoned
    /// (its call deadline), or `None` if some operator's calls are not
    /// limited in time.
    pub fn longest_call(&self) -> Option<Duration> {
        std::iter::once(&self.default)
            .chain(self.operators.values())
            .map(|sandbox| call_deadline(sandbox.call_ms))
            .try_fold(Duration::ZERO, |longest, call| Some(longest.max(call?)))
    }
}

fn limit(topology: &str, operator: &str, what: &str, asked: Option<u64>, max: u64, flag: &str) -> Result<u64> {
    match asked {
        None => Ok(max),
        // Only the CPU limit may be off (0): an operator asking for one on
        // such a host could not get it.
        Some(asked) if max == 0 => bail!(
            "topology {topology}: operator {operator} asks for a {what} limit of {asked}, but this host runs \
             without one ({flag} 0)"
        ),
        Some(0) => bail!("topology {topology}: operator {operator} asks for a {what} limit of 0"),
        Some(asked) if asked > max => bail!(
            "topology {topology}: operator {operator} asks for a {what} limit of {asked}, \
             more than this host allows ({max}; see {flag})"
        ),
        Some(asked) => Ok(asked),
    }
}

fn resolve(
    topology: &str,
    operator: &str,
    def: &SandboxDef,
    config: &SandboxConfig,
    memory_pool: &TopologyMemory,
) -> Result<OperatorSandbox> {
    let memory_mib =
        limit(topology, operator, "memory (MiB)", def.memory_mib, config.max_memory_mib, "--max-memory-mib")?;
    let call_ms =
        limit(topology, operator, "CPU time per call (ms)", def.call_ms, config.max_call_ms, "--max-call-ms")?;
    let output_mib =
        limit(topology, operator, "output (MiB)", def.output_mib, config.max_output_mib, "--max-output-mib")?;
    let output_tuples =
        limit(topology, operator, "output tuples", def.output_tuples, config.max_output_tuples, "--max-output-tuples")?;
    let mut read_only_dirs = Vec::new();
    for grant in &def.read_only_dirs {
        let refuse = |why: &str| {
            anyhow::anyhow!(
                "topology {topology}: operator {operator} asks for read-only access to {}, which this host \
                 does not grant: {why}",
                grant.host
            )
        };
        let host = std::fs::canonicalize(&grant.host).map_err(|e| refuse(&e.to_string()))?;
        if !host.is_dir() {
            return Err(refuse("it is not a directory"));
        }
        let allowed = config
            .allowed_dirs
            .iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .any(|dir| host.starts_with(dir));
        if !allowed {
            return Err(refuse("it is not under a directory allowed with --allow-dir"));
        }
        if !grant.guest.starts_with('/') {
            bail!(
                "topology {topology}: operator {operator} mounts {} at {}: use an absolute guest path",
                grant.host,
                serde_json::to_string(&grant.guest).unwrap_or_default()
            );
        }
        read_only_dirs.push((host, grant.guest.clone()));
    }
    Ok(OperatorSandbox {
        memory_bytes: memory_mib * MIB,
        call_ms,
        output_bytes: output_mib * MIB,
        output_tuples,
        read_only_dirs,
        log: config.log,
        memory_pool: memory_pool.clone(),
    })
}

/// Each operator's sandbox, or the reason the topology is refused. The
/// operators' instances draw their memory from one pool, the topology's.
pub fn sandboxes(def: &TopologyDef, operator_ids: &[&str], config: &SandboxConfig) -> Result<Sandboxes> {
    let default = OperatorSandbox::host_limits(config);
    let known: HashSet<&str> = operator_ids.iter().copied().collect();
    let mut operators = HashMap::new();
    for (id, asked) in &def.sandbox {
        if !known.contains(id.as_str()) {
            bail!(
                "topology {}: sandbox settings name operator {}, which the topology does not have",
                def.name,
                serde_json::to_string(id).unwrap_or_default()
            );
        }
        let sandbox =
            resolve(&def.name, id, asked, config, &default.memory_pool).with_context(|| format!("operator {id}"))?;
        operators.insert(id.clone(), sandbox);
    }
    Ok(Sandboxes { default, operators, state: config.state })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::topology::DirGrant;

    fn topology(sandbox: SandboxDef) -> TopologyDef {
        TopologyDef { name: "t".into(), nodes: vec![], sandbox: [("op".to_owned(), sandbox)].into() }
    }

    #[test]
    fn limits_default_to_the_hosts_and_may_be_lower() {
        let config = SandboxConfig::default();
        let s =
            sandboxes(&topology(SandboxDef { memory_mib: Some(16), ..Default::default() }), &["op"], &config).unwrap();
        assert_eq!(s.of("op").memory_bytes, 16 * MIB);
        assert_eq!(s.of("op").call_ms, config.max_call_ms);
        assert_eq!(s.of("other").memory_bytes, config.max_memory_mib * MIB);
    }

    #[test]
    fn the_longest_call_is_the_longest_call_deadline_of_any_operator_or_none_if_one_is_unlimited() {
        let config = SandboxConfig { max_call_ms: 1000, ..Default::default() };
        let lower = topology(SandboxDef { call_ms: Some(300), ..Default::default() });
        let deadline = |call_ms| call_deadline(call_ms).unwrap();
        assert_eq!(sandboxes(&lower, &["op"], &config).unwrap().longest_call(), Some(deadline(1000)));
        let unlimited = SandboxConfig { max_call_ms: 0, ..Default::default() };
        assert_eq!(sandboxes(&topology(SandboxDef::default()), &["op"], &unlimited).unwrap().longest_call(), None);
    }

    #[test]
    fn asking_more_than_the_host_allows_is_refused() {
        let err = sandboxes(
            &topology(SandboxDef { memory_mib: Some(1024), ..Default::default() }),
            &["op"],
            &SandboxConfig::default(),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("operator op asks for a memory (MiB) limit of 1024"), "{err:#}");
    }

    #[test]
    fn a_directory_is_granted_only_under_an_allowed_one() {
        let allowed = tempfile::tempdir().unwrap();
        let inside = allowed.path().join("data");
        std::fs::create_dir(&inside).unwrap();
        let grant = |host: &std::path::Path| SandboxDef {
            read_only_dirs: vec![DirGrant { host: host.display().to_string(), guest: "/data".into() }],
            ..Default::default()
        };
        let config = SandboxConfig { allowed_dirs: vec![allowed.path().to_owned()], ..Default::default() };
        let s = sandboxes(&topology(grant(&inside)), &["op"], &config).unwrap();
        assert_eq!(s.of("op").read_only_dirs, [(inside.canonicalize().unwrap(), "/data".to_owned())]);
        let err = sandboxes(&topology(grant(&inside)), &["op"], &SandboxConfig::default()).unwrap_err();
        assert!(format!("{err:#}").contains("operator op asks for read-only access to"), "{err:#}");
        assert!(format!("{err:#}").contains("--allow-dir"), "{err:#}");
    }

    #[test]
    fn settings_for_an_unknown_operator_are_refused() {
        let err = sandboxes(&topology(SandboxDef::default()), &["other"], &SandboxConfig::default()).unwrap_err();
        assert!(err.to_string().contains("operator \"op\""), "{err}");
    }
}
