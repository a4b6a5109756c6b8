// Composite keys and fingerprint exclusions, each error on its literal: a
// list of one part, a part given twice, a key function as a part, an
// unknown part, `required = false` when every part is in the path, a
// pointer without `/`, the whole body, a pointer given twice and one
// inside another.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(key = ["path:id"])]
#[post("/a/{id}")]
async fn one_part() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = ["path:id", "json:/line", "path:id", "fn:keys::k", "query:q"])]
#[post("/b/{id}")]
async fn bad_parts() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = ["path:a", "path:b"], required = false)]
#[post("/c/{a}/{b}")]
async fn optional_path_parts() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(fingerprint_exclude = ["attempt", "", "/a", "/a", "/meta", "/meta/sent_at"])]
#[post("/d")]
async fn bad_exclusions() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(fingerprint_exclude = "/attempt")]
#[post("/e")]
async fn not_a_list() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn main() {}
