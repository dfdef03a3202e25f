//! A component that never finishes describing its topologies: building the
//! description sleeps inside a WASI call, where no guest code runs to be
//! interrupted. The host must give up on it at the call's deadline.

use weir_sdk::prelude::*;

fn topologies() -> Vec<Topology> {
    std::thread::sleep(std::time::Duration::from_secs(3600));
    vec![Topology::new("never-described").new_stream(FileLines::new("sentence")).build()]
}

weir_sdk::export!(topologies);
