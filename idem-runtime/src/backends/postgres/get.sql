-- Lookup of a live record (tombstones and lapsed leases included). $1 key.
SELECT
    fingerprint,
    state,
    token,
    (extract(epoch FROM greatest(lease_until - now(), interval '0')) * 1000000)::bigint AS lease_left_us,
    (extract(epoch FROM greatest(expires_at - now(), interval '0')) * 1000000)::bigint AS ttl_left_us,
    status,
    header_names,
    header_values,
    body
FROM {table}
WHERE key = $1 AND expires_at > now()
