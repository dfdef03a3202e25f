//! Who may call the API: with a token, whoever bears it; without one,
//! only calls from this machine that no web page could have sent.

use axum::http::{HeaderMap, Method, StatusCode, header};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use subtle::ConstantTimeEq;

/// The SHA-256 of `bytes`: a token is kept, and compared, as its digest.
pub(super) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Whether `host` (a Host header: name or address, and maybe a port) names
/// this machine.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(address, _)| address),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Without a token, refuses a call that may come from a web page: a
/// browser lets any page send a form POST to a loopback port, and DNS
/// rebinding lets it send any call with the page's own Host. So the Host
/// must name this machine, an `Origin` (sent with every cross-origin
/// request) must be this server's own, fetch metadata must not say
/// cross-site, and a change must not carry a form's content type (what
/// browsers that send no `Origin` with forms still send).
fn refuse_web_pages(method: &Method, headers: &HeaderMap) -> Result<(), String> {
    let forbidden = Err;
    let text = |name: header::HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("(not text)"));
    let host = text(header::HOST).unwrap_or_default();
    if !is_loopback_host(host) {
        return forbidden(format!(
            "a server without a token answers only calls addressed to this machine (Host {host:?}); \
             give it a token with --token-file to call it by another name"
        ));
    }
    if let Some(origin) = text(header::ORIGIN).filter(|origin| *origin != format!("http://{host}")) {
        return forbidden(format!("a call from the web page origin {origin:?} is refused"));
    }
    if let Some(site) =
        text(header::HeaderName::from_static("sec-fetch-site")).filter(|site| !matches!(*site, "same-origin" | "none"))
    {
        return forbidden(format!("a call a browser marks as {site} is refused"));
    }
    let form = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"];
    let kind = text(header::CONTENT_TYPE).unwrap_or_default().split(';').next().unwrap_or_default().trim();
    if !matches!(*method, Method::GET | Method::HEAD) && form.iter().any(|f| kind.eq_ignore_ascii_case(f)) {
        return forbidden(format!(
            "a change sent as a browser form ({kind}) is refused: send Content-Type: application/octet-stream"
        ));
    }
    Ok(())
}

/// Whether a /v1 call may be made: the token whose SHA-256 is `token`,
/// where there is one; else nothing a web page could have sent. The
/// refusal's status and why.
pub(super) fn authorized(
    token: Option<&[u8; 32]>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), (StatusCode, String)> {
    match token {
        Some(token) => {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            if bool::from(sha256(presented.as_bytes()).ct_eq(token)) {
                Ok(())
            } else {
                Err((StatusCode::UNAUTHORIZED, "a valid `Authorization: Bearer <token>` header is required".into()))
            }
        }
        None => refuse_web_pages(method, headers).map_err(|why| (StatusCode::FORBIDDEN, why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_this_machine() {
        for host in ["127.0.0.1:7878", "127.1.2.3", "localhost:1", "LOCALHOST", "[::1]:7878", "[::1]"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["", "evil.example:7878", "10.0.0.1:7878", "localhost.evil.example", "[::2]:1", "127.0.0.1.evil"] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn without_a_token_only_calls_no_web_page_could_send_pass() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        let local = [("host", "127.0.0.1:7878")];
        assert!(refuse_web_pages(&Method::POST, &headers(&local)).is_ok());
        assert!(refuse_web_pages(&Method::POST, &headers(&[local[0], ("origin", "http://127.0.0.1:7878")])).is_ok());
        assert!(
            refuse_web_pages(&Method::POST, &headers(&[local[0], ("content-type", "application/octet-stream")]))
                .is_ok()
        );
        assert!(refuse_web_pages(&Method::GET, &headers(&[local[0], ("content-type", "text/plain")])).is_ok());
        for refused in [
            headers(&[("host", "evil.example:7878")]),
            headers(&[local[0], ("origin", "http://evil.example")]),
            headers(&[local[0], ("origin", "null")]),
            headers(&[local[0], ("sec-fetch-site", "cross-site")]),
            headers(&[local[0], ("content-type", "application/x-www-form-urlencoded")]),
            headers(&[local[0], ("content-type", "text/plain; charset=utf-8")]),
            headers(&[local[0], ("content-type", "multipart/form-data; boundary=x")]),
        ] {
            assert!(refuse_web_pages(&Method::POST, &refused).is_err(), "{refused:?}");
        }
    }
}
