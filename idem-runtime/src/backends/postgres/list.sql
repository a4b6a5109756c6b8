-- The operator's listing: live records in the state asked, claimed on route $1
-- (any, when NULL) longer than $2 ago (any age, when NULL), at most $3,
-- oldest first (records of an earlier version, whose claim time is not
-- known, first). Rendered once per state filter, so that the condition
-- on the state is written out: a listing of executions in flight or held
-- reads the partial index of in-flight rows (schema.sql) in its order and
-- stops at the limit; any other reads the whole table.
SELECT
{record}
FROM {table} AS cur
WHERE cur.expires_at > now()
    AND {state_condition}
    AND ($1::text IS NULL OR cur.route = $1::text)
    AND ($2::interval IS NULL OR cur.claimed_at < now() - $2::interval)
ORDER BY cur.claimed_at NULLS FIRST
LIMIT $3
