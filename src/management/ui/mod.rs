//! The management web UI: the page at `/` of the management port and its
//! assets under `/ui/`.
//!
//! The front end is plain ES modules, CSS and one HTML page in `static/`,
//! embedded into the binary at build time (`include_str!`), so the broker
//! serves it itself with no network access and no build step. The page only
//! talks to the management API (`/api/...`) with the user's basic-auth
//! credentials, the same endpoints rabbitmqadmin uses; it needs no rights the
//! user lacks. docs/management-ui.md describes each page.
//!
//! For work on the front end, `STABLEMQ_UI_DIR=src/management/ui/static`
//! serves the same file names from that directory instead of the embedded
//! copies, so a reload of the page shows an edit without a rebuild.

use super::AppState;
use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One embedded file: its name under `/ui/`, content type and text.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

macro_rules! js {
    ($name:literal) => {
        Asset {
            name: $name,
            content_type: JS,
            body: include_str!(concat!("static/", $name)),
        }
    };
}

/// Every file of the UI but the index page.
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("static/app.css"),
    },
    js!("app.js"),
    js!("api.js"),
    js!("dom.js"),
    js!("chart.js"),
    js!("overview.js"),
    js!("queues.js"),
    js!("queue.js"),
    js!("exchanges.js"),
    js!("connections.js"),
    js!("cluster.js"),
    js!("admin.js"),
];

const INDEX: &str = include_str!("static/index.html");

/// The routes of the UI.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{file}", get(asset))
}

/// The file `name` from `STABLEMQ_UI_DIR`, when that is set and holds it.
fn from_dir(name: &str) -> Option<String> {
    let dir = std::env::var_os("STABLEMQ_UI_DIR")?;
    std::fs::read_to_string(std::path::Path::new(&dir).join(name)).ok()
}

/// Headers every UI response carries: the page runs only its own scripts,
/// is never framed, and is revalidated on each load (a new broker version
/// serves new files at the same names).
fn respond(content_type: &'static str, name: &str, body: &'static str) -> Response {
    let body: axum::body::Body = match from_dir(name) {
        Some(text) => text.into(),
        None => body.into(),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the single page.
async fn index() -> Response {
    respond("text/html; charset=utf-8", "index.html", INDEX)
}

/// `GET /ui/{file}`: one embedded asset, or 404.
async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => respond(a.content_type, a.name, a.body),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        // Each `from './x.js'` in every asset and the index names an asset.
        let texts = ASSETS.iter().map(|a| a.body).chain([INDEX]);
        for text in texts {
            for part in text.split("'./").skip(1) {
                let Some(name) = part.split('\'').next() else {
                    continue;
                };
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "{name} is imported but not embedded"
                );
            }
        }
    }
}
