//! `weir skip-batch`: the way past a recorded transactional batch that can
//! never commit because its data is wrong (the guest is right to refuse
//! it). The batch commits with nothing written; the skip is recorded in the
//! data dir with the reason given, and logged.

use anyhow::{Result, bail};
use clap::Args;
use std::path::PathBuf;
use weir_state::Db;

#[derive(Args, Debug)]
pub struct SkipBatchArgs {
    /// The data dir of the halted topology (no weir may have it open).
    #[arg(long)]
    data: PathBuf,
    /// The topology, by the name its progress is kept under.
    #[arg(long)]
    topology: String,
    /// The batch to skip: the one after the last committed, as the halt
    /// names it.
    #[arg(long)]
    txid: u64,
    /// Why it is skipped, kept with the record of the skip.
    #[arg(long)]
    reason: String,
}

pub fn run(args: SkipBatchArgs) -> Result<()> {
    if !args.data.join("weir.redb").exists() {
        bail!("{} holds no Weir database (no weir.redb)", args.data.display());
    }
    let db = Db::open(&args.data)?;
    let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    let note = format!("skipped at {at} ms since the epoch: {}", args.reason);
    db.skip_batch(&args.topology, args.txid, &note)?;
    tracing::warn!(
        "topology {}: txid {} skipped, committed with nothing written to its states or sinks ({})",
        args.topology,
        args.txid,
        args.reason
    );
    println!("skipped txid {} of topology {}", args.txid, args.topology);
    Ok(())
}
