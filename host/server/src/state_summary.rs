//! What the dashboard's state browser shows of a whole state besides its
//! pages: how many keys it holds, its top keys by value, and the keys whose
//! text starts with a prefix; read in one pass of pages, each bounded in
//! bytes, over at most [`MAX_SUMMARY_KEYS`] keys, keeping no more than the
//! answer.

use super::deployments::DeployError;
use serde_json::{Value as Json, json};
use std::cmp::Ordering;
use weir_config::MAX_STATE_PAGE_BYTES;
use weir_sdk::codec::Value;
use weir_state::Db;
use weir_state::rules::Stored;

/// Keys one summary reads at most: past them it says it stopped short.
pub const MAX_SUMMARY_KEYS: usize = 1_000_000;

/// Most entries a summary's top or prefix list holds.
pub const MAX_SUMMARY_LIST: usize = 1_000;

/// Keys read a page.
const PAGE: usize = 1_000;

/// What was asked: the top `top` keys by value, and up to `limit` keys
/// starting with `prefix`.
pub struct Asked<'a> {
    pub top: usize,
    pub prefix: Option<&'a str>,
    pub limit: usize,
}

/// A key as the prefix is matched against it: a lone string as it is, any
/// other key as its JSON (as the state browser shows keys).
fn key_text(key: &[Value]) -> String {
    match key {
        [Value::Str(s)] => s.clone(),
        _ => json!(key.iter().map(weir_state::json::to_json).collect::<Vec<_>>()).to_string(),
    }
}

/// A value's rank for the top keys: numbers by their value; anything
/// else is not ranked.
fn rank(stored: &Stored) -> Option<f64> {
    match stored.value() {
        Value::I64(n) => Some(*n as f64),
        Value::F64(x) if x.is_finite() => Some(*x),
        _ => None,
    }
}

/// The summary of state `state` of topology `name` in `db`.
pub fn summary(db: &Db, name: &str, state: &str, asked: &Asked<'_>) -> Result<Json, DeployError> {
    if asked.top > MAX_SUMMARY_LIST || asked.limit > MAX_SUMMARY_LIST {
        return Err(DeployError::BadRequest(format!("top and limit must be at most {MAX_SUMMARY_LIST}")));
    }
    let bad = |e: weir_state::StoreError| DeployError::BadRequest(format!("{e:#}"));
    let mut keys = 0usize;
    let mut top: Vec<(f64, Vec<Value>, Stored)> = Vec::new();
    let mut prefixed: Vec<(Vec<Value>, Stored)> = Vec::new();
    let mut after: Option<Vec<Value>> = None;
    let complete = loop {
        let (page, _) = db.page_within(name, state, after.as_deref(), PAGE, MAX_STATE_PAGE_BYTES).map_err(bad)?;
        let Some((last, _)) = page.last() else { break true };
        let last = last.clone();
        for (key, stored) in page {
            keys += 1;
            if let Some(prefix) = asked.prefix
                && prefixed.len() < asked.limit
                && key_text(&key).starts_with(prefix)
            {
                prefixed.push((key.clone(), stored.clone()));
            }
            if asked.top > 0
                && let Some(value) = rank(&stored)
            {
                top.push((value, key, stored));
                if top.len() > asked.top * 2 {
                    // Keep the list short as it goes: the best `top` of it.
                    top.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal));
                    top.truncate(asked.top);
                }
            }
        }
        if keys >= MAX_SUMMARY_KEYS {
            break false;
        }
        after = Some(last);
    };
    // The highest first; ties in key order, as they were read.
    top.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal));
    top.truncate(asked.top);
    let entries = |all: Vec<(Vec<Value>, Stored)>| {
        all.iter().map(|(k, v)| weir_state::json::entry(k, v, true)).collect::<Vec<_>>()
    };
    Ok(json!({
        "keys": keys,
        "complete": complete,
        "top": entries(top.into_iter().map(|(_, k, v)| (k, v)).collect()),
        "prefix": entries(prefixed),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_as_the_browser_shows_it_and_only_numbers_rank() {
        assert_eq!(key_text(&[Value::Str("w1".into())]), "w1");
        assert_eq!(key_text(&[Value::Str("s".into()), Value::I64(5)]), r#"["s",5]"#);
        assert_eq!(rank(&Stored::Plain(Value::I64(7))), Some(7.0));
        assert_eq!(rank(&Stored::Plain(Value::Str("7".into()))), None);
        assert_eq!(rank(&Stored::Plain(Value::F64(f64::NAN))), None);
    }
}
