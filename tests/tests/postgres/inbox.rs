//! The transactional inbox (§10): a consumer's writes and the
//! processed-message record commit together, against a real PostgreSQL.
//! Each test has a database of its own on the shared server.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::MemoryStore;
use idem_runtime::inbox::{Delivery, Inbox, InboxError};
use idem_tests::http::fresh_key;
use sqlx::PgConnection;
use tokio::sync::Semaphore;

use super::transactional::{
    accept_connections, break_at_commit, create_deferred_table, database, insert, refuse_new_connections, rows, store,
};

/// 64 concurrent deliveries of one message: one processing, one row. A
/// failure rolls its row back and releases the message; a statement that
/// failed under an `Ok` commits nothing; another store is refused.
#[actix_web::test]
async fn the_transactional_inbox_commits_the_work_with_the_processed_record() {
    let Some((url, _admin)) = database("postgres transactional inbox", "idem_inbox_tx").await else { return };
    let store = store(&url, 16).await;
    let inbox = Inbox::new(store.clone(), "notifier");

    let id = format!("msg-{}", fresh_key());
    let deliveries = (0..64).map(|_| {
        let (inbox, id) = (inbox.clone(), id.clone());
        tokio::spawn(async move {
            let tag = id.clone();
            inbox
                .process_in_tx(&id, async move |context, tx| {
                    insert(tx, &tag, context.attempt()).await?;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok::<_, sqlx::Error>(())
                })
                .await
        })
    });
    let mut processed = 0;
    for outcome in futures_util::future::join_all(deliveries).await {
        match outcome.expect("a delivery task").expect("no error") {
            Delivery::Processed(()) => processed += 1,
            Delivery::Duplicate | Delivery::InProgress { .. } => {}
        }
    }
    assert_eq!(processed, 1);
    assert_eq!(rows(&store).await, [(id.clone(), "first".to_owned())], "one row for 64 deliveries");
    let again = inbox.process_in_tx(&id, async |_, _| Ok::<_, sqlx::Error>(())).await.expect("no error");
    assert_eq!(again, Delivery::Duplicate);

    // A failure: its row is rolled back, and the next delivery runs.
    let failing = format!("msg-{}", fresh_key());
    let failed = inbox
        .process_in_tx(&failing, async |context, tx| {
            insert(tx, "failed", context.attempt()).await?;
            Err::<(), _>(sqlx::Error::Protocol("the mail server said no".into()))
        })
        .await;
    assert!(matches!(failed, Err(InboxError::Failed(_))), "{failed:?}");
    let retried = inbox
        .process_in_tx(&failing, async |context, tx| insert(tx, "retried", context.attempt()).await)
        .await
        .expect("no error");
    assert_eq!(retried, Delivery::Processed(()));
    let tags: Vec<String> = rows(&store).await.into_iter().map(|(tag, _)| tag).collect();
    assert_eq!(tags, [id.clone(), "retried".to_owned()], "the failed delivery left nothing");

    // A statement fails, and the work answers Ok all the same: nothing is
    // committed, and the message is released.
    let aborted = format!("msg-{}", fresh_key());
    let result = inbox
        .process_in_tx(&aborted, async |context, tx| {
            insert(tx, "aborted", context.attempt()).await?;
            let _ = sqlx::query("SELECT 1 / 0").execute(&mut *tx).await;
            Ok::<_, sqlx::Error>(())
        })
        .await;
    assert!(matches!(result, Err(InboxError::NotCommitted)), "{result:?}");
    assert_eq!(rows(&store).await.len(), 2, "nothing of the aborted delivery");
    let next = inbox.process_in_tx(&aborted, async |_, _| Ok::<_, sqlx::Error>("ran")).await.expect("no error");
    assert_eq!(next, Delivery::Processed("ran"), "released: the next delivery runs it");

    let memory = Inbox::new(MemoryStore::new(), "notifier");
    let refused = memory.process_in_tx("m", async |_, _| Ok::<_, sqlx::Error>(())).await;
    assert!(matches!(refused, Err(InboxError::NotPostgres { store: "memory" })), "{refused:?}");
}

/// The keeper cannot renew (the database refuses new connections; the
/// renewals' pool has none yet): a stalled delivery's lease runs out, a
/// redelivery takes the message over and commits; the stalled one's commit
/// is refused, and its row rolled back. One row, never two.
#[actix_web::test]
async fn a_lease_lost_delivery_rolls_its_writes_back() {
    let Some((url, admin)) = database("postgres inbox lease lost", "idem_inbox_lease").await else { return };
    let store = store(&url, 4).await;
    let name = refuse_new_connections(&url, &admin, &store).await;

    let inbox =
        Inbox::new(store.clone(), "notifier").lease(Duration::from_secs(2)).store_timeout(Duration::from_millis(600));
    let id = format!("msg-{}", fresh_key());
    let gate = Arc::new(Semaphore::new(0));
    let first = {
        let (inbox, id, gate) = (inbox.clone(), id.clone(), Arc::clone(&gate));
        tokio::spawn(async move {
            inbox
                .process_in_tx(&id, async |context, tx| {
                    insert(tx, "stalled", context.attempt()).await?;
                    let _permit = gate.acquire().await.expect("the gate");
                    Ok::<_, sqlx::Error>("stalled")
                })
                .await
        })
    };
    // Past the 2 s lease, which nothing could renew: the first redelivery
    // to find it lapsed gives it its grace, the next after it takes over.
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    let graced = inbox.process_in_tx(&id, async |_, _| Ok::<_, sqlx::Error>("graced")).await;
    assert!(matches!(graced, Ok(Delivery::InProgress { .. })), "{graced:?}");
    tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(2)) + Duration::from_millis(100)).await;
    let second = inbox
        .process_in_tx(&id, async |context, tx| {
            insert(tx, "takeover", context.attempt()).await?;
            Ok::<_, sqlx::Error>("takeover")
        })
        .await;
    gate.add_permits(1);
    let first = first.await.expect("the stalled delivery");
    assert_eq!(second.expect("no error"), Delivery::Processed("takeover"));
    assert!(matches!(first, Err(InboxError::NotCommitted)), "{first:?}");
    assert_eq!(rows(&store).await, [("takeover".to_owned(), "takeover".to_owned())], "the stalled row rolled back");
    accept_connections(&admin, &name).await;
}

/// Under `OnLapse::Hold`, a delivery held for an operator while its lease
/// had lapsed stays held when its work then ends `Ok` but its `COMMIT` is
/// refused: the message is not redelivered to the work, which may have
/// had effects outside the database.
#[actix_web::test]
async fn a_held_delivery_whose_commit_fails_stays_held() {
    let Some((url, admin)) = database("postgres inbox held", "idem_inbox_held").await else { return };
    let store = store(&url, 4).await;
    create_deferred_table(&store).await;
    let name = refuse_new_connections(&url, &admin, &store).await;

    let inbox = Inbox::new(store.clone(), "notifier")
        .lease(Duration::from_secs(2))
        .store_timeout(Duration::from_millis(600))
        .on_lapse(idem_runtime::OnLapse::Hold);
    let id = format!("msg-{}", fresh_key());
    let gate = Arc::new(Semaphore::new(0));
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let first = {
        let (inbox, id, gate, runs) = (inbox.clone(), id.clone(), Arc::clone(&gate), Arc::clone(&runs));
        tokio::spawn(async move {
            inbox
                .process_in_tx(&id, async |context, tx| {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    insert(tx, "stalled", context.attempt()).await?;
                    let _permit = gate.acquire().await.expect("the gate");
                    break_at_commit(tx).await?;
                    Ok::<_, sqlx::Error>("stalled")
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    let never = async |_, _: &mut PgConnection| Ok::<_, sqlx::Error>("redelivered");
    let graced = inbox.process_in_tx(&id, never).await;
    assert!(matches!(graced, Ok(Delivery::InProgress { .. })), "{graced:?}");
    tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(2)) + Duration::from_millis(100)).await;
    let held = inbox.process_in_tx(&id, never).await;
    assert!(matches!(held, Err(InboxError::Held { .. })), "{held:?}");
    accept_connections(&admin, &name).await;
    gate.add_permits(1);
    let first = first.await.expect("the stalled delivery");
    assert!(matches!(first, Err(InboxError::NotCommitted)), "{first:?}");
    assert_eq!(rows(&store).await, [], "rolled back");
    let again = inbox.process_in_tx(&id, never).await;
    assert!(matches!(again, Err(InboxError::Held { .. })), "still held: {again:?}");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1, "the work ran once");
}
