//! The outbox on Redis (§10): events appended to a stream in the same
//! `MULTI` as the business write, delivered through a consumer group.

use idem_runtime::outbox::{Event, RedisOutbox, Transport};
use idem_tests::http::fresh_key;
use idem_tests::outbox_checks::{VISIBILITY, assert_transport};
use redis::AsyncCommands;

/// Two consumers of one group on a stream of this run; each event is
/// appended in one `MULTI` with the business key it belongs to.
#[actix_web::test]
async fn the_redis_outbox_delivers_at_least_once_through_a_consumer_group() {
    let Some(url) = idem_tests::backend::url("IDEM_REDIS_URL", "the redis outbox") else { return };
    let stream = format!("outbox-check:{}", fresh_key());
    let connect = |consumer: &'static str| {
        let (url, stream) = (url.clone(), stream.clone());
        async move {
            let outbox = RedisOutbox::connect(&url, &stream, "checks", consumer).await.expect("connecting the outbox");
            outbox.visibility(VISIBILITY)
        }
    };
    let (first, second) = (connect("first").await, connect("second").await);
    let client = redis::Client::open(url.as_str()).expect("a client");
    let connection = client.get_multiplexed_async_connection().await.expect("connecting");
    assert_transport(&first, &second, |event: Event| {
        let (mut connection, stream) = (connection.clone(), stream.clone());
        async move {
            let business = format!("{stream}:business:{}", event.id);
            redis::pipe()
                .atomic()
                .set(&business, "written")
                .ignore()
                .add_command(RedisOutbox::xadd(&stream, &event))
                .ignore()
                .query_async::<()>(&mut connection)
                .await
                .expect("the business write and its event");
        }
    })
    .await;
    assert_eq!(first.backlog().await.expect("the backlog"), 0, "acknowledged entries are deleted");
    let mut connection = connection.clone();
    let _: () = connection.del(&stream).await.expect("dropping the stream");
}

/// Entries the producer did not write (a field name that is not UTF-8, no
/// fields the outbox knows) are delivered as messages of their own, keyed
/// by their entry id, and never keep the entries beside them from being
/// delivered; a stream deleted under the group is recreated, group and all.
#[actix_web::test]
async fn unreadable_entries_and_a_lost_group_never_stop_delivery() {
    let Some(url) = idem_tests::backend::url("IDEM_REDIS_URL", "the redis outbox, unreadable entries") else { return };
    let stream = format!("outbox-poison:{}", fresh_key());
    let outbox = RedisOutbox::connect(&url, &stream, "checks", "only").await.expect("connecting the outbox");
    let client = redis::Client::open(url.as_str()).expect("a client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connecting");
    let add = |fields: Vec<(Vec<u8>, Vec<u8>)>| {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&stream).arg("*");
        for (name, value) in fields {
            cmd.arg(name).arg(value);
        }
        cmd
    };
    let good = |n: u32| Event::new(format!("good-{n}"), "check.published", "{}");
    let _: String = RedisOutbox::xadd(&stream, &good(1)).query_async(&mut connection).await.unwrap();
    let _: String = add(vec![(b"\xff\xfe".to_vec(), b"x".to_vec())]).query_async(&mut connection).await.unwrap();
    let _: String = add(vec![(b"other".to_vec(), b"\xff".to_vec())]).query_async(&mut connection).await.unwrap();
    let _: String = RedisOutbox::xadd(&stream, &good(2)).query_async(&mut connection).await.unwrap();
    let messages = outbox.receive(10).await.expect("one bad entry fails no batch");
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!((ids[0], ids[3]), ("good-1", "good-2"));
    assert!(ids[1].starts_with(&format!("{stream}:")) && ids[2].starts_with(&format!("{stream}:")), "{ids:?}");
    assert_ne!(ids[1], ids[2]);
    for message in &messages {
        outbox.ack(message).await.expect("acknowledging");
    }
    assert_eq!(outbox.backlog().await.unwrap(), 0);

    let _: () = connection.del(&stream).await.unwrap();
    let _: String = RedisOutbox::xadd(&stream, &good(3)).query_async(&mut connection).await.unwrap();
    let again = outbox.receive(10).await.expect("the group is recreated");
    assert_eq!(again.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["good-3"]);
    let _: () = connection.del(&stream).await.unwrap();
}
