//! The order service on actix-web. See the README for the HTTP interface.

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    order_service::serve_actix().await
}
