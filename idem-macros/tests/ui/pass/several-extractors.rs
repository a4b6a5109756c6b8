//! A handler with several extractors (path, JSON body, shared state, the
//! request itself) keeps all of them.
#![deny(warnings)]

use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::{App, HttpRequest, HttpResponse, post, web};
use idem_runtime::idempotent;
use serde::Deserialize;

#[derive(Deserialize)]
struct NewPayment {
    amount_cents: u64,
}

struct Db {
    payments: AtomicU64,
}

#[idempotent(scope = "user")]
#[post("/orders/{order}/payments")]
async fn create_payment(
    order: web::Path<String>,
    body: web::Json<NewPayment>,
    db: web::Data<Db>,
    req: HttpRequest,
) -> HttpResponse {
    let id = db.payments.fetch_add(1, Ordering::SeqCst);
    HttpResponse::Created().body(format!("payment {id} of {} for order {order} at {}", body.amount_cents, req.path()))
}

fn main() {
    let db = web::Data::new(Db { payments: AtomicU64::new(0) });
    let _ = App::new().app_data(db).service(create_payment);
}
