//! Table names and the SQL of each operation, rendered once per store.

use std::fmt;
use std::sync::Arc;

use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

use crate::store::StateName;

/// Table used by [`PostgresStore::new`](super::PostgresStore::new).
pub(super) const DEFAULT_TABLE: &str = "idem_records";

/// Longest table name part; leaves room for the `_expires_at_idx` suffix of
/// the index name within PostgreSQL's 63-byte identifier limit.
const MAX_TABLE_LEN: usize = 48;
/// PostgreSQL's identifier limit, for the schema part.
const MAX_SCHEMA_LEN: usize = 63;

/// A table name refused by [`PostgresStore::with_table`](super::PostgresStore::with_table).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid table name `{name}`: expected `table` or `schema.table`, each part matching \
     [a-z_][a-z0-9_]* (table at most {MAX_TABLE_LEN} bytes, schema at most {MAX_SCHEMA_LEN})"
)]
pub struct InvalidTableName {
    /// The name as given.
    pub name: String,
}

/// A validated, optionally schema-qualified table name.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct TableName {
    schema: Option<String>,
    table: String,
}

fn valid_part(part: &str, max: usize) -> bool {
    let mut bytes = part.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && part.len() <= max
}

impl TableName {
    /// [`DEFAULT_TABLE`], valid by construction (checked by a test).
    pub(super) fn default_table() -> Self {
        Self { schema: None, table: DEFAULT_TABLE.to_owned() }
    }

    /// Validates `name`: `table` or `schema.table`, lower-case identifiers.
    pub(super) fn parse(name: &str) -> Result<Self, InvalidTableName> {
        let invalid = || InvalidTableName { name: name.to_owned() };
        let (schema, table) = match name.split_once('.') {
            Some((schema, table)) => (Some(schema), table),
            None => (None, name),
        };
        if !valid_part(table, MAX_TABLE_LEN) || !schema.is_none_or(|s| valid_part(s, MAX_SCHEMA_LEN)) {
            return Err(invalid());
        }
        Ok(Self { schema: schema.map(str::to_owned), table: table.to_owned() })
    }

    /// The quoted, qualified name to use in SQL. Quoting keeps reserved
    /// words (`user`, `order`) usable; validation keeps quotes out of names.
    fn quoted(&self) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.table),
            None => format!("\"{}\"", self.table),
        }
    }

    /// The quoted, qualified name of the claim function
    /// (`<table>_claim_v4`). The version is in the name, and a build whose
    /// claim answers differ takes the next one: a process of an earlier
    /// version that migrates the table again replaces its own function
    /// (`<table>_claim_v3`, which answers a claim carrying the token of
    /// an execution in flight as that execution's whatever its request;
    /// `<table>_claim_v2`, which knows nothing of held executions and
    /// steps; `<table>_claim`, which takes a lapsed lease over at once),
    /// never this one.
    fn claim_function(&self) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}_claim_v4\"", self.table),
            None => format!("\"{}_claim_v4\"", self.table),
        }
    }

    /// The quoted name of the expiry index (created in the table's schema).
    fn index(&self) -> String {
        format!("\"{}_expires_at_idx\"", self.table)
    }

    /// The quoted name of the partial index of in-flight rows, for the
    /// operator's listing (created in the table's schema).
    fn in_flight_index(&self) -> String {
        format!("\"{}_in_flight_idx\"", self.table)
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// A lapsed lease of the same request whose holder had its grace, and that
/// is not held (`excluded` is the claim; a claim sent again with its own
/// token never replaces its row): what a claim takes over, or holds under
/// `on_lapse = hold`. Fills `{lapsed}` in [`TAKE_OVER`] and [`HOLD`].
const LAPSED: &str = "(cur.fingerprint = excluded.fingerprint AND cur.state = 'in_flight' \
    AND cur.lease_until <= now() AND coalesce(cur.graced, false) AND NOT coalesce(cur.held, false) \
    AND cur.token <> excluded.token)";

/// When a claim replaces the row it conflicts with (`cur`): the row is past
/// its TTL, or it is a tombstone of the same request, or a [`LAPSED`] lease
/// of the same request and the claim does not hold such executions (`$6`
/// is the claim's `on_lapse = hold`). Fills `{take}` in `claim_upsert.sql`.
const TAKE_OVER: &str = "(cur.expires_at <= now() OR (cur.fingerprint = excluded.fingerprint \
    AND cur.state = 'released') OR ({lapsed} AND NOT $6))";

/// When a claim holds the row it conflicts with instead of taking it over:
/// a live, [`LAPSED`] lease of the same request, and the claim holds such
/// executions (`$6`). Fills `{hold}` in `claim_upsert.sql`.
const HOLD: &str = "(cur.expires_at > now() AND {lapsed} AND $6)";

/// When a claim gives the holder of the row it conflicts with a grace: a
/// lapsed lease of the same request that no claim had found so (see
/// `Store::claim`), and that is not held. Fills `{grace}` in
/// `claim_upsert.sql`.
const GRACE: &str = "(cur.expires_at > now() AND cur.fingerprint = excluded.fingerprint \
    AND cur.state = 'in_flight' AND cur.lease_until <= now() AND NOT coalesce(cur.graced, false) \
    AND NOT coalesce(cur.held, false) AND cur.token <> excluded.token)";

/// The names of the steps of row `cur`, in the order recorded (`steps` is a
/// JSON array of `{"n": name, "v": base64 of the result}`); an empty array
/// for none. Fills `{step_names}`.
const STEP_NAMES: &str = "ARRAY(SELECT s.step ->> 'n' FROM jsonb_array_elements(cur.steps) WITH ORDINALITY \
    AS s (step, i) ORDER BY s.i)";

/// The results of the steps of row `cur`, in the order of [`STEP_NAMES`],
/// decoded by the server. Fills `{step_values}`.
const STEP_VALUES: &str = "ARRAY(SELECT decode(s.step ->> 'v', 'base64') FROM jsonb_array_elements(cur.steps) \
    WITH ORDINALITY AS s (step, i) ORDER BY s.i)";

/// Each state filter of the operator's listing, as its condition on row
/// `cur`, in the order of [`Statements::list`]. Held is in flight and
/// `held` (see `schema.sql`).
const STATE_CONDITIONS: [&str; 5] = [
    "true",
    "cur.state = 'in_flight' AND NOT coalesce(cur.held, false)",
    "cur.state = 'in_flight' AND coalesce(cur.held, false)",
    "cur.state = 'completed'",
    "cur.state = 'released'",
];

/// The statements of one store, with its table name filled in.
#[derive(Clone)]
pub(super) struct Statements {
    pub(super) schema: Arc<str>,
    /// A call of the claim function that `schema` creates.
    pub(super) claim: Arc<str>,
    /// The same claim as one statement, for a schema without the function.
    pub(super) claim_inline: Arc<str>,
    pub(super) renew: Arc<str>,
    pub(super) renew_many: Arc<str>,
    pub(super) complete: Arc<str>,
    pub(super) release: Arc<str>,
    pub(super) record_step: Arc<str>,
    pub(super) get: Arc<str>,
    pub(super) purge: Arc<str>,
    /// The operator's listing, one per state filter: any state, in flight,
    /// held, completed, released (see [`Statements::list`]).
    list: [Arc<str>; 5],
    pub(super) find: Arc<str>,
    pub(super) settle: Arc<str>,
    /// Reads no row, and fails if the table lacks a column this version
    /// writes (a table `migrate()` has not brought up to date).
    pub(super) columns: Arc<str>,
}

impl Statements {
    pub(super) fn new(table: &TableName) -> Self {
        let (quoted, function) = (table.quoted(), table.claim_function());
        let fill = |sql: &str| -> String {
            sql.replace("{record}", include_str!("record.sql").trim_end())
                .replace("{table}", &quoted)
                .replace("{index}", &table.index())
                .replace("{in_flight_index}", &table.in_flight_index())
                .replace("{take}", TAKE_OVER)
                .replace("{hold}", HOLD)
                .replace("{lapsed}", LAPSED)
                .replace("{grace}", GRACE)
                .replace("{step_names}", STEP_NAMES)
                .replace("{step_values}", STEP_VALUES)
        };
        let render = |sql: &str| -> Arc<str> { fill(sql).into() };
        // The claim's two parts, in the function and in the one statement.
        let answer = fill(include_str!("claim_answer.sql"));
        let upsert = |guard: &str| fill(include_str!("claim_upsert.sql")).replace("{guard}", guard);
        let claim_function = fill(include_str!("claim_function.sql"))
            .replace("{claim_function}", &function)
            .replace("{answer}", answer.trim_end())
            .replace("{upsert}", upsert("").trim_end());
        let claim_inline = include_str!("claim.sql")
            .replace("{answer}", answer.trim_end())
            .replace("{upsert}", upsert("WHERE NOT EXISTS (SELECT 1 FROM seen)").trim_end());
        let list =
            STATE_CONDITIONS.map(|condition| render(&include_str!("list.sql").replace("{state_condition}", condition)));
        Self {
            schema: format!("{}{claim_function}", fill(include_str!("schema.sql"))).into(),
            claim: format!("SELECT * FROM {function}($1, $2, $3, $4, $5, $6, $7)").into(),
            claim_inline: claim_inline.into(),
            renew: render(include_str!("renew.sql")),
            renew_many: render(include_str!("renew_many.sql")),
            complete: render(include_str!("complete.sql")),
            release: render(include_str!("release.sql")),
            record_step: render(include_str!("record_step.sql")),
            get: render(include_str!("get.sql")),
            purge: render(include_str!("purge.sql")),
            list,
            find: render(include_str!("find.sql")),
            settle: render(include_str!("settle.sql")),
            columns: format!("SELECT attempt, graced, held, steps, route, claimed_at FROM {quoted} LIMIT 0").into(),
        }
    }

    /// The listing of records in `state` (any, for `None`).
    pub(super) fn list(&self, state: Option<StateName>) -> &Arc<str> {
        let at = match state {
            None => 0,
            Some(StateName::InFlight) => 1,
            Some(StateName::Held) => 2,
            Some(StateName::Completed) => 3,
            Some(StateName::Released) => 4,
        };
        &self.list[at]
    }
}

/// One of the rendered statements, ready for `sqlx::query`.
pub(super) fn sql(text: &Arc<str>) -> SqlStr {
    // Safe to assert: the only dynamic part is a table name that passed
    // `TableName::parse` (lower-case letters, digits, `_`) and is quoted.
    AssertSqlSafe(Arc::clone(text)).into_sql_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_schema_qualified_names() {
        let plain = TableName::parse("idem_records").unwrap();
        assert_eq!(plain.quoted(), "\"idem_records\"");
        assert_eq!(plain.index(), "\"idem_records_expires_at_idx\"");
        let qualified = TableName::parse("billing.idem_2").unwrap();
        assert_eq!(qualified.quoted(), "\"billing\".\"idem_2\"");
        assert_eq!(qualified.index(), "\"idem_2_expires_at_idx\"");
        assert_eq!(qualified.to_string(), "billing.idem_2");
        assert!(TableName::parse("_x").is_ok());
        assert!(TableName::parse("user").is_ok(), "reserved words are fine once quoted");
        assert!(TableName::parse(&"t".repeat(MAX_TABLE_LEN)).is_ok());
        assert!(TableName::parse(DEFAULT_TABLE) == Ok(TableName::default_table()));
    }

    #[test]
    fn refuses_anything_else() {
        for name in [
            "",
            ".",
            "a.",
            ".a",
            "a.b.c",
            "Idem",
            "1idem",
            "idem-records",
            "idem records",
            "idem\"; DROP TABLE x; --",
            "idem;",
            "\"idem\"",
            "idém",
        ] {
            let error = TableName::parse(name).unwrap_err();
            assert_eq!(error.name, name);
            assert!(error.to_string().contains("[a-z_][a-z0-9_]*"), "{error}");
        }
        assert!(TableName::parse(&"t".repeat(MAX_TABLE_LEN + 1)).is_err());
        assert!(TableName::parse(&format!("{}.t", "s".repeat(MAX_SCHEMA_LEN + 1))).is_err());
    }

    #[test]
    fn every_statement_names_the_table() {
        let statements = Statements::new(&TableName::parse("app.records").unwrap());
        assert!(statements.claim.contains("\"app\".\"records_claim_v4\"("), "{}", statements.claim);
        assert!(
            statements.schema.contains("CREATE OR REPLACE FUNCTION \"app\".\"records_claim_v4\"("),
            "{}",
            statements.schema
        );
        let lists = StateName::ALL.into_iter().map(Some).chain([None]).map(|state| statements.list(state));
        for sql in [
            &statements.schema,
            &statements.claim_inline,
            &statements.renew,
            &statements.renew_many,
            &statements.complete,
            &statements.release,
            &statements.record_step,
            &statements.get,
            &statements.purge,
            &statements.find,
            &statements.settle,
            &statements.columns,
        ]
        .into_iter()
        .chain(lists)
        {
            assert!(sql.contains("\"app\".\"records\""), "{sql}");
            for placeholder in [
                "{table}",
                "{index}",
                "{in_flight_index}",
                "{take}",
                "{hold}",
                "{lapsed}",
                "{grace}",
                "{answer}",
                "{upsert}",
                "{guard}",
                "{claim_function}",
                "{record}",
                "{step_names}",
                "{step_values}",
                "{state_condition}",
            ] {
                assert!(!sql.contains(placeholder), "{placeholder} left in {sql}");
            }
        }
        assert!(statements.schema.contains("\"records_expires_at_idx\""));
        assert!(statements.schema.contains("\"records_in_flight_idx\""));
    }

    /// The listings of executions in flight or held name the condition of
    /// the partial index of in-flight rows, so that the planner may use it
    /// whatever the other arguments; every listing filters as asked.
    #[test]
    fn each_listing_writes_out_its_state() {
        let statements = Statements::new(&TableName::default_table());
        for state in [StateName::InFlight, StateName::Held] {
            assert!(statements.list(Some(state)).contains("AND cur.state = 'in_flight' AND "), "{state}");
        }
        assert!(statements.list(Some(StateName::Held)).contains("AND coalesce(cur.held, false)"));
        assert!(statements.list(Some(StateName::InFlight)).contains("AND NOT coalesce(cur.held, false)"));
        assert!(statements.list(Some(StateName::Completed)).contains("AND cur.state = 'completed'"));
        assert!(statements.list(Some(StateName::Released)).contains("AND cur.state = 'released'"));
        assert!(statements.list(None).contains("AND true"));
        let distinct: std::collections::HashSet<&str> =
            StateName::ALL.into_iter().map(|state| &**statements.list(Some(state))).collect();
        assert_eq!(distinct.len(), StateName::ALL.len());
        assert!(
            statements.schema.contains("(claimed_at NULLS FIRST) WHERE state = 'in_flight'"),
            "the index the listings of in-flight rows read"
        );
    }

    /// The version of the claim function is in its name and in its one
    /// call; the arguments of the call match the function's.
    #[test]
    fn the_claim_function_is_version_four_with_seven_arguments() {
        let statements = Statements::new(&TableName::default_table());
        assert!(
            statements
                .schema
                .contains("\"idem_records_claim_v4\"(text, bytea, bytea, interval, interval, boolean, text)")
        );
        assert_eq!(&*statements.claim, "SELECT * FROM \"idem_records_claim_v4\"($1, $2, $3, $4, $5, $6, $7)");
        for earlier in ["_claim_v3", "_claim_v2", "_claim\""] {
            assert!(!statements.schema.contains(earlier), "an earlier version's function is left alone: {earlier}");
        }
    }
}
