//! The console's stylesheet and script, compiled into the binary (no CDN, works offline).

use axum::{
    extract::Path,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
};

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// `GET /console/assets/{name}`: `console.css` or `console.js`, cached for an hour.
pub async fn serve(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "public, max-age=3600")], body).into_response()
}
