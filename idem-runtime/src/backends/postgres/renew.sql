-- Renew, fenced. $1 key, $2 token, $3 lease. One row affected = held.
-- Ownership is the token: a lease that ran out while nobody took the key
-- over is renewed back into life. A lease that would outlive the record
-- extends the record too; a record past its TTL is gone.
UPDATE {table}
SET lease_until = greatest(lease_until, now() + $3),
    expires_at = greatest(expires_at, now() + $3),
    graced = NULL
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > now()
