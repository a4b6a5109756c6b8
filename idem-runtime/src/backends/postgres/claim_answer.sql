SELECT
    -- This very claim, sent again: its token is new to every other claim.
    coalesce(token = $3, false) AS acquired,
    attempt,
    fingerprint = $2 AS same_request,
    state,
    (extract(epoch FROM greatest(lease_until - now(), interval '0')) * 1000000)::bigint AS lease_left_us,
    -- The response is sent back only when it is going to be replayed.
    CASE WHEN fingerprint = $2 THEN status END AS status,
    CASE WHEN fingerprint = $2 THEN header_names END AS header_names,
    CASE WHEN fingerprint = $2 THEN header_values END AS header_values,
    CASE WHEN fingerprint = $2 THEN body END AS body
FROM {table}
WHERE key = $1
    AND expires_at > now()
    AND (fingerprint <> $2 OR state = 'completed' OR (state = 'in_flight' AND lease_until > now()))
