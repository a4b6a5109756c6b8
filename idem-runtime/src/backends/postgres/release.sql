-- Release, fenced by the token (its lease running or not, held or not): the
-- record becomes a tombstone that keeps its fingerprint until expires_at,
-- and its steps: they record effects that happened, which the next
-- execution of the same request must not repeat. The same statement ends a
-- transactional handler's execution whose transaction was rolled back (it
-- runs on the store's own connections, after the rollback): the steps,
-- written outside that transaction, stay. $1 key, $2 token, $3 whether a
-- record held for an operator is released too (false: the runtime's own
-- release, which leaves a held execution held). One row affected =
-- released.
UPDATE {table}
SET state = 'released',
    token = NULL,
    lease_until = NULL,
    graced = NULL,
    held = NULL
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > now() AND ($3 OR held IS NOT TRUE)
