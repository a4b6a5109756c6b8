-- An operator's settlement, fenced by what the operator inspected: the
-- record is in flight with token $2, held if $3 (not held if not $3), and
-- live. With a status ($4), it is resolved: completed with that response
-- ($4 status, $5 header names, $6 header values, $7 body), keeping its
-- expires_at, its steps gone; without one, it is released: a tombstone, as
-- its holder's release leaves, that keeps its steps unless $8 (forget
-- them: the next execution runs every step again). $1 key.
--
-- In flight (not held), unless forced ($9 NULL), it is settled only as a
-- claim takes a lapsed lease over (claim_upsert.sql): the operator read it
-- lapsed, but its holder's renewal may have landed since, and a holder
-- that never saw its lease lapse goes on without reading its row. So a
-- live lease (a grace included) is refused as running; the first settle
-- to find it lapsed gives its holder a grace of $9 (`graced`,
-- which a renewal ends) and writes nothing else; one after the grace
-- applies.
--
-- One row: `outcome` ('settle', 'running' or 'grace') and `left_ms` (the
-- lease left, running); no row = the record changed (or is gone).
WITH inspected AS (
    SELECT key,
           CASE WHEN $3 OR $9::interval IS NULL THEN 'settle'
                WHEN lease_until > now() THEN 'running'
                WHEN coalesce(graced, false) THEN 'settle'
                ELSE 'grace' END AS outcome,
           greatest(lease_until - now(), interval '0') AS lease_left
    FROM {table}
    WHERE key = $1
        AND state = 'in_flight'
        AND token = $2
        AND coalesce(held, false) = $3
        AND expires_at > now()
    FOR UPDATE
), written AS (
    UPDATE {table} AS cur
    SET state = CASE WHEN i.outcome = 'grace' THEN cur.state
                     WHEN $4::integer IS NULL THEN 'released' ELSE 'completed' END,
        token = CASE WHEN i.outcome = 'grace' THEN cur.token END,
        lease_until = CASE WHEN i.outcome = 'grace' THEN clock_timestamp() + $9::interval END,
        expires_at = CASE WHEN i.outcome = 'grace'
                          THEN greatest(cur.expires_at, clock_timestamp() + $9::interval)
                          ELSE cur.expires_at END,
        graced = CASE WHEN i.outcome = 'grace' THEN true END,
        held = CASE WHEN i.outcome = 'grace' THEN cur.held END,
        steps = CASE WHEN i.outcome = 'grace' OR ($4::integer IS NULL AND NOT $8::boolean) THEN cur.steps END,
        status = CASE WHEN i.outcome = 'grace' THEN cur.status ELSE $4::integer END,
        header_names = CASE WHEN i.outcome = 'grace' THEN cur.header_names ELSE $5 END,
        header_values = CASE WHEN i.outcome = 'grace' THEN cur.header_values ELSE $6 END,
        body = CASE WHEN i.outcome = 'grace' THEN cur.body ELSE $7 END
    FROM inspected AS i
    WHERE cur.key = i.key AND i.outcome <> 'running'
    RETURNING cur.key
)
SELECT outcome, (extract(epoch FROM lease_left) * 1000)::bigint AS left_ms
FROM inspected
