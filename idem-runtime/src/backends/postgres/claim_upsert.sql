INSERT INTO {table} AS cur (key, fingerprint, state, token, lease_until, expires_at, attempt)
SELECT $1, $2, 'in_flight', $3, now() + $4, now() + $5, 'first'
{guard}
ON CONFLICT (key) DO UPDATE SET
    fingerprint   = CASE WHEN {take} THEN excluded.fingerprint ELSE cur.fingerprint END,
    state         = CASE WHEN {take} THEN excluded.state ELSE cur.state END,
    token         = CASE WHEN {take} THEN excluded.token ELSE cur.token END,
    lease_until   = CASE WHEN {take} THEN excluded.lease_until
                         WHEN {grace} THEN clock_timestamp() + greatest($4 / 2, interval '1 second')
                         ELSE cur.lease_until END,
    expires_at    = CASE WHEN {take} THEN excluded.expires_at
                         WHEN {grace} THEN greatest(cur.expires_at,
                                                    clock_timestamp() + greatest($4 / 2, interval '1 second'))
                         ELSE cur.expires_at END,
    graced        = CASE WHEN {take} THEN NULL WHEN {grace} THEN true ELSE cur.graced END,
    status        = CASE WHEN {take} THEN NULL ELSE cur.status END,
    header_names  = CASE WHEN {take} THEN NULL ELSE cur.header_names END,
    header_values = CASE WHEN {take} THEN NULL ELSE cur.header_values END,
    body          = CASE WHEN {take} THEN NULL ELSE cur.body END,
    attempt       = CASE WHEN NOT {take} THEN cur.attempt
                         WHEN cur.expires_at <= now() THEN 'first'
                         WHEN cur.state = 'released' THEN 'after_release'
                         ELSE 'takeover' END
RETURNING
    coalesce(cur.token = $3, false) AS acquired,
    cur.attempt,
    cur.fingerprint = $2 AS same_request,
    cur.state,
    (extract(epoch FROM greatest(cur.lease_until - clock_timestamp(), interval '0')) * 1000000)::bigint AS lease_left_us,
    CASE WHEN cur.fingerprint = $2 THEN cur.status END AS status,
    CASE WHEN cur.fingerprint = $2 THEN cur.header_names END AS header_names,
    CASE WHEN cur.fingerprint = $2 THEN cur.header_values END AS header_values,
    CASE WHEN cur.fingerprint = $2 THEN cur.body END AS body
