//! What the admin server answers: `/metrics`, `/healthz`, `/readyz`, for
//! GET and HEAD (hyper leaves the body out of a HEAD answer and keeps its
//! `Content-Length`); 405 for any other method on these paths, 404 for any
//! other path.
//!
//! Runs inside the admin server's connection tasks (tokio I/O runtime) and
//! only reads the shared [`Metrics`] and [`Readiness`].

use super::Readiness;
use crate::metrics::Metrics;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";
const JSON: &str = "application/json";

/// The answer to `request`. Its body, if any, is never read.
pub(super) fn respond<B>(
    request: &Request<B>,
    metrics: &Metrics,
    readiness: &Readiness,
) -> Response<String> {
    let route = match request.uri().path() {
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Healthz,
        "/readyz" => Route::Readyz,
        _ => return answer(StatusCode::NOT_FOUND, TEXT, "not found\n".to_string()),
    };
    let method = request.method();
    if method != Method::GET && method != Method::HEAD {
        let mut response = answer(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "method not allowed\n".to_string(),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match route {
        Route::Metrics => answer(StatusCode::OK, PROMETHEUS_TEXT, metrics.encode_text()),
        Route::Healthz => {
            let (healthy, body) = readiness.liveness.report();
            answer(up_or_down(healthy), JSON, body)
        }
        Route::Readyz => {
            let (ready, body) = readiness.report();
            answer(up_or_down(ready), JSON, body)
        }
    }
}

enum Route {
    Metrics,
    Healthz,
    Readyz,
}

fn up_or_down(up: bool) -> StatusCode {
    if up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

fn answer(status: StatusCode, content_type: &'static str, body: String) -> Response<String> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
