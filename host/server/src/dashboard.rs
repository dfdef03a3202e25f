//! The dashboard: a page and its scripts, served at `/` from files built
//! into the binary (nothing is fetched from elsewhere), and the headers
//! every answer of the server carries.
//!
//! The page holds no data: it calls the API with the token its user gave
//! it, which stays in the tab's session storage.

use axum::extract::{Path, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Scripts and styles from this server only, no inline script or style,
/// calls to this server only, and never inside another page's frame.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A file of the dashboard.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Assets in groups of one directory of `dashboard/` and one content type
/// each: `DIR TYPE: NAME, ...;`.
macro_rules! assets {
    ($($dir:literal $type:ident: $($name:literal),+;)+) => {
        &[$($(Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../../../dashboard/", $dir, $name)),
        }),+),+]
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// The files under `/assets/`.
const ASSETS: &[Asset] = assets![
    "src/" JS:
        "app.js", "api.js", "dom.js", "chart.js", "graph.js", "topologies.js", "topology.js", "state.js", "query.js", "failure.js", "cluster.js";
    "src/" CSS: "style.css";
    "src/" SVG: "icon.svg";
    "vendor/" JS: "uPlot.iife.min.js";
    "vendor/" CSS: "uPlot.min.css";
];

/// `GET /`: the page.
pub async fn page() -> Response {
    let body: &'static [u8] = include_bytes!("../../../dashboard/src/index.html");
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// `GET /assets/{name}`: one of the page's scripts or styles.
pub async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|asset| asset.name == name) {
        Some(asset) => ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

/// Every answer: no framing, no sniffing of content types, no inline
/// script, nothing cached (answers hold a topology's data).
pub async fn secure(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_named_once_and_typed_by_its_extension() {
        for (i, asset) in ASSETS.iter().enumerate() {
            assert!(ASSETS[..i].iter().all(|a| a.name != asset.name), "{} twice", asset.name);
            let want = match asset.name.rsplit_once('.').map(|(_, extension)| extension) {
                Some("js") => JS,
                Some("css") => CSS,
                _ => SVG,
            };
            assert_eq!(asset.content_type, want, "{}", asset.name);
            assert!(!asset.body.is_empty(), "{}", asset.name);
        }
    }
}
