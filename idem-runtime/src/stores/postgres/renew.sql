-- Renew, fenced. $1 key, $2 token, $3 lease. One row affected = still held.
-- A lease that would outlive the record extends the record too.
UPDATE {table}
SET lease_until = greatest(lease_until, now() + $3),
    expires_at = greatest(expires_at, now() + $3)
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND lease_until > now()
