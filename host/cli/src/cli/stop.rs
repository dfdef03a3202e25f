//! `weir stop`: stop a served topology at a batch boundary.

use super::client::{Method, TopologyArgs};
use anyhow::Result;

pub fn run(args: TopologyArgs) -> Result<()> {
    args.call_and_print(Method::Post(b""), &["stop"])
}
