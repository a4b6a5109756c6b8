-- Renew, fenced. $1 key, $2 token, $3 lease. One row affected = still held.
UPDATE {table}
SET expires_at = now() + $3
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > now()
