//! PostgreSQL far away (a latency proxy on the store's connections only): a
//! configuration that cannot keep its lease is refused, and a slow but
//! valid one runs the handler once under a stream of duplicates.

use std::time::Duration;

use idem_runtime::PostgresStore;
use idem_tests::backend::{postgres_store, url};
use idem_tests::proxy::LatencyProxy;
use idem_tests::slow_store::{
    WARM_UP_CONNECTIONS, assert_a_short_lease_is_refused, assert_a_slow_store_runs_the_handler_once,
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

/// A store made anew on a warm pool: its renewals' own pool has no
/// connection yet. The first renewal must not have to open one across the
/// slow network within the store timeout: timing out again and again, it
/// lost the first request's lease, and a duplicate ran the handler a second
/// time.
#[actix_web::test]
async fn a_slow_store_whose_renewals_have_no_connection_yet_never_gives_two_executions() {
    let Some((proxy, store)) =
        proxied_store("a_slow_store_whose_renewals_have_no_connection_yet_never_gives_two_executions").await
    else {
        return;
    };
    let anew = PostgresStore::new(store.pool().clone());
    assert_a_slow_store_runs_the_handler_once(anew, &proxy).await;
}
