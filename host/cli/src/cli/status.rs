//! `weir status`: how one served topology is doing.

use super::client::{Method, TopologyArgs};
use anyhow::Result;

pub fn run(args: TopologyArgs) -> Result<()> {
    args.call_and_print(Method::Get, &[])
}
