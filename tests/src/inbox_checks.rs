//! The inbox on any store (§10): one processing per message id however
//! many deliveries race, a redelivery during processing skipped, a failure
//! released for the next delivery.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::OnLapse;
use idem_runtime::inbox::{Delivery, Inbox, InboxError};
use idem_runtime::operate::{Expect, Operator, Target};
use idem_runtime::store::{Operable, Store};
use tokio::sync::Notify;

use crate::counter::Counter;
use crate::http::fresh_key;

/// Every check on `store`, under a consumer name of this run.
pub async fn assert_inbox(store: Arc<dyn Store>) {
    let inbox = Inbox::from_arc(store, &format!("consumer-{}", fresh_key()));
    let sloppy = inbox.clone().store_timeout(Duration::from_secs(11));
    let refused = sloppy.process("any", |_| async { Ok::<_, std::io::Error>(()) }).await;
    assert!(matches!(refused, Err(InboxError::Misconfigured { .. })), "a lease the keeper cannot keep: {refused:?}");

    // 64 concurrent deliveries of one id: one processing.
    let runs = Arc::new(Counter::default());
    let id = format!("msg-{}", fresh_key());
    let deliveries = (0..64).map(|_| {
        let (inbox, runs, id) = (inbox.clone(), Arc::clone(&runs), id.clone());
        tokio::spawn(async move {
            inbox
                .process(&id, |_| async move {
                    runs.next();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok::<_, std::io::Error>(())
                })
                .await
        })
    });
    let outcomes = futures_util::future::join_all(deliveries).await;
    let mut processed = 0;
    for outcome in outcomes {
        match outcome.expect("a delivery task").expect("no store error") {
            Delivery::Processed(()) => processed += 1,
            Delivery::Duplicate | Delivery::InProgress { .. } => {}
        }
    }
    assert_eq!((processed, runs.get()), (1, 1), "64 deliveries, one processing");
    let again = inbox.process(&id, |_| async { Ok::<_, std::io::Error>(()) }).await.expect("no store error");
    assert_eq!(again, Delivery::Duplicate, "a later delivery is a duplicate");

    // A redelivery while the first still runs is skipped, not run.
    let id = format!("msg-{}", fresh_key());
    let (started, finish) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let first = {
        let (inbox, id, started, finish) = (inbox.clone(), id.clone(), Arc::clone(&started), Arc::clone(&finish));
        tokio::spawn(async move {
            inbox
                .process(&id, |_| async move {
                    started.notify_one();
                    finish.notified().await;
                    Ok::<_, std::io::Error>("first")
                })
                .await
        })
    };
    started.notified().await;
    let during = inbox.process(&id, |_| async { Ok::<_, std::io::Error>("second") }).await.expect("no store error");
    assert!(matches!(during, Delivery::InProgress { retry_after } if retry_after > Duration::ZERO), "{during:?}");
    finish.notify_one();
    assert_eq!(first.await.expect("the first delivery").expect("no store error"), Delivery::Processed("first"));

    // A failure releases the message: the next delivery runs it.
    let id = format!("msg-{}", fresh_key());
    let failed = inbox.process(&id, |_| async { Err::<(), _>(std::io::Error::other("smtp down")) }).await;
    assert!(matches!(failed, Err(InboxError::Failed(_))), "{failed:?}");
    let retried = inbox.process(&id, |_| async { Ok::<_, std::io::Error>("sent") }).await.expect("no store error");
    assert_eq!(retried, Delivery::Processed("sent"));
    let after = inbox.process(&id, |_| async { Ok::<_, std::io::Error>("twice") }).await.expect("no store error");
    assert_eq!(after, Delivery::Duplicate);
}

/// A delivery whose lease lapsed (renewals failing) while its work ran:
/// another delivery, after the grace the first one to find it lapsed gave,
/// takes the message over and completes it; the first learns that its
/// completion was refused. One completion, never two.
pub async fn assert_lease_loss_completes_once(store: Arc<dyn Store>) {
    let inbox = Inbox::from_arc(store, "lease-loss")
        .lease(Duration::from_millis(600))
        .store_timeout(Duration::from_millis(100));
    let id = format!("msg-{}", fresh_key());
    let runs = Arc::new(Counter::default());
    let slow = {
        let (inbox, id, runs) = (inbox.clone(), id.clone(), Arc::clone(&runs));
        tokio::spawn(async move {
            inbox
                .process(&id, |_| async move {
                    runs.next();
                    // Past the lease and the grace a redelivery gives it.
                    tokio::time::sleep(Duration::from_millis(3000)).await;
                    Ok::<_, std::io::Error>("slow")
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(900)).await;
    // The first delivery to find the lease lapsed gives it its grace.
    let graced = inbox.process(&id, |_| async { Ok::<_, std::io::Error>("graced") }).await;
    assert!(matches!(graced, Ok(Delivery::InProgress { .. })), "{graced:?}");
    tokio::time::sleep(idem_runtime::store::grace(Duration::from_millis(600)) + Duration::from_millis(50)).await;
    let taken = inbox
        .process(&id, |context| {
            let runs = Arc::clone(&runs);
            async move {
                runs.next();
                assert_eq!(context.attempt(), idem_runtime::Attempt::Takeover);
                Ok::<_, std::io::Error>("takeover")
            }
        })
        .await;
    assert!(matches!(taken, Ok(Delivery::Processed("takeover"))), "{taken:?}");
    let slow = slow.await.expect("the slow delivery");
    assert!(matches!(slow, Err(InboxError::LeaseLost("slow"))), "the value comes back: {slow:?}");
    assert_eq!(runs.get(), 2);
    let after = inbox.process(&id, |_| async { Ok::<_, std::io::Error>("third") }).await;
    assert!(matches!(after, Ok(Delivery::Duplicate)), "{after:?}");
}

/// Under [`OnLapse::Hold`], a delivery whose earlier one stopped half way
/// (dropped while its work ran, as in a crash) is refused as held, and the
/// work does not run, until an operator releases the record; the next
/// delivery then runs it once.
pub async fn assert_a_stopped_delivery_is_held(store: Arc<dyn Operable>) {
    let shared: Arc<dyn Store> = store.clone();
    let inbox = Inbox::from_arc(shared, &format!("consumer-{}", fresh_key()))
        .lease(Duration::from_secs(1))
        .store_timeout(Duration::from_millis(300))
        .on_lapse(OnLapse::Hold);
    let id = format!("msg-{}", fresh_key());
    let stopped = {
        let (inbox, id) = (inbox.clone(), id.clone());
        tokio::spawn(async move { inbox.process(&id, |_| std::future::pending::<Result<(), std::io::Error>>()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    stopped.abort();
    // Past its lease: the first delivery gives it its grace.
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    let runs = Counter::default();
    let work = |_| async {
        runs.next();
        Ok::<_, std::io::Error>("done")
    };
    let graced = inbox.process(&id, work).await;
    assert!(matches!(graced, Ok(Delivery::InProgress { .. })), "the grace: {graced:?}");
    tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(1)) + Duration::from_millis(300)).await;
    let record = match inbox.process(&id, work).await {
        Err(InboxError::Held { record }) => record,
        other => panic!("expected the delivery to be held, got {other:?}"),
    };
    assert!(matches!(inbox.process(&id, work).await, Err(InboxError::Held { .. })));
    assert_eq!(runs.get(), 0, "nothing ran while held");
    let operator = Operator::new(store);
    operator.release(&Target::Id(record), &Expect::default(), false).await.expect("released");
    let done = inbox.process(&id, work).await;
    assert!(matches!(done, Ok(Delivery::Processed("done"))), "{done:?}");
    assert_eq!(runs.get(), 1);
}
