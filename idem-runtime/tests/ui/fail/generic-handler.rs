// A generic handler: the wrapper could not name the handler's type
// parameters, so this is refused with a clear message.
use actix_web::{HttpResponse, web};
use idem_runtime::idempotent;

#[idempotent]
async fn create<T: serde::de::DeserializeOwned>(body: web::Json<T>) -> HttpResponse {
    let _ = body.into_inner();
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().route("/orders", web::post().to(create::<u64>));
}
