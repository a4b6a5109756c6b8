-- Renew many leases, fenced, one statement. $1 keys, $2 tokens, $3 leases
-- in microseconds, one array element per renewal. Returns the (key, token)
-- of each lease still held, now renewed; any other renewal is lost.
UPDATE {table} AS cur
SET lease_until = greatest(cur.lease_until, now() + renewal.lease_us * interval '1 microsecond'),
    expires_at = greatest(cur.expires_at, now() + renewal.lease_us * interval '1 microsecond')
FROM unnest($1::text[], $2::bytea[], $3::bigint[]) AS renewal (key, token, lease_us)
WHERE cur.key = renewal.key
    AND cur.state = 'in_flight'
    AND cur.token = renewal.token
    AND cur.lease_until > now()
RETURNING cur.key, cur.token
