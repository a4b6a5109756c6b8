-- Complete, fenced. $1 key, $2 token, $3 ttl, $4 status, $5 header names,
-- $6 header values, $7 body. One row affected = stored. Ownership is the
-- token, its lease running or not (nobody took the key over).
--
-- Also run inside the transaction of a transactional handler, where now()
-- is the time of BEGIN: the record's life is checked against the
-- statement's own start instead. Once this UPDATE holds the row, a concurrent claim waits
-- for the COMMIT and then finds the row completed. A held row completes as
-- any other. The steps go; the route, the claim's time and its attempt stay,
-- for operators.
UPDATE {table}
SET state = 'completed',
    token = NULL,
    lease_until = NULL,
    graced = NULL,
    held = NULL,
    steps = NULL,
    expires_at = statement_timestamp() + $3,
    status = $4,
    header_names = $5,
    header_values = $6,
    body = $7
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > statement_timestamp()
