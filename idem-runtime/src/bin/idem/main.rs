//! `idem`: the operator's tool for idempotency records (§14 of the behaviour
//! contract). List, inspect, release and resolve records on Redis, Redis
//! Cluster and Postgres, with the runtime's own code ([`Operator`]).
//!
//! Exit status: 0 done, 1 refused or not found (the record changed, is not
//! in flight or held, or is gone), 2 usage or connection error.

mod args;
mod connect;
mod output;

use std::process::ExitCode;

use clap::Parser;
use idem_runtime::operate::{Operator, OperatorError, Target};
use idem_runtime::sealing::{Keyring, RecordsKey};
use idem_runtime::store::{ListFilter, StoredResponse};

use self::args::{Cli, Command, RecordArgs};
use self::output::Output;

/// Exit status: the record was refused or not found.
const REFUSED: u8 = 1;
/// Exit status: a usage or connection error.
const FAILED: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idem: cannot start: {error}");
            return ExitCode::from(FAILED);
        }
    };
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    let output = Output { json: cli.json };
    let store = match connect::open(&cli.store, cli.table.as_deref(), cli.key_prefix.as_deref()).await {
        Ok(store) => store,
        Err(error) => {
            // The error shows the URL with its password masked.
            eprintln!("idem: {error}");
            return ExitCode::from(FAILED);
        }
    };
    let operator = Operator::new(store).with_grace(cli.grace.into());
    let (operator, keyed) = match records_keys(cli.records_key_file.as_deref()) {
        Ok(Some(keyring)) => (operator.with_records_keys(keyring), true),
        Ok(None) => (operator, false),
        Err(error) => {
            eprintln!("idem: {error}");
            return ExitCode::from(FAILED);
        }
    };
    let done = match cli.command {
        Command::List { state, older_than, route, limit } => {
            let mut filter = ListFilter::new(limit);
            filter.state = state;
            filter.older_than = older_than.map(Into::into);
            filter.route = route;
            match operator.list(&filter).await {
                Ok(found) => {
                    output.list(&found);
                    Ok(())
                }
                Err(error) => Err(OperatorError::Store(error)),
            }
        }
        Command::Inspect { record } => match target(&record) {
            Ok(target) => operator.inspect(&target).await.map(|inspection| output.inspect(&inspection)),
            Err(error) => Err(error),
        },
        Command::Release { record, forget_steps, expect } => match target(&record) {
            Ok(target) => {
                operator.release(&target, &expect.expect(), forget_steps).await.map(|settled| output.settled(&settled))
            }
            Err(error) => Err(error),
        },
        Command::Resolve { record, status, header, body, expect } => {
            let response = match std::fs::read(&body) {
                Ok(bytes) => StoredResponse { status, headers: header, body: bytes.into() },
                Err(error) => {
                    eprintln!("idem: cannot read the body file {}: {error}", body.display());
                    return ExitCode::from(FAILED);
                }
            };
            match target(&record) {
                Ok(target) => {
                    let resolved = operator.resolve(&target, response, &expect.expect()).await;
                    if resolved.is_ok() && !keyed {
                        // Nothing tells the tool whether the service seals:
                        // one that does answers 500 for a clear response.
                        eprintln!(
                            "idem: note: the response was written in the clear (no records keys given); a service \
                             that encrypts its records refuses it"
                        );
                    }
                    resolved.map(|settled| output.settled(&settled))
                }
                Err(error) => Err(error),
            }
        }
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            output.error(&error);
            ExitCode::from(if error.is_refusal() { REFUSED } else { FAILED })
        }
    }
}

/// The record the arguments name.
fn target(record: &RecordArgs) -> Result<Target, OperatorError> {
    match (&record.id, &record.route, &record.key) {
        (Some(id), None, None) => Ok(Target::Id(id.clone())),
        (None, Some(route), Some(key)) => Ok(Target::Key {
            route: route.clone(),
            scope: record.scope,
            subject: record.subject.clone(),
            key: key.clone(),
        }),
        _ => Err(OperatorError::InvalidTarget(
            "name a record by its ID, or by --route, --scope, --subject and --key".to_owned(),
        )),
    }
}

/// The records keys from `file`, else from `IDEM_RECORDS_KEY`: 64
/// hexadecimal digits each, separated by commas or new lines, the current
/// one first. Errors never repeat a key.
fn records_keys(file: Option<&std::path::Path>) -> Result<Option<Keyring>, String> {
    let text = match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read the records key file {}: {error}", path.display()))?,
        None => match std::env::var("IDEM_RECORDS_KEY") {
            Ok(text) => text,
            Err(_) => return Ok(None),
        },
    };
    let mut keys = text
        .split([',', '\n'])
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .enumerate()
        .map(|(at, key)| RecordsKey::from_hex(key).map_err(|error| format!("records key {}: {error}", at + 1)));
    let Some(current) = keys.next().transpose()? else {
        return Err("the records keys are empty".to_owned());
    };
    keys.try_fold(Keyring::new(current), |keyring, key| Ok(keyring.with_previous(key?))).map(Some)
}
