//! PostgreSQL far away (a latency proxy on the store's connections only): a
//! configuration that cannot keep its lease is refused, and a slow but
//! valid one runs the handler once under a stream of duplicates.

use std::time::{Duration, Instant};

use idem_runtime::PostgresStore;
use idem_tests::backend::{postgres_store, url};
use idem_tests::proxy::LatencyProxy;
use idem_tests::slow_store::{
    WARM_UP_CONNECTIONS, assert_a_short_lease_is_refused, assert_a_slow_store_runs_the_handler_once,
    assert_a_warm_slow_store_runs_the_handler_once, warm_up,
};

/// A store on the shared PostgreSQL server through a proxy that adds no
/// delay yet (each test sets its own once the pool is warm).
async fn proxied_store(test: &str) -> Option<(LatencyProxy, PostgresStore)> {
    let url = url("IDEM_POSTGRES_URL", test)?;
    let (proxy, proxied) = LatencyProxy::in_front_of(&url, Duration::ZERO);
    let connections = u32::try_from(WARM_UP_CONNECTIONS).expect("a small pool");
    Some((proxy, postgres_store(&proxied, connections).await))
}

#[actix_web::test]
async fn a_store_timeout_above_a_third_of_the_lease_is_refused() {
    let Some((proxy, store)) = proxied_store("a_store_timeout_above_a_third_of_the_lease_is_refused").await else {
        return;
    };
    assert_a_short_lease_is_refused(store, &proxy).await;
}

#[actix_web::test]
async fn a_slow_store_never_gives_two_executions() {
    let Some((proxy, store)) = proxied_store("a_slow_store_never_gives_two_executions").await else { return };
    assert_a_slow_store_runs_the_handler_once(store, &proxy).await;
}

/// The renewals' connections, opened ahead, are closed by the server (a
/// pooler's or the server's idle timeout, `pg_terminate_backend`, a restart)
/// before the network turns slow. Their replacements must be ready for the
/// first renewal: opened in a renewal's stead, with the batch statement to
/// prepare, attempt after attempt ran out of the store timeout, the lease
/// ran out, and a duplicate ran the handler a second time.
#[actix_web::test]
async fn a_slow_store_whose_renewal_connections_were_closed_never_gives_two_executions() {
    let test = "a_slow_store_whose_renewal_connections_were_closed_never_gives_two_executions";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    let (proxy, proxied) = LatencyProxy::in_front_of(&url, Duration::ZERO);
    let name = format!("idem-renewals-closed-{}", std::process::id());
    let connections = u32::try_from(WARM_UP_CONNECTIONS).expect("a small pool");
    let store = postgres_store(&format!("{proxied}?application_name={name}"), connections).await;
    warm_up(&store).await;
    let admin = sqlx::PgPool::connect(&url).await.expect("an admin connection");
    // The renewals' connections: the last statement of each is a batch.
    let renewals = "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%unnest($1::text[]%'";
    let open = || async { sqlx::query_as::<_, (i32,)>(renewals).bind(&name).fetch_all(&admin).await.expect("listing") };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut closed = open().await;
    while closed.len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        closed = open().await;
    }
    assert_eq!(closed.len(), 2, "the renewals' two connections, opened ahead");
    for (pid,) in &closed {
        sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(&admin).await.expect("closing one");
    }
    // Replaced, and prepared, before anything needs them.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now_open = open().await;
        if now_open.iter().filter(|pid| !closed.contains(pid)).count() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the renewals' closed connections were not replaced: {now_open:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admin.close().await;
    assert_a_warm_slow_store_runs_the_handler_once(store, &proxy).await;
}
