//! The `weir` command.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let started = std::time::Instant::now();
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
