-- Claim, one statement. $1 key, $2 fingerprint, $3 new token, $4 lease,
-- $5 record TTL (at least the lease).
--
-- A replay, a 409 and a 422 are reads: `seen` is the key's row in the
-- statement's snapshot when it answers the claim by itself (a live record
-- of another request, a completed one, or one whose lease is running).
-- Such an answer stays true at the statement's time: a live record keeps
-- its fingerprint and a completed one its response until it expires. Then
-- nothing is inserted, no row is locked and no WAL is written.
--
-- Otherwise (no row, an expired one, a tombstone or a lapsed lease of the
-- same request) the claim writes. `attempt` records which execution a won
-- claim starts (`first`, `after_release` or `takeover`, from what the row
-- held), so that RETURNING, which sees only the new row, can tell it. A new
-- key is inserted. An existing key always goes through DO UPDATE, which
-- locks the row and sees its latest committed version (even one committed
-- after this statement began, at READ COMMITTED): the row is replaced by
-- our claim when it is past its TTL, or when it is a tombstone or a lapsed
-- lease of the same request; any other row (one that changed since the
-- snapshot) is rewritten with its own values (a no-op, HOT update). Either
-- way RETURNING yields exactly one row, and the token tells whether we own
-- it: exactly one of concurrent claimers wins.
--
-- `{take}` stands for that condition (filled in by sql.rs, TAKE_OVER):
--   cur.expires_at <= now()
--   OR (cur.fingerprint = excluded.fingerprint
--       AND (cur.state = 'released' OR (cur.state = 'in_flight' AND cur.lease_until <= now())))
WITH seen AS (
    SELECT fingerprint, state, lease_until, status, header_names, header_values, body, attempt
    FROM {table}
    WHERE key = $1
        AND expires_at > now()
        AND (fingerprint <> $2 OR state = 'completed' OR (state = 'in_flight' AND lease_until > now()))
), claimed AS (
    INSERT INTO {table} AS cur (key, fingerprint, state, token, lease_until, expires_at, attempt)
    SELECT $1, $2, 'in_flight', $3, now() + $4, now() + $5, 'first'
    WHERE NOT EXISTS (SELECT 1 FROM seen)
    ON CONFLICT (key) DO UPDATE SET
        fingerprint   = CASE WHEN {take} THEN excluded.fingerprint ELSE cur.fingerprint END,
        state         = CASE WHEN {take} THEN excluded.state ELSE cur.state END,
        token         = CASE WHEN {take} THEN excluded.token ELSE cur.token END,
        lease_until   = CASE WHEN {take} THEN excluded.lease_until ELSE cur.lease_until END,
        expires_at    = CASE WHEN {take} THEN excluded.expires_at ELSE cur.expires_at END,
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
        (extract(epoch FROM greatest(cur.lease_until - now(), interval '0')) * 1000000)::bigint AS lease_left_us,
        CASE WHEN cur.fingerprint = $2 THEN cur.status END AS status,
        CASE WHEN cur.fingerprint = $2 THEN cur.header_names END AS header_names,
        CASE WHEN cur.fingerprint = $2 THEN cur.header_values END AS header_values,
        CASE WHEN cur.fingerprint = $2 THEN cur.body END AS body
)
SELECT * FROM claimed
UNION ALL
SELECT
    false,
    attempt,
    fingerprint = $2,
    state,
    (extract(epoch FROM greatest(lease_until - now(), interval '0')) * 1000000)::bigint,
    -- The response is sent back only when it is going to be replayed.
    CASE WHEN fingerprint = $2 THEN status END,
    CASE WHEN fingerprint = $2 THEN header_names END,
    CASE WHEN fingerprint = $2 THEN header_values END,
    CASE WHEN fingerprint = $2 THEN body END
FROM seen
