-- Lookup of a live record. $1 key.
SELECT
    fingerprint,
    state,
    token,
    (extract(epoch FROM greatest(expires_at - now(), interval '0')) * 1000000)::bigint AS left_us,
    status,
    header_names,
    header_values,
    body
FROM {table}
WHERE key = $1 AND expires_at > now()
