//! NATS subjects and subject patterns: tokens separated by `.`, where `*`
//! stands for one token and a final `>` for one or more.

use anyhow::{Result, bail};

/// The longest subject or stream name taken from a topology.
pub const MAX_LEN: usize = 255;

/// Checks that `pattern` is a subject, or a subject pattern.
pub fn check(pattern: &str) -> Result<()> {
    if pattern.is_empty() || pattern.len() > MAX_LEN {
        bail!("subject {pattern:?} must have 1 to {MAX_LEN} bytes");
    }
    let tokens: Vec<&str> = pattern.split('.').collect();
    for (i, token) in tokens.iter().enumerate() {
        if token.is_empty() {
            bail!("subject {pattern:?} has an empty token");
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("subject {pattern:?} holds whitespace or a control character");
        }
        if token.len() > 1 && token.contains(['*', '>']) {
            bail!("subject {pattern:?}: a wildcard (* or >) must be a whole token");
        }
        if *token == ">" && i + 1 != tokens.len() {
            bail!("subject {pattern:?}: > may only be the last token");
        }
    }
    Ok(())
}

/// Checks a sink's subject: a subject, not a pattern.
pub fn check_sink(name: &str) -> Result<()> {
    check(name)?;
    if is_wildcard(name) {
        bail!("subject {name:?}: a sink publishes to a subject, not a wildcard");
    }
    Ok(())
}

/// Checks that `name` can name a stream.
pub fn check_stream_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_LEN {
        bail!("stream name {name:?} must have 1 to {MAX_LEN} bytes");
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')) {
        bail!("stream name {name:?} may not hold whitespace, '.', '*', '>', '/' or '\\'");
    }
    Ok(())
}

/// Whether `pattern` holds a wildcard.
pub fn is_wildcard(pattern: &str) -> bool {
    pattern.split('.').any(|t| t == "*" || t == ">")
}

/// Whether the pattern `pattern` matches the subject `subject`.
pub fn matches(pattern: &str, subject: &str) -> bool {
    let mut subject = subject.split('.');
    for token in pattern.split('.') {
        match (token, subject.next()) {
            (">", Some(_)) => return true,
            (_, None) => return false,
            ("*", Some(_)) => {}
            (token, Some(s)) if token == s => {}
            _ => return false,
        }
    }
    subject.next().is_none()
}

/// Whether some subject matches both patterns.
pub fn overlaps(a: &str, b: &str) -> bool {
    let (mut a, mut b) = (a.split('.'), b.split('.'));
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some("*"), Some(_)) | (Some(_), Some("*")) => {}
            (Some(x), Some(y)) if x == y => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_subjects_token_by_token() {
        assert!(matches("clicks.*", "clicks.3"));
        assert!(!matches("clicks.*", "clicks.3.x"));
        assert!(matches("clicks.>", "clicks.3.x"));
        assert!(!matches("clicks.>", "clicks"));
        assert!(matches("clicks.3", "clicks.3"));
        assert!(!matches("clicks.3", "clicks.30"));
        assert!(matches("*.eu", "ads.eu"));
    }

    #[test]
    fn patterns_overlap_when_some_subject_matches_both() {
        assert!(overlaps("clicks.*", "clicks.>"));
        assert!(overlaps("*.eu", "ads.*"));
        assert!(!overlaps("clicks.*", "ads.*"));
        assert!(!overlaps("clicks", "clicks.>"));
        assert!(!overlaps("a.*", "a.*.b"));
    }

    #[test]
    fn malformed_subjects_and_stream_names_are_named() {
        assert!(check("clicks.*").is_ok() && check("a.>").is_ok());
        assert!(check("a..b").unwrap_err().to_string().contains("empty token"));
        assert!(check("a.>.b").unwrap_err().to_string().contains("> may only be the last token"));
        assert!(check("a.b*").unwrap_err().to_string().contains("whole token"));
        assert!(check("a b").unwrap_err().to_string().contains("whitespace"));
        assert!(check(&"x".repeat(300)).is_err());
        assert!(check_stream_name("clicks-2").is_ok());
        assert!(check_stream_name("a.b").unwrap_err().to_string().contains("may not hold"));
        assert!(check_stream_name("").is_err());
    }

    #[test]
    fn a_sink_publishes_to_a_subject_not_a_pattern() {
        assert!(check_sink("page-counts").is_ok());
        assert!(check_sink("pages.*").unwrap_err().to_string().contains("not a wildcard"));
        assert!(check_sink("a..b").is_err());
    }
}
