//! The order service on axum: the same HTTP contract, flags and behaviour
//! as `order-service`. See the README for the HTTP interface.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    order_service::serve_axum().await
}
