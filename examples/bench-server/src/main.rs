//! The server `scripts/bench` measures. One small JSON order handler,
//! served fourteen ways side by side, each under its own path prefix:
//!
//! | prefix | what runs |
//! |---|---|
//! | `/bare` | the handler, not annotated |
//! | `/memory`, `/redis`, `/postgres` | the handler under `#[idempotent]` on that store |
//! | `/redis-acks` | the same on Redis with replica acknowledgements (`WAIT 1`; the server needs a replica) |
//! | `/redis-cached`, `/postgres-cached` | the same on that store with the replay cache on (`Idem::replay_cache`), sized for a whole run: a replay seen or a completion stored costs no round trip |
//! | `/memory-sealed`, `/redis-sealed` | the same on that store with encrypted records (`Idem::encrypt_records`): what sealing each completion and opening each replay costs |
//! | `/hand/redis`, `/hand/postgres` | the anchors: the handler made idempotent by hand, with the least code a careful engineer would write and the same round trips (1 for a replay, 2 for a first execution), without fencing, fingerprints or leases |
//! | `/floor` | the least an in-process layer doing §4's per-request work can do (see `floor`); not an anchor of §12 of the contract |
//! | `/least` | the anchor of the memory store's first executions in §12 of the contract: the least a correct in-process layer that keeps records must do (see `least`) |
//! | `/hand/redis-per-worker` | the Redis anchor on a connection of each worker's own (as the store has), to show what one shared connection costs; not an anchor of §12 of the contract |
//!
//! Every path ends in `/orders` and takes `POST` with an `Idempotency-Key`.

mod anchors;
mod floor;
mod least;
mod order;

use std::io;
use std::time::Duration;

use actix_web::{App, HttpServer, web};
use clap::Parser;
use idem_runtime::sealing::{Keyring, RecordsKey};
use idem_runtime::{Idem, MemoryStore, PostgresStore, RedisStore, ReplayCache};

/// Command line.
#[derive(Parser)]
struct Args {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    bind: String,
    /// The Redis server of `/redis` and `/hand/redis`.
    #[arg(long, env = "BENCH_REDIS_URL")]
    redis: String,
    /// The Redis server of `/redis-acks`, one with a replica (default: `--redis`).
    ///
    /// Its own server keeps the replica's work off the Redis of `/redis` and
    /// `/hand/redis`: on a small machine the replica shares the cores with the
    /// service, where in production it runs on another machine, and it would
    /// charge each mode for the writes it replicates.
    #[arg(long, env = "BENCH_REDIS_ACKS_URL")]
    redis_acks: Option<String>,
    /// The Postgres server of `/postgres` and `/hand/postgres`.
    #[arg(long, env = "BENCH_POSTGRES_URL")]
    postgres: String,
    /// Connections of each Postgres pool (the store's and the anchor's).
    #[arg(long, default_value_t = 16)]
    pg_connections: u32,
    /// Actix workers (0: one per core).
    #[arg(long, default_value_t = 0)]
    workers: usize,
}

/// The replay cache of the `-cached` modes: every first execution of a run
/// fits, and no entry ends before the run does.
fn replay_cache() -> ReplayCache {
    ReplayCache::new(2_000_000).max_bytes(1 << 30).max_age(Duration::from_secs(600))
}

/// The keyring of the `-sealed` modes: a fixed key, as nothing it seals
/// outlives the run.
fn keyring() -> Keyring {
    Keyring::new(RecordsKey::new([0x5e; 32]))
}

#[actix_web::main]
async fn main() -> io::Result<()> {
    let args = Args::parse();
    // Room for every first execution of a run (the default, 256 MiB, fills in about 30 s here).
    let memory = Idem::new(MemoryStore::with_max_bytes(4 << 30));
    let memory_sealed = Idem::new(MemoryStore::with_max_bytes(4 << 30)).encrypt_records(keyring());
    let redis = RedisStore::connect(&args.redis).await.map_err(io::Error::other)?;
    redis.load_scripts().await.map_err(io::Error::other)?;
    // The same store waiting for a replica's acknowledgement of each claim,
    // completion and renewal (`WAIT 1`): what durability across a failover costs.
    let redis_acks = match &args.redis_acks {
        Some(url) => {
            let store = RedisStore::connect(url).await.map_err(io::Error::other)?;
            store.load_scripts().await.map_err(io::Error::other)?;
            store
        }
        None => redis.clone(),
    };
    let redis_acks = Idem::new(redis_acks.with_replica_acks(1, Duration::from_secs(1)));
    let redis_cached = Idem::new(redis.clone()).replay_cache(replay_cache());
    let redis_sealed = Idem::new(redis.clone()).encrypt_records(keyring());
    let redis = Idem::new(redis);
    let options = PostgresStore::pool_options().max_connections(args.pg_connections);
    let postgres = PostgresStore::connect_with(&args.postgres, options).await.map_err(io::Error::other)?;
    postgres.migrate().await.map_err(io::Error::other)?;
    let postgres_cached = Idem::new(postgres.clone()).replay_cache(replay_cache());
    let postgres = Idem::new(postgres);
    let anchors = anchors::Anchors::connect(&args.redis, &args.postgres, args.pg_connections).await?;
    let server = HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(anchors.clone()))
            .service(web::scope("/bare").service(order::bare))
            .service(web::scope("/floor").service(floor::floor))
            .service(web::scope("/least").service(least::least))
            .service(web::scope("/memory").app_data(memory.clone()).service(order::annotated))
            .service(web::scope("/redis").app_data(redis.clone()).service(order::annotated))
            .service(web::scope("/memory-sealed").app_data(memory_sealed.clone()).service(order::annotated))
            .service(web::scope("/redis-sealed").app_data(redis_sealed.clone()).service(order::annotated))
            .service(web::scope("/redis-acks").app_data(redis_acks.clone()).service(order::annotated))
            .service(web::scope("/postgres").app_data(postgres.clone()).service(order::annotated))
            .service(web::scope("/redis-cached").app_data(redis_cached.clone()).service(order::annotated))
            .service(web::scope("/postgres-cached").app_data(postgres_cached.clone()).service(order::annotated))
            .service(
                web::scope("/hand")
                    .service(anchors::by_hand_on_redis)
                    .service(anchors::by_hand_on_redis_per_worker)
                    .service(anchors::by_hand_on_postgres),
            )
    });
    let server = if args.workers > 0 { server.workers(args.workers) } else { server };
    println!("bench-server listening on {}", args.bind);
    server.bind(&args.bind)?.run().await
}
