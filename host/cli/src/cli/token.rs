//! Tokens read from files, so that they stay out of the command line.

use anyhow::{Context, Result};
use std::path::Path;

/// The token held in the file at `path`, if one is given: the file's text,
/// trimmed, which must not be empty.
pub(super) fn read_token(path: Option<&Path>) -> Result<Option<String>> {
    let Some(path) = path else { return Ok(None) };
    let token = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let token = token.trim().to_owned();
    anyhow::ensure!(!token.is_empty(), "{} holds no token", path.display());
    Ok(Some(token))
}
