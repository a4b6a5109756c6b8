// A key function must be `fn(&KeyRequest<'_>) -> Option<String>`: one of
// another signature, an `async fn`, or a path that names nothing is
// reported on the path, in the attribute.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

mod keys {
    pub fn from_text(_: &str) -> Option<String> {
        None
    }

    pub fn not_optional(_: &idem_runtime::KeyRequest<'_>) -> String {
        String::new()
    }

    pub async fn later(_: &idem_runtime::KeyRequest<'_>) -> Option<String> {
        None
    }
}

#[idempotent(key = "fn:keys::from_text")]
#[post("/a")]
async fn wrong_argument() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "fn:keys::not_optional")]
#[post("/b")]
async fn wrong_return() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "fn:keys::later")]
#[post("/c")]
async fn asynchronous() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "fn:keys::missing")]
#[post("/d")]
async fn names_nothing() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn main() {}
