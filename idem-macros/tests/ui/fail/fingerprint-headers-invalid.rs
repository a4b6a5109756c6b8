// `fingerprint_headers` takes a list of valid header names, each once, and
// not the key's own header.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(fingerprint_headers = "x-account-id")]
#[post("/a")]
async fn not_a_list() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(fingerprint_headers = ["x account", 7])]
#[post("/b")]
async fn bad_names() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(fingerprint_headers = ["X-Account-Id", "x-account-id"])]
#[post("/c")]
async fn twice() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(header = "X-Request-Key", fingerprint_headers = ["x-request-key"])]
#[post("/d")]
async fn the_key_header() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn main() {}
