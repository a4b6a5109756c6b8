//! The operator's tool, `idem` (§14), on the shared Postgres server:
//! listing, inspecting, releasing and resolving records, fenced writes, and
//! its exit statuses.

use std::sync::Arc;

use idem_runtime::store::Operable;
use idem_tests::backend::{postgres_store, url};
use idem_tests::tool_checks::{self, Tool};

/// A store on the shared Postgres server (its table migrated), and the tool
/// pointed at it.
async fn shared(test: &str) -> Option<(Arc<dyn Operable>, Tool)> {
    let url = url("IDEM_POSTGRES_URL", test)?;
    Some((Arc::new(postgres_store(&url, 4).await), Tool::on(&url)))
}

#[tokio::test]
async fn listing_and_inspecting_show_each_record() {
    let Some((store, tool)) = shared("postgres tool: list and inspect").await else { return };
    tool_checks::listing_and_inspecting_show_each_record(store, &tool).await;
}

#[tokio::test]
async fn release_and_resolve_settle_held_executions() {
    let Some((store, tool)) = shared("postgres tool: release and resolve").await else { return };
    tool_checks::release_and_resolve_settle_held_executions(store, &tool).await;
}

#[tokio::test]
async fn a_record_that_changed_is_not_settled() {
    let Some((store, tool)) = shared("postgres tool: a record that changed").await else { return };
    tool_checks::a_record_that_changed_is_not_settled(store, &tool).await;
}

#[tokio::test]
async fn sealed_records_open_only_with_the_keys() {
    let Some((store, tool)) = shared("postgres tool: sealed records").await else { return };
    tool_checks::sealed_records_open_only_with_the_keys(store, &tool).await;
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let Some((_, tool)) = shared("postgres tool: usage errors").await else { return };
    tool_checks::usage_errors_exit_2(&tool).await;
}

#[tokio::test]
async fn an_unreachable_store_exits_2_without_its_password() {
    tool_checks::an_unreachable_store_exits_2_without_its_password("postgres://u:hunter2@127.0.0.1:{port}/db").await;
}
