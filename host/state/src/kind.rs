//! The names of Trident's state kinds, as topologies write them.

use weir_sdk::topology::StateKind;

/// A state kind's name, as topologies write it.
pub fn kind_name(kind: StateKind) -> &'static str {
    match kind {
        StateKind::Transactional => "transactional",
        StateKind::Opaque => "opaque",
        StateKind::NonTransactional => "non-transactional",
    }
}

/// The state kind named `name` (see [`kind_name`]).
pub fn kind_named(name: &str) -> Option<StateKind> {
    [StateKind::Transactional, StateKind::Opaque, StateKind::NonTransactional]
        .into_iter()
        .find(|&kind| kind_name(kind) == name)
}
