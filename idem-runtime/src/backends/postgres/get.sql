-- Lookup of a live record (tombstones, lapsed leases and held executions
-- included). $1 key.
SELECT
{record}
FROM {table} AS cur
WHERE cur.key = $1 AND cur.expires_at > now()
