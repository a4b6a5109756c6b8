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
