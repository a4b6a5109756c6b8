// Natural keys from the path and from the body, composite and computed
// keys, fingerprint headers and exclusions, in every form a route writes
// them (a `macro_rules!` literal included).
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::idempotent;

#[idempotent(key = "path:order_id", scope = "route")]
#[post("/orders/{order_id}/capture")]
async fn capture(order_id: web::Path<String>) -> HttpResponse {
    HttpResponse::Ok().body(order_id.into_inner())
}

#[idempotent(key = "json:/data/object/id", scope = "global", fingerprint_headers = ["X-Account-Id", "x-tenant"])]
#[post("/events")]
async fn event(body: web::Bytes) -> HttpResponse {
    HttpResponse::Ok().body(body)
}

#[idempotent(key = "json:/a~1b/~0c", scope = "global", required = false)]
#[post("/escaped")]
async fn escaped() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "header", header = "X-Request-Key", fingerprint_headers = [])]
#[post("/header")]
async fn header() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = ["path:order_id", "json:/line_id", "header"], scope = "route", header = "X-Line-Key")]
#[post("/orders/{order_id}/lines")]
async fn line(order_id: web::Path<String>) -> HttpResponse {
    HttpResponse::Ok().body(order_id.into_inner())
}

mod keys {
    /// The tenant and the invoice number.
    pub fn invoice(req: &idem_runtime::KeyRequest<'_>) -> Option<String> {
        Some(format!("{}/{}", req.header("x-tenant")?, req.path_param("number")?))
    }
}

#[idempotent(key = "fn:keys::invoice", scope = "global", fingerprint_exclude = ["/attempt", "/meta/sent_at", "/a~1b"])]
#[post("/invoices/{number}")]
async fn invoice() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(key = "fn:crate::keys::invoice", required = false, fingerprint_exclude = [])]
#[post("/invoices")]
async fn invoice_by_crate_path() -> HttpResponse {
    HttpResponse::Ok().finish()
}

macro_rules! natural {
    ($name:ident, $key:literal, $header:literal, $path:literal) => {
        #[idempotent(key = $key, scope = "route", fingerprint_headers = [$header])]
        #[post($path)]
        async fn $name() -> HttpResponse {
            HttpResponse::Ok().finish()
        }
    };
}

natural!(from_macro, "json:/id", "x-account-id", "/macro");

fn main() {
    let _ = App::new()
        .service(capture)
        .service(event)
        .service(escaped)
        .service(header)
        .service(line)
        .service(invoice)
        .service(invoice_by_crate_path)
        .service(from_macro);
}
