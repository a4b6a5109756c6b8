
-- The claim (claim.sql calls it): one statement for the client, in which a
-- record that answers by itself (a replay, a 409, a 422) is only read, and
-- only a claim that must write runs the upsert. `$n` are the arguments:
-- $1 key, $2 fingerprint, $3 new token, $4 lease, $5 record TTL.
-- Dropped and made anew (in migrate's transaction: callers see one or the
-- other), so that a version that changes what it returns can replace it.
DROP FUNCTION IF EXISTS {claim_function}(text, bytea, bytea, interval, interval);
CREATE FUNCTION {claim_function}(text, bytea, bytea, interval, interval)
RETURNS TABLE (acquired boolean, attempt text, same_request boolean, state text, lease_left_us bigint,
               status integer, header_names text[], header_values bytea[], body bytea)
LANGUAGE plpgsql AS $claim$
#variable_conflict use_column
BEGIN
    RETURN QUERY {answer};
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY {upsert};
END
$claim$;
