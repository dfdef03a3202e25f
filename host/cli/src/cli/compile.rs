//! Where compiled components are cached and how compiling is bounded,
//! shared by the verbs that load components; and the hidden verb a
//! bounded child compiles with.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wasmtime::Engine;
use weir_config::{DEFAULT_COMPILE_MEMORY_MIB, DEFAULT_COMPILE_TIMEOUT_MS};
use weir_runtime::{self as runtime, CompileBounds, ComponentCache};

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Compiling components")]
pub struct CompileArgs {
    /// Where compiled components are cached [default: $WEIR_CACHE_DIR, else ~/.cache/weir].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Memory compiling one component may take, in MiB. Components compile
    /// one at a time, each in a child process held to this; one that needs
    /// more is refused (compiling takes memory in proportion to a
    /// function's control flow, which a hostile component can make huge).
    #[arg(long, default_value_t = DEFAULT_COMPILE_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(64..))]
    compile_memory_mib: u64,
    /// Time compiling one component may take, in milliseconds; past it the
    /// component is refused.
    #[arg(long, default_value_t = DEFAULT_COMPILE_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    compile_timeout_ms: u64,
}

impl CompileArgs {
    /// The engine (with calls bounded in CPU time when `cpu_limit`) and the
    /// cache that compiles for it within these bounds.
    pub fn engine_and_cache(&self, cpu_limit: bool) -> Result<(Engine, ComponentCache)> {
        let bounds = CompileBounds {
            memory_mib: self.compile_memory_mib,
            timeout: Duration::from_millis(self.compile_timeout_ms),
            cpu_limit,
        };
        let dir = self.cache_dir.clone().unwrap_or_else(runtime::default_cache_dir);
        Ok((runtime::engine(cpu_limit)?, ComponentCache::new(dir).compiling_in_child(bounds)))
    }
}

/// Compiles the component on stdin to stdout, for a parent `weir`.
#[derive(Args, Debug)]
pub struct CompileComponentArgs {
    /// The memory this process may take, in MiB.
    #[arg(long)]
    memory_mib: u64,
    /// Compile for an engine that bounds calls' CPU time.
    #[arg(long)]
    cpu_limit: bool,
}

pub fn run(args: CompileComponentArgs) -> Result<()> {
    runtime::compile::serve_one(args.cpu_limit, args.memory_mib)
}
