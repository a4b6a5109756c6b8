//! The conformance app on actix-web: a server of two workers on a thread
//! of its own.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{App, HttpResponse, HttpServer, post, web};
use idem_runtime::{ExecutionContext, Idem, MarkRetryable, idempotent};
use serde_json::Value;

use super::business::{self, Calls, Reply};
use super::{Framework, Running};

/// actix-web.
#[derive(Clone, Copy, Debug)]
pub struct Actix;

type State = web::Data<Arc<Calls>>;

fn respond(reply: Reply) -> HttpResponse {
    let mut response =
        HttpResponse::build(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .json(reply.body);
    for (name, value) in reply.headers {
        response.headers_mut().insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    if reply.retryable { response.retryable() } else { response }
}

#[idempotent]
#[post("/orders")]
async fn orders(calls: State, order: web::Json<Value>) -> HttpResponse {
    respond(business::orders(&calls, order.into_inner()))
}

#[idempotent(scope = "route")]
#[post("/items/{id}")]
async fn items(calls: State, id: web::Path<String>) -> HttpResponse {
    respond(business::items(&calls, &id))
}

#[idempotent(scope = "route")]
#[post("/items")]
async fn shop_items(calls: State, shop: web::Path<String>) -> HttpResponse {
    respond(business::shop_items(&calls, &shop))
}

#[idempotent(scope = "global")]
#[post("/global")]
async fn global(calls: State) -> HttpResponse {
    respond(business::global(&calls))
}

#[idempotent(scope = "route", key = "path:order_id")]
#[post("/natural/{order_id}/pay")]
async fn natural(calls: State, order_id: web::Path<String>) -> HttpResponse {
    respond(business::natural(&calls, &order_id))
}

#[idempotent(scope = "global", key = "json:/id")]
#[post("/events")]
async fn events(calls: State, event: web::Json<Value>) -> HttpResponse {
    respond(business::events(&calls, &event))
}

#[idempotent(scope = "route")]
#[post("/slow")]
async fn slow(calls: State, body: web::Json<Value>) -> HttpResponse {
    respond(business::slow(&calls, &body, "slow").await)
}

#[idempotent(scope = "route", in_flight = "wait", wait = "5s")]
#[post("/wait")]
async fn wait(calls: State, body: web::Json<Value>) -> HttpResponse {
    respond(business::slow(&calls, &body, "wait").await)
}

#[idempotent(scope = "route")]
#[post("/status")]
async fn status(calls: State, body: web::Json<Value>) -> HttpResponse {
    respond(business::status(&calls, &body))
}

#[idempotent(scope = "route")]
#[post("/panic")]
async fn panic(calls: State) -> HttpResponse {
    respond(business::panic(&calls))
}

#[idempotent(scope = "route", required = false)]
#[post("/optional")]
async fn optional(calls: State) -> HttpResponse {
    respond(business::optional(&calls))
}

#[idempotent(scope = "route", fingerprint_headers = ["x-account-id"])]
#[post("/accounts")]
async fn accounts(calls: State) -> HttpResponse {
    respond(business::accounts(&calls))
}

#[idempotent(scope = "route", lock_ttl = "3s")]
#[post("/blocking")]
async fn blocking(calls: State, body: web::Json<Value>) -> HttpResponse {
    respond(business::blocking(&calls, &body))
}

#[idempotent(scope = "route")]
#[post("/replayed-header")]
async fn replayed_header(calls: State) -> HttpResponse {
    respond(business::replayed_header(&calls))
}

#[idempotent(scope = "route")]
#[post("/context")]
async fn context(calls: State, execution: ExecutionContext) -> HttpResponse {
    respond(business::context(&calls, &execution))
}

#[idempotent(scope = "route")]
#[post("/steps")]
async fn steps(calls: State, execution: ExecutionContext, body: web::Json<Value>) -> HttpResponse {
    respond(business::steps(&calls, &execution, &body).await)
}

#[idempotent(scope = "route", fingerprint_exclude = ["/attempt", "/meta/sent_at"])]
#[post("/deliveries")]
async fn deliveries(calls: State, delivery: web::Json<Value>) -> HttpResponse {
    respond(business::deliveries(&calls, &delivery))
}

#[idempotent(scope = "route", key = ["path:order_id", "json:/line_id"])]
#[post("/lines/{order_id}")]
async fn lines(calls: State, order_id: web::Path<String>, line: web::Json<Value>) -> HttpResponse {
    respond(business::lines(&calls, &order_id, &line))
}

#[idempotent(scope = "route", key = ["header", "json:/account"], required = false)]
#[post("/transfers")]
async fn transfers(calls: State, transfer: web::Json<Value>) -> HttpResponse {
    respond(business::transfers(&calls, &transfer))
}

#[idempotent(scope = "route", key = "fn:business::invoice_key", required = false)]
#[post("/receipts")]
async fn receipts(calls: State, receipt: web::Json<Value>) -> HttpResponse {
    respond(business::receipts(&calls, &receipt))
}

#[idempotent(scope = "global", key = "fn:business::invoice_key")]
#[post("/invoices")]
async fn invoices(calls: State, invoice: web::Json<Value>) -> HttpResponse {
    respond(business::invoices(&calls, &invoice))
}

/// Every route of the app.
fn routes(config: &mut web::ServiceConfig) {
    config
        .service(orders)
        .service(items)
        .service(global)
        .service(transfers)
        .service(receipts)
        .service(natural)
        .service(events)
        .service(slow)
        .service(wait)
        .service(status)
        .service(panic)
        .service(optional)
        .service(accounts)
        .service(blocking)
        .service(replayed_header)
        .service(context)
        .service(steps)
        .service(deliveries)
        .service(lines)
        .service(invoices)
        .service(web::scope("/shops/{shop}").service(shop_items));
}

impl Framework for Actix {
    const NAME: &'static str = "actix-web";

    async fn start(self, idem: Option<Idem>, calls: Arc<Calls>) -> Running {
        let (started, on_start) = std::sync::mpsc::channel();
        let state = web::Data::new(Arc::clone(&calls));
        let served = idem.clone();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    let app = App::new().app_data(state.clone()).configure(routes);
                    match &served {
                        Some(idem) => app.app_data(idem.clone()),
                        None => app,
                    }
                })
                .workers(2)
                .shutdown_timeout(5)
                .bind(("127.0.0.1", 0))
                .expect("binding a loopback port");
                let address = server.addrs()[0];
                let server = server.run();
                let _ = started.send((address, server.handle()));
                let _ = server.await;
            });
        });
        let (address, handle) = on_start.recv().expect("the actix-web server started");
        let stop = move || async move {
            match idem {
                Some(idem) => idem.shutdown(handle).await,
                None => {
                    handle.stop(true).await;
                    idem_runtime::Drained { still_running: 0, waited: std::time::Duration::ZERO }
                }
            }
        };
        Running::new(format!("http://{address}"), calls, stop)
    }
}
