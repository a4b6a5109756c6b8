//! The outbox on Postgres (§10): events written in the business
//! transaction, delivered from the outbox table with `FOR UPDATE SKIP
//! LOCKED` and a visibility timeout.

use idem_runtime::outbox::{Event, PostgresOutbox};
use idem_tests::backend::postgres_store;
use idem_tests::http::fresh_key;
use idem_tests::outbox_checks::{VISIBILITY, assert_transport};

/// Two receivers of the table; each event committed in its own
/// transaction. An event whose transaction rolls back is never delivered.
#[actix_web::test]
async fn the_postgres_outbox_delivers_committed_events_at_least_once() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "the postgres outbox") else { return };
    let store = postgres_store(&url, 8).await;
    let pool = store.pool().clone();
    let first = PostgresOutbox::new(pool.clone()).visibility(VISIBILITY);
    first.migrate().await.expect("migrating the outbox");
    let second = PostgresOutbox::new(pool.clone()).visibility(VISIBILITY);

    // Rolled back: never published.
    let rolled_back = format!("rolled-back-{}", fresh_key());
    let mut tx = pool.begin().await.expect("BEGIN");
    PostgresOutbox::publish(&mut tx, &Event::new(rolled_back.clone(), "check.published", "{}"))
        .await
        .expect("writing the event");
    tx.rollback().await.expect("ROLLBACK");

    assert_transport(&first, &second, |event| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.expect("BEGIN");
            PostgresOutbox::publish(&mut tx, &event).await.expect("writing the event");
            tx.commit().await.expect("COMMIT");
        }
    })
    .await;
    let leftover: i64 = sqlx::query_scalar("SELECT count(*) FROM idem_outbox WHERE id = $1")
        .bind(&rolled_back)
        .fetch_one(&pool)
        .await
        .expect("counting");
    assert_eq!(leftover, 0, "the rolled-back event was never written");
}
