//! What the routes do, whatever the web framework serves them: orders and
//! payments, written either directly (memory and Redis: each write is safe
//! to repeat on its own, since the order's id comes from the execution and
//! the provider deduplicates charges by key) or in the transaction the
//! runtime opens for the execution (Postgres, `Tx`: the business rows
//! commit together with the stored response, and a crash before the
//! commit leaves neither; the provider's ledger is another system, never
//! in it).

use idem_runtime::{ExecutionContext, Tx};

use crate::app::AppState;
use crate::error::ApiError;
use crate::faults::DurableStep;
use crate::model::{Charge, NewOrder, NewPayment, Order, Payment, Stats, uuid_shaped};
use crate::provider::Outcome;
use crate::repo::transactional as rows;
use crate::repo::{InsertOrder, RepoError};

/// The id of the order an execution creates: the same in every execution of
/// one idempotency key.
fn order_id(execution: &ExecutionContext) -> String {
    uuid_shaped(&execution.derived_key("order"))
}

/// The id of the payment an execution records: the same in every execution
/// of one idempotency key.
fn payment_id(execution: &ExecutionContext) -> String {
    uuid_shaped(&execution.derived_key("payment"))
}

/// The idempotency key the provider gets for an execution's charge.
fn charge_key(execution: &ExecutionContext) -> String {
    execution.derived_key("charge")
}

/// Charges `amount_cents` for `order_id` through the provider, as the
/// payment's durable step `charge`: at most one charge per idempotency key,
/// even with a provider that does not deduplicate.
///
/// The step records the provider's answer about the money, whatever it is:
/// a captured charge, a declined card, a timeout after the charge (504). A
/// takeover after a crash gets that answer back and does not call the
/// provider again: a captured or timed-out charge is never made twice, and
/// the takeover answers as the first execution would have. A call that got
/// no answer is not recorded (`try_step` records results only): the
/// provider unreachable before charging, or its ledger failing while it
/// deduplicates, is a 503 marked retryable (nothing happened, or asking
/// again is safe), and the next execution asks the provider again; a ledger
/// failing while it does not deduplicate is a 502 kept for the key, since
/// the charge may stand.
///
/// The step runs again if the crash came between the charge and its record
/// (`--crash-after-charge`), which is why the provider still gets the
/// execution's derived key.
async fn charge(
    execution: &ExecutionContext,
    state: &AppState,
    order_id: &str,
    amount_cents: i64,
) -> Result<Charge, ApiError> {
    let key = charge_key(execution);
    let call = async {
        let outcome = state.provider.charge(&key, order_id, amount_cents).await?;
        if let Outcome::Captured(_) = outcome {
            state.faults.after_charge();
        }
        Ok::<_, ApiError>(outcome)
    };
    // An error is no answer: not recorded, and returned as it is.
    let outcome = execution.try_step(DurableStep::Charge.name(), call).await??;
    state.faults.after_step(DurableStep::Charge);
    match outcome {
        Outcome::Captured(charge) => Ok(charge),
        Outcome::Declined => Err(ApiError::Declined),
        Outcome::TimedOutAfterCharge => Err(ApiError::ProviderTimeout),
    }
}

/// `order`, if the caller owns it; else 404 for `id`.
pub(crate) fn owned(order: Option<Order>, user: &str, id: &str) -> Result<Order, ApiError> {
    match order {
        Some(order) if order.owner == user => Ok(order),
        _ => Err(ApiError::NotFound(id.to_owned())),
    }
}

/// Creates an order, its row written on its own (memory, Redis).
pub(crate) async fn create_order(
    user: &str,
    new: NewOrder,
    execution: &ExecutionContext,
    orders: &dyn InsertOrder,
    state: &AppState,
) -> Result<Order, ApiError> {
    new.validate().map_err(ApiError::Invalid)?;
    let order = orders.insert_order(&Order::new(order_id(execution), user, new)).await?;
    state.faults.after_order_insert();
    Ok(order)
}

/// Creates an order, its row and its event written in `tx` (Postgres).
pub(crate) async fn create_order_in(
    user: &str,
    new: NewOrder,
    execution: &ExecutionContext,
    tx: &mut Tx,
    state: &AppState,
) -> Result<Order, ApiError> {
    new.validate().map_err(ApiError::Invalid)?;
    let order = Order::new(order_id(execution), user, new);
    rows::insert_order(tx, &order).await?;
    rows::publish(tx, &order.created_event()).await?;
    state.faults.after_order_insert();
    Ok(order)
}

/// Pays an order through the simulated provider (the durable step `charge`).
pub(crate) async fn create_payment(
    user: &str,
    id: &str,
    body: &NewPayment,
    execution: &ExecutionContext,
    state: &AppState,
) -> Result<Payment, ApiError> {
    body.validate().map_err(ApiError::Invalid)?;
    let order = owned(state.repo.order(id).await?, user, id)?;
    let charge = charge(execution, state, &order.id, body.amount_cents).await?;
    let payment = Payment::new(payment_id(execution), charge);
    tokio::time::sleep(state.post_charge_delay).await;
    Ok(payment)
}

/// Pays an order through the simulated provider (the durable step
/// `charge`), and records the payment in `tx` (Postgres).
pub(crate) async fn create_payment_in(
    user: &str,
    id: &str,
    body: &NewPayment,
    execution: &ExecutionContext,
    tx: &mut Tx,
    state: &AppState,
) -> Result<Payment, ApiError> {
    body.validate().map_err(ApiError::Invalid)?;
    let order = owned(rows::order(tx, id).await?, user, id)?;
    // The step's record is written outside `tx`, by the runtime: a rollback
    // does not undo the charge.
    let charge = charge(execution, state, &order.id, body.amount_cents).await?;
    let payment = Payment::new(payment_id(execution), charge);
    rows::insert_payment(tx, &payment).await?;
    tokio::time::sleep(state.post_charge_delay).await;
    Ok(payment)
}

/// Side-effect counts across every process sharing the backend: orders
/// created, charges at the provider, refunds it reported, notifications
/// the order notifier sent.
pub(crate) async fn stats(state: &AppState) -> Result<Stats, ApiError> {
    let orders_created = state.repo.orders_created().await?;
    let charges = state.provider.charges().await?;
    let refunds = state.repo.refunds().await?;
    let notifications_sent = state.outlet.sent().await.map_err(|e| RepoError::new("notifications", e))?;
    Ok(Stats { orders_created, charges, refunds, notifications_sent })
}
