-- Renew, fenced. $1 key, $2 token, $3 lease. One row affected = held.
-- Ownership is the token: a lease that ran out while nobody took the key
-- over is renewed back into life. A lease that would outlive the record
-- extends the record too; a record past its TTL is gone. A held row stays
-- held (its holder runs on, and may still complete): its lease_until
-- follows its expires_at (see schema.sql).
UPDATE {table}
SET lease_until = CASE WHEN coalesce(held, false) THEN greatest(expires_at, now() + $3)
                       ELSE greatest(lease_until, now() + $3) END,
    expires_at = greatest(expires_at, now() + $3),
    graced = NULL
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > now()
