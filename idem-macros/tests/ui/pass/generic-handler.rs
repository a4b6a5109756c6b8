//! A generic handler, registered with its type chosen (`.to(create::<Memory>)`):
//! the wrapper is generic the same way. Runs once, then replays.
#![deny(warnings)]

#[path = "../support/replay.rs"]
mod replay;

use actix_web::{HttpResponse, web};
use idem_runtime::idempotent;

/// Where orders go.
trait Repo: Send + Sync + 'static {
    /// The next order number.
    fn next(&self) -> u64;
}

/// Orders in this process.
#[derive(Default)]
struct Memory(std::sync::atomic::AtomicU64);

impl Repo for Memory {
    fn next(&self) -> u64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
    }
}

/// Places an order in any repository.
#[idempotent(ttl = "1h")]
async fn create<R: Repo, const PREFIX: u32>(repo: web::Data<R>) -> HttpResponse
where
    R: Default,
{
    HttpResponse::Created().body(format!("{PREFIX}-{}", repo.next()))
}

fn main() {
    replay::execute_then_replay(
        |config| {
            config
                .app_data(web::Data::new(Memory::default()))
                .route("/orders", web::post().to(create::<Memory, 7>));
        },
        "/orders",
        "{}",
    );
}
