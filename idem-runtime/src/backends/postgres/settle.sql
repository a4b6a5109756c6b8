-- An operator's settlement, fenced by what the operator inspected: the
-- record is in flight with token $2, held if $3 (not held if not $3), and
-- live. With a status ($4), it is resolved: completed with that response
-- ($4 status, $5 header names, $6 header values, $7 body), keeping its
-- expires_at, its steps gone; without one, it is released: a tombstone, as
-- its holder's release leaves, that keeps its steps unless $8 (forget
-- them: the next execution runs every step again). $1 key. One row
-- affected = settled.
UPDATE {table}
SET state = CASE WHEN $4::integer IS NULL THEN 'released' ELSE 'completed' END,
    token = NULL,
    lease_until = NULL,
    graced = NULL,
    held = NULL,
    steps = CASE WHEN $4::integer IS NULL AND NOT $8::boolean THEN steps END,
    status = $4::integer,
    header_names = $5,
    header_values = $6,
    body = $7
WHERE key = $1
    AND state = 'in_flight'
    AND token = $2
    AND coalesce(held, false) = $3
    AND expires_at > now()
