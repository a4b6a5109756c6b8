SELECT
    -- This very claim, sent again: its token is new to every other claim.
    -- Its token with another request is that request's claim: a mismatch.
    coalesce(cur.token = $3 AND cur.fingerprint = $2, false) AS acquired,
    cur.attempt,
    cur.fingerprint = $2 AS same_request,
    cur.state,
    cur.state = 'in_flight' AND coalesce(cur.held, false) AS held,
    -- Only the claim that holds a row says so (claim_upsert.sql).
    false AS newly_held,
    (extract(epoch FROM greatest(cur.lease_until - now(), interval '0')) * 1000000)::bigint AS lease_left_us,
    -- The response is sent back only when it is going to be replayed.
    CASE WHEN cur.fingerprint = $2 THEN cur.status END AS status,
    CASE WHEN cur.fingerprint = $2 THEN cur.header_names END AS header_names,
    CASE WHEN cur.fingerprint = $2 THEN cur.header_values END AS header_values,
    CASE WHEN cur.fingerprint = $2 THEN cur.body END AS body,
    -- The steps only to their own claim, sent again.
    CASE WHEN cur.token = $3 AND cur.fingerprint = $2 THEN {step_names} END AS step_names,
    CASE WHEN cur.token = $3 AND cur.fingerprint = $2 THEN {step_values} END AS step_values
FROM {table} AS cur
WHERE cur.key = $1
    AND cur.expires_at > now()
    AND (cur.fingerprint <> $2 OR cur.state = 'completed'
         OR (cur.state = 'in_flight' AND (cur.lease_until > now() OR coalesce(cur.held, false))))
