//! `weir resume`: start a stopped served topology again.

use super::client::{Method, TopologyArgs};
use anyhow::Result;

pub fn run(args: TopologyArgs) -> Result<()> {
    args.call_and_print(Method::Post(b""), &["resume"])
}
