-- Deletes at most $1 expired rows, oldest first, through the expires_at
-- index. Rows locked by a concurrent claim or sweeper are skipped; the outer
-- condition is re-checked on the latest row version, so a row taken over
-- meanwhile is kept.
DELETE FROM {table}
WHERE key IN (
    SELECT key
    FROM {table}
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
AND expires_at <= now()
