
-- The claim (claim.sql calls it): one statement for the client, in which a
-- record that answers by itself (a replay, a 409, a 422, a held execution)
-- is only read; a claim that must write runs a plain insert, or, when a
-- row is there, the upsert. `$n` are
-- the arguments: $1 key, $2 fingerprint, $3 new token, $4 lease, $5 record
-- TTL, $6 whether a lapsed execution is held rather than taken over
-- (on_lapse = 'hold'), $7 the claiming route.
-- Replaced in place, so that grants given on it survive `migrate()`. A
-- build whose claim answers differ takes a new name (sql.rs,
-- `claim_function`): a process of the previous build that migrates again
-- then replaces its own function, never this one. (A version that changes
-- what it returns must drop it first, or take a new name: CREATE OR
-- REPLACE cannot change a function's result type.)
CREATE OR REPLACE FUNCTION {claim_function}(text, bytea, bytea, interval, interval, boolean, text)
RETURNS TABLE (acquired boolean, attempt text, same_request boolean, state text, held boolean,
               newly_held boolean, lease_left_us bigint, status integer, header_names text[],
               header_values bytea[], body bytea, step_names text[], step_values bytea[])
LANGUAGE plpgsql AS $claim$
#variable_conflict use_column
BEGIN
    RETURN QUERY {answer};
    IF FOUND THEN
        RETURN;
    END IF;
    -- A key without a row, as most claims that write find it: a plain
    -- insert, which leaves the upsert's conditions and its returned
    -- expressions unevaluated (a fifth of the database's time per claim).
    -- Any row there (one the answer skipped: expired, a tombstone, a lapsed
    -- lease; or one inserted since the answer's snapshot) makes it insert
    -- nothing, and the upsert decides, as it always did.
    INSERT INTO {table} (key, fingerprint, state, token, lease_until, expires_at, attempt, route, claimed_at)
    VALUES ($1, $2, 'in_flight', $3, now() + $4, now() + $5, 'first', $7, now())
    ON CONFLICT (key) DO NOTHING;
    IF FOUND THEN
        -- What the upsert returns for the row it inserts.
        RETURN QUERY SELECT true, 'first'::text, true, 'in_flight'::text, false, false,
            (extract(epoch FROM greatest(now() + $4 - clock_timestamp(), interval '0')) * 1000000)::bigint,
            NULL::integer, NULL::text[], NULL::bytea[], NULL::bytea, '{}'::text[], '{}'::bytea[];
        RETURN;
    END IF;
    RETURN QUERY {upsert};
END
$claim$;
