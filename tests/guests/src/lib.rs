//! Paths of the guest components the tests run, built once per test run by
//! this crate's build script (as wasmtime's `test-programs` and Spin's
//! `test-components` do).

include!(concat!(env!("OUT_DIR"), "/components.rs"));
