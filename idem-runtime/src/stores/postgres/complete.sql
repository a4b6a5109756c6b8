-- Complete, fenced. $1 key, $2 token, $3 ttl, $4 status, $5 header names,
-- $6 header values, $7 body. One row affected = stored.
UPDATE {table}
SET state = 'completed',
    token = NULL,
    lease_until = NULL,
    expires_at = now() + $3,
    status = $4,
    header_names = $5,
    header_values = $6,
    body = $7
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND lease_until > now()
