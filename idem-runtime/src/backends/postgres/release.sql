-- Release, fenced by the token (its lease running or not, held or not): the
-- record becomes a tombstone that keeps its fingerprint until expires_at,
-- and its steps go (the next execution starts afresh). $1 key, $2 token.
-- One row affected = released.
UPDATE {table}
SET state = 'released',
    token = NULL,
    lease_until = NULL,
    graced = NULL,
    held = NULL,
    steps = NULL
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > now()
