INSERT INTO {table} AS cur (key, fingerprint, state, token, lease_until, expires_at, attempt, route, claimed_at)
SELECT $1, $2, 'in_flight', $3, now() + $4, now() + $5, 'first', $7, now()
{guard}
ON CONFLICT (key) DO UPDATE SET
    fingerprint   = CASE WHEN {take} THEN excluded.fingerprint ELSE cur.fingerprint END,
    state         = CASE WHEN {take} THEN excluded.state ELSE cur.state END,
    token         = CASE WHEN {take} THEN excluded.token ELSE cur.token END,
    lease_until   = CASE WHEN {take} THEN excluded.lease_until
                         WHEN {grace} THEN clock_timestamp() + greatest($4 / 2, interval '1 second')
                         WHEN {hold} THEN cur.expires_at
                         ELSE cur.lease_until END,
    expires_at    = CASE WHEN {take} THEN excluded.expires_at
                         WHEN {grace} THEN greatest(cur.expires_at,
                                                    clock_timestamp() + greatest($4 / 2, interval '1 second'))
                         ELSE cur.expires_at END,
    -- On a held row, `graced` tells RETURNING whether this claim held it:
    -- true as the claim that held it left it, NULL once another claim met
    -- it here (one that raced it, its answer read before the row was held).
    graced        = CASE WHEN {take} THEN NULL WHEN {grace} OR {hold} THEN true
                         WHEN coalesce(cur.held, false) THEN NULL ELSE cur.graced END,
    held          = CASE WHEN {take} THEN NULL WHEN {hold} THEN true ELSE cur.held END,
    -- A takeover keeps the steps of the execution it takes over, and a
    -- claim after a release those the tombstone kept (their effects
    -- happened); a key claimed afresh (its record expired) starts with none.
    steps         = CASE WHEN NOT {take} THEN cur.steps
                         WHEN cur.expires_at > now() AND cur.state IN ('in_flight', 'released') THEN cur.steps END,
    route         = CASE WHEN {take} THEN excluded.route ELSE cur.route END,
    claimed_at    = CASE WHEN {take} THEN excluded.claimed_at ELSE cur.claimed_at END,
    status        = CASE WHEN {take} THEN NULL ELSE cur.status END,
    header_names  = CASE WHEN {take} THEN NULL ELSE cur.header_names END,
    header_values = CASE WHEN {take} THEN NULL ELSE cur.header_values END,
    body          = CASE WHEN {take} THEN NULL ELSE cur.body END,
    attempt       = CASE WHEN NOT {take} THEN cur.attempt
                         WHEN cur.expires_at <= now() THEN 'first'
                         WHEN cur.state = 'released' THEN 'after_release'
                         ELSE 'takeover' END
RETURNING
    coalesce(cur.token = $3 AND cur.fingerprint = $2, false) AS acquired,
    cur.attempt,
    cur.fingerprint = $2 AS same_request,
    cur.state,
    cur.state = 'in_flight' AND coalesce(cur.held, false) AS held,
    cur.state = 'in_flight' AND coalesce(cur.held, false) AND coalesce(cur.graced, false) AS newly_held,
    (extract(epoch FROM greatest(cur.lease_until - clock_timestamp(), interval '0')) * 1000000)::bigint AS lease_left_us,
    CASE WHEN cur.fingerprint = $2 THEN cur.status END AS status,
    CASE WHEN cur.fingerprint = $2 THEN cur.header_names END AS header_names,
    CASE WHEN cur.fingerprint = $2 THEN cur.header_values END AS header_values,
    CASE WHEN cur.fingerprint = $2 THEN cur.body END AS body,
    CASE WHEN cur.token = $3 AND cur.fingerprint = $2 THEN {step_names} END AS step_names,
    CASE WHEN cur.token = $3 AND cur.fingerprint = $2 THEN {step_values} END AS step_values
