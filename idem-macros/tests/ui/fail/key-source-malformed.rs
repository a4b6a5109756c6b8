// Malformed key sources, each reported on its literal: an unknown source,
// a pointer without its leading `/`, a bad `~` escape, a path parameter
// written with its braces, a key function's path that is not a path,
// `header` beside a key that is not a header, and `required = false` with a
// path key (a matched route always has it).
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(key = "query:id")]
#[post("/a")]
async fn unknown_source() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "json:id")]
#[post("/b")]
async fn pointer_without_slash() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "json:/a~2b")]
#[post("/c")]
async fn bad_escape() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "path:{id}")]
#[post("/d/{id}")]
async fn braces() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "fn:keys::")]
#[post("/g")]
async fn not_a_path() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "json:/id", header = "X-Event-Key")]
#[post("/e")]
async fn header_beside_a_body_key() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "path:id", required = false)]
#[post("/f/{id}")]
async fn optional_path_key() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn main() {}
