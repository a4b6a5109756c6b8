-- Renew many leases, fenced, one statement. $1 keys, $2 tokens, $3 leases
-- in microseconds, one array element per renewal. Answers each renewal's
-- (key, token) with its fence:
--   'held'     the record holds the token (its lease running or not, held
--              or not): renewed;
--   'lost'     it does not (taken over, completed, released, past its TTL);
--   'unknown'  it did as of this statement's snapshot, but its row is locked
--              by another transaction (a transactional completion waiting on
--              its COMMIT, say): skipped, not waited for, so that one locked
--              row delays only its own renewal, never the batch's.
WITH renewal AS (
    SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[]) AS renewal (key, token, lease_us)
), mine AS (
    SELECT cur.key
    FROM {table} AS cur
    JOIN renewal ON cur.key = renewal.key AND cur.token = renewal.token
    WHERE cur.state = 'in_flight' AND cur.expires_at > now()
    FOR UPDATE OF cur SKIP LOCKED
), renewed AS (
    UPDATE {table} AS cur
    -- A held row stays held, its lease_until following its expires_at
    -- (see renew.sql).
    SET lease_until = CASE WHEN coalesce(cur.held, false)
                           THEN greatest(cur.expires_at, now() + renewal.lease_us * interval '1 microsecond')
                           ELSE greatest(cur.lease_until, now() + renewal.lease_us * interval '1 microsecond') END,
        expires_at = greatest(cur.expires_at, now() + renewal.lease_us * interval '1 microsecond'),
        graced = NULL
    FROM renewal
    WHERE cur.key IN (SELECT key FROM mine)
        AND cur.key = renewal.key
        AND cur.token = renewal.token
    RETURNING cur.key, cur.token
)
SELECT renewal.key,
       renewal.token,
       CASE WHEN renewed.key IS NOT NULL THEN 'held'
            WHEN seen.key IS NOT NULL THEN 'unknown'
            ELSE 'lost' END AS fence
FROM renewal
LEFT JOIN renewed ON renewed.key = renewal.key AND renewed.token = renewal.token
LEFT JOIN {table} AS seen
    ON seen.key = renewal.key
    AND seen.token = renewal.token
    AND seen.state = 'in_flight'
    AND seen.expires_at > now()
