//! NATS subjects and subject patterns: tokens separated by `.`, where `*`
//! stands for one token and a final `>` for one or more.

/// The longest subject or stream name taken from a topology.
pub const MAX_LEN: usize = 255;

/// Why a subject, a subject pattern or a stream name is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubjectError {
    /// Empty, or longer than [`MAX_LEN`].
    #[error("subject {subject:?} must have 1 to {MAX_LEN} bytes")]
    Length {
        /// The subject.
        subject: String,
    },
    /// Two dots in a row, or one at an end.
    #[error("subject {subject:?} has an empty token")]
    EmptyToken {
        /// The subject.
        subject: String,
    },
    /// Whitespace or a control character.
    #[error("subject {subject:?} holds whitespace or a control character")]
    Whitespace {
        /// The subject.
        subject: String,
    },
    /// A wildcard within a token.
    #[error("subject {subject:?}: a wildcard (* or >) must be a whole token")]
    PartialWildcard {
        /// The subject.
        subject: String,
    },
    /// `>` before the last token.
    #[error("subject {subject:?}: > may only be the last token")]
    TailNotLast {
        /// The subject.
        subject: String,
    },
    /// A pattern where a sink needs a subject.
    #[error("subject {subject:?}: a sink publishes to a subject, not a wildcard")]
    Wildcard {
        /// The subject.
        subject: String,
    },
    /// A stream name, empty or longer than [`MAX_LEN`].
    #[error("stream name {stream:?} must have 1 to {MAX_LEN} bytes")]
    StreamNameLength {
        /// The stream name.
        stream: String,
    },
    /// A Kafka topic name Kafka refuses.
    #[error("Kafka topic name {topic:?} must have 1 to 249 of the characters a-z, A-Z, 0-9, '.', '_' and '-'")]
    TopicName {
        /// The topic name.
        topic: String,
    },
    /// A stream name holding what a stream's name may not.
    #[error("stream name {stream:?} may not hold whitespace, '.', '*', '>', '/' or '\\'")]
    StreamNameChars {
        /// The stream name.
        stream: String,
    },
}

/// Checks that `pattern` is a subject, or a subject pattern.
pub fn check(pattern: &str) -> Result<(), SubjectError> {
    let subject = || pattern.to_owned();
    if pattern.is_empty() || pattern.len() > MAX_LEN {
        return Err(SubjectError::Length { subject: subject() });
    }
    let tokens: Vec<&str> = pattern.split('.').collect();
    for (i, token) in tokens.iter().enumerate() {
        if token.is_empty() {
            return Err(SubjectError::EmptyToken { subject: subject() });
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(SubjectError::Whitespace { subject: subject() });
        }
        if token.len() > 1 && token.contains(['*', '>']) {
            return Err(SubjectError::PartialWildcard { subject: subject() });
        }
        if *token == ">" && i + 1 != tokens.len() {
            return Err(SubjectError::TailNotLast { subject: subject() });
        }
    }
    Ok(())
}

/// Checks a sink's subject: a subject, not a pattern.
pub fn check_sink(name: &str) -> Result<(), SubjectError> {
    check(name)?;
    if is_wildcard(name) {
        return Err(SubjectError::Wildcard { subject: name.to_owned() });
    }
    Ok(())
}

/// Checks that `name` can name a Kafka topic (Kafka's own rule).
pub fn check_topic(name: &str) -> Result<(), SubjectError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 249 || name == "." || name == ".." || !name.chars().all(legal) {
        return Err(SubjectError::TopicName { topic: name.to_owned() });
    }
    Ok(())
}

/// Checks that `name` can name a stream.
pub fn check_stream_name(name: &str) -> Result<(), SubjectError> {
    if name.is_empty() || name.len() > MAX_LEN {
        return Err(SubjectError::StreamNameLength { stream: name.to_owned() });
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')) {
        return Err(SubjectError::StreamNameChars { stream: name.to_owned() });
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
        let subject = |s: &str| s.to_owned();
        assert!(check("clicks.*").is_ok() && check("a.>").is_ok());
        assert_eq!(check("a..b"), Err(SubjectError::EmptyToken { subject: subject("a..b") }));
        assert_eq!(check("a.>.b"), Err(SubjectError::TailNotLast { subject: subject("a.>.b") }));
        assert_eq!(check("a.b*"), Err(SubjectError::PartialWildcard { subject: subject("a.b*") }));
        assert_eq!(check("a b"), Err(SubjectError::Whitespace { subject: subject("a b") }));
        assert!(matches!(check(&"x".repeat(300)), Err(SubjectError::Length { .. })));
        assert!(check_stream_name("clicks-2").is_ok());
        assert_eq!(check_stream_name("a.b"), Err(SubjectError::StreamNameChars { stream: subject("a.b") }));
        assert_eq!(check_stream_name(""), Err(SubjectError::StreamNameLength { stream: subject("") }));
        // The message quotes the name as Rust does, escapes and all.
        let err = check_stream_name("a\\b").unwrap_err();
        assert_eq!(err.to_string(), r#"stream name "a\\b" may not hold whitespace, '.', '*', '>', '/' or '\'"#);
    }

    #[test]
    fn a_sink_publishes_to_a_subject_not_a_pattern() {
        assert!(check_sink("page-counts").is_ok());
        assert_eq!(check_sink("pages.*"), Err(SubjectError::Wildcard { subject: "pages.*".to_owned() }));
        assert_eq!(check_sink("a..b"), Err(SubjectError::EmptyToken { subject: "a..b".to_owned() }));
    }
}
