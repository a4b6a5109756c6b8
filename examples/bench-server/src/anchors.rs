//! The anchors: the order handler made idempotent by hand, as a careful
//! engineer would with the least code. One round trip for a replay, two
//! for a first execution; no fingerprint, no fencing, no lease renewal.

use std::io;

use actix_web::{HttpRequest, HttpResponse, post, web};
use redis::aio::ConnectionManager;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::order::{NewOrder, create, created};

/// How long a record is kept, and how long a pending one blocks the key.
const TTL_MS: u64 = 24 * 3600 * 1000;
const PENDING_MS: u64 = 30_000;

/// Claims a key in one round trip: the stored body, or an empty string for
/// a pending one, or nil after writing a pending marker.
const CLAIM: &str = r"
local stored = redis.call('GET', KEYS[1])
if stored then return stored end
redis.call('SET', KEYS[1], '', 'PX', ARGV[1])
return false
";

/// The connections the anchors use.
#[derive(Clone)]
pub struct Anchors {
    redis: ConnectionManager,
    /// For the per-worker variant's connections.
    redis_client: redis::Client,
    claim: redis::Script,
    postgres: PgPool,
}

thread_local! {
    /// The per-worker variant's connection of this worker.
    static WORKER_REDIS: std::cell::RefCell<Option<ConnectionManager>> = const { std::cell::RefCell::new(None) };
}

impl Anchors {
    /// Connects to both servers and creates the anchor's table.
    pub async fn connect(redis_url: &str, postgres_url: &str, connections: u32) -> io::Result<Self> {
        let client = redis::Client::open(redis_url).map_err(io::Error::other)?;
        let redis = ConnectionManager::new(client.clone()).await.map_err(io::Error::other)?;
        let postgres =
            PgPoolOptions::new().max_connections(connections).connect(postgres_url).await.map_err(io::Error::other)?;
        sqlx::query("CREATE TABLE IF NOT EXISTS hand_keys (key text PRIMARY KEY, response bytea)")
            .execute(&postgres)
            .await
            .map_err(io::Error::other)?;
        Ok(Self { redis, redis_client: client, claim: redis::Script::new(CLAIM), postgres })
    }
}

fn key_of(req: &HttpRequest) -> Option<&str> {
    req.headers().get("idempotency-key")?.to_str().ok()
}

fn conflict() -> HttpResponse {
    HttpResponse::Conflict().finish()
}

fn replayed(body: Vec<u8>) -> HttpResponse {
    let mut response = created(body);
    response.headers_mut().insert(
        actix_web::http::header::HeaderName::from_static("idempotent-replayed"),
        actix_web::http::header::HeaderValue::from_static("true"),
    );
    response
}

/// By hand on Redis: `EVALSHA` claim, then `SET` of the response, on one
/// connection shared by every worker (the anchor of §12 of the contract).
#[post("/redis/orders")]
pub async fn by_hand_on_redis(req: HttpRequest, body: web::Bytes, anchors: web::Data<Anchors>) -> HttpResponse {
    let redis = anchors.redis.clone();
    by_hand(req, body, &anchors, redis).await
}

/// The same, on a connection of each worker's own, opened on its first
/// request (what the store does): not an anchor of §12 of the contract, a measure of
/// what the shared connection costs.
#[post("/redis-per-worker/orders")]
pub async fn by_hand_on_redis_per_worker(
    req: HttpRequest,
    body: web::Bytes,
    anchors: web::Data<Anchors>,
) -> HttpResponse {
    let redis = match WORKER_REDIS.with(|redis| redis.borrow().clone()) {
        Some(redis) => redis,
        None => match ConnectionManager::new(anchors.redis_client.clone()).await {
            Ok(redis) => {
                WORKER_REDIS.with(|worker| *worker.borrow_mut() = Some(redis.clone()));
                redis
            }
            Err(_) => return HttpResponse::ServiceUnavailable().finish(),
        },
    };
    by_hand(req, body, &anchors, redis).await
}

async fn by_hand(req: HttpRequest, body: web::Bytes, anchors: &Anchors, mut redis: ConnectionManager) -> HttpResponse {
    let Some(key) = key_of(&req) else { return HttpResponse::BadRequest().finish() };
    let key = format!("hand:/orders:{key}");
    let stored: Option<Vec<u8>> = match anchors.claim.key(&key).arg(PENDING_MS).invoke_async(&mut redis).await {
        Ok(stored) => stored,
        Err(_) => return HttpResponse::ServiceUnavailable().finish(),
    };
    match stored {
        Some(body) if body.is_empty() => conflict(),
        Some(body) => replayed(body),
        None => {
            let Ok(order) = serde_json::from_slice::<NewOrder>(&body) else {
                let _: Result<(), _> = redis::cmd("DEL").arg(&key).query_async(&mut redis).await;
                return HttpResponse::BadRequest().finish();
            };
            let response = create(&order);
            let set: Result<(), _> =
                redis::cmd("SET").arg(&key).arg(&response).arg("PX").arg(TTL_MS).query_async(&mut redis).await;
            if set.is_err() {
                return HttpResponse::ServiceUnavailable().finish();
            }
            created(response)
        }
    }
}

/// Claims a key in one statement: `fresh` when this call inserted it, else
/// the stored response (null while pending).
const PG_CLAIM: &str = "WITH ins AS (INSERT INTO hand_keys (key) VALUES ($1) ON CONFLICT (key) DO NOTHING RETURNING true) \
                        SELECT EXISTS (SELECT 1 FROM ins), (SELECT response FROM hand_keys WHERE key = $1)";

/// By hand on Postgres: an `INSERT .. ON CONFLICT` claim, then an `UPDATE`.
#[post("/postgres/orders")]
pub async fn by_hand_on_postgres(req: HttpRequest, body: web::Bytes, anchors: web::Data<Anchors>) -> HttpResponse {
    let Some(key) = key_of(&req) else { return HttpResponse::BadRequest().finish() };
    let key = format!("/orders:{key}");
    let claimed: Result<(bool, Option<Vec<u8>>), _> =
        sqlx::query_as(PG_CLAIM).bind(&key).fetch_one(&anchors.postgres).await;
    match claimed {
        Err(_) => HttpResponse::ServiceUnavailable().finish(),
        Ok((true, _)) => {
            let Ok(order) = serde_json::from_slice::<NewOrder>(&body) else {
                let _ = sqlx::query("DELETE FROM hand_keys WHERE key = $1").bind(&key).execute(&anchors.postgres).await;
                return HttpResponse::BadRequest().finish();
            };
            let response = create(&order);
            let stored = sqlx::query("UPDATE hand_keys SET response = $2 WHERE key = $1")
                .bind(&key)
                .bind(&response)
                .execute(&anchors.postgres)
                .await;
            if stored.is_err() {
                return HttpResponse::ServiceUnavailable().finish();
            }
            created(response)
        }
        Ok((false, Some(body))) => replayed(body),
        Ok((false, None)) => conflict(),
    }
}
