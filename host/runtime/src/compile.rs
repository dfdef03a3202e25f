//! Compiles an untrusted component in a child process, bounded in memory
//! and time.
//!
//! Compiling takes memory in proportion to a function's control flow: one
//! 7.5 MB function of nested blocks took 2 GB, on each core Wasmtime
//! compiles with, and a bundle can hold many. In a child `weir` process
//! under a data-size limit and a deadline, a component past them is
//! refused with the reason and the host keeps its memory.

use anyhow::{Context, Result, bail};
use rlimit::Resource;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The hidden `weir` subcommand a child compiles with.
pub const COMPILE_COMMAND: &str = "compile-component";

/// Bounds on compiling one component.
#[derive(Clone, Debug)]
pub struct CompileBounds {
    /// Memory the compiling process may take (its data segment, heap and
    /// thread stacks), in MiB.
    pub memory_mib: u64,
    /// Time compiling may take.
    pub timeout: Duration,
    /// Whether the engine bounds calls' CPU time (`runtime::engine`'s
    /// argument): the compiled code must match the engine that loads it.
    pub cpu_limit: bool,
}

/// A component refused for going past its `CompileBounds`.
#[derive(Debug)]
pub struct CompileRefused(String);

impl std::fmt::Display for CompileRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CompileRefused {}

/// Threads a child compiles with, at most.
const COMPILE_THREADS: usize = 8;

/// Stderr kept from a child: its error message, not an unbounded stream.
const STDERR_KEPT: u64 = 16 << 10;

/// The precompiled form of `wasm` (as `Engine::precompile_component` gives
/// it), compiled by a child `weir` process within `bounds`.
pub fn in_child(wasm: &[u8], bounds: &CompileBounds) -> Result<Vec<u8>> {
    let mut command = Command::new(weir_executable()?);
    command.args([COMPILE_COMMAND, "--memory-mib", &bounds.memory_mib.to_string()]);
    if bounds.cpu_limit {
        command.arg("--cpu-limit");
    }
    // Each compiling thread holds its functions' memory: the Python
    // guest's interpreter took 420 MiB with 2 threads, 640 with 8, more
    // than 768 with 16. Eight keep a large machine's compile within the
    // default bound, and fast.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(COMPILE_THREADS);
    command.env("RAYON_NUM_THREADS", threads.to_string());
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start a process to compile the component")?;
    let (mut stdin, mut stdout, stderr) =
        (child.stdin.take().unwrap(), child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (status, compiled, errors) = std::thread::scope(|scope| {
        // A child that fails early closes its stdin: the write's error is
        // the child's to explain.
        scope.spawn(move || stdin.write_all(wasm));
        let compiled = scope.spawn(move || {
            let mut compiled = Vec::new();
            stdout.read_to_end(&mut compiled).map(|_| compiled)
        });
        let errors = scope.spawn(move || {
            let mut kept = String::new();
            let mut stderr = stderr.take(STDERR_KEPT);
            let _ = stderr.read_to_string(&mut kept);
            let _ = std::io::copy(&mut stderr.into_inner(), &mut std::io::sink());
            kept
        });
        let status = wait_until(&mut child, Instant::now() + bounds.timeout);
        (status, compiled.join().unwrap(), errors.join().unwrap())
    });
    match status? {
        None => Err(CompileRefused(format!(
            "compiling it took longer than the {} ms this host allows (--compile-timeout-ms)",
            bounds.timeout.as_millis()
        ))
        .into()),
        Some(status) if status.success() => compiled.context("reading the compiled component"),
        Some(status) => Err(failure(status, &errors, bounds)),
    }
}

/// Why a child failed: past the memory bound (an allocation failed and the
/// process aborted, or the kernel killed it), or the compiler's own error
/// (an invalid component), which the child printed.
fn failure(status: ExitStatus, errors: &str, bounds: &CompileBounds) -> anyhow::Error {
    let out_of_memory = errors.contains("memory allocation of")
        || errors.contains("failed to spawn thread")
        || matches!(status.signal(), Some(libc::SIGABRT | libc::SIGKILL | libc::SIGSEGV | libc::SIGBUS));
    if out_of_memory {
        return CompileRefused(format!(
            "compiling it needs more than the {} MiB this host allows (--compile-memory-mib)",
            bounds.memory_mib
        ))
        .into();
    }
    // The child's `main` printed its error last, after any log lines.
    let errors = errors.trim();
    match errors.rsplit_once("\nerror: ").map(|(_, message)| message).or(errors.strip_prefix("error: ")) {
        Some(message) => anyhow::anyhow!("{message}"),
        None => anyhow::anyhow!("the compiling process failed ({status}): {errors}"),
    }
}

/// The child's exit status, or `None` once `deadline` passed (the child is
/// killed then).
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// This process's own executable, which has the compile subcommand; by
/// `/proc/self/exe`, which stays valid when the file is replaced on upgrade.
fn weir_executable() -> Result<PathBuf> {
    let own = PathBuf::from("/proc/self/exe");
    if own.exists() {
        return Ok(own);
    }
    std::env::current_exe().context("cannot find the weir executable to compile with")
}

/// The child's side: reads a component on stdin, writes its compiled form
/// on stdout, its data segment limited to `memory_mib` first.
pub fn serve_one(cpu_limit: bool, memory_mib: u64) -> Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number only. A
    // parent killed outright takes its compile with it.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let bytes = memory_mib.saturating_mul(1 << 20);
    if let Err(e) = Resource::DATA.set(bytes, bytes) {
        bail!("cannot limit the compiling process's memory: {e}");
    }
    let mut wasm = Vec::new();
    std::io::stdin().lock().read_to_end(&mut wasm).context("reading the component")?;
    let engine = wasmtime::Engine::new(&super::engine::config(cpu_limit))?;
    let compiled = engine.precompile_component(&wasm)?;
    std::io::stdout().lock().write_all(&compiled).context("writing the compiled component")?;
    Ok(())
}
