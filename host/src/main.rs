//! The `weir` command.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let started = std::time::Instant::now();
    keep_large_buffers_mapped();
    let args = cli::Cli::parse();
    cli::init_logging(args.log_format());
    match cli::dispatch(args, started) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`weir state scan | head`) is the reader's choice.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A batch's buffers run to megabytes (a guest's output for 100,000 lines
/// is some 11 MB), and glibc maps each such allocation afresh and unmaps it
/// when freed, or trims the freed heap: every batch then faults its pages
/// in again (some 37,000 faults, a tenth of the CPU time, for a million
/// lines at batch 100,000; 15,500 with this).
/// Buffers of up to 32 MiB come from the heap instead, and up to 64 MiB of
/// freed heap is kept for the next batch.
fn keep_large_buffers_mapped() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any
    // thread is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}
