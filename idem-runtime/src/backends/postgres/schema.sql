-- The idempotency records of one PostgresStore. `{table}` and `{index}` are
-- validated, quoted identifiers. Safe to run again: IF NOT EXISTS throughout.
CREATE TABLE IF NOT EXISTS {table} (
    -- StorageKey::as_str(): injective encoding of (version, scope, subject,
    -- method, route, idempotency key).
    key           text        PRIMARY KEY,
    -- SHA-256 of the request that claimed the key; kept until expires_at,
    -- whatever the state.
    fingerprint   bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    state         text        NOT NULL CHECK (state IN ('in_flight', 'completed', 'released')),
    -- The owner's fencing token (16 bytes) while in flight, else NULL.
    token         bytea       CHECK (octet_length(token) = 16),
    -- End of the owner's lease while in flight, else NULL. A lease whose
    -- lease_until is not after now() has lapsed: its token owns nothing.
    lease_until   timestamptz,
    -- End of the record (its TTL), never before lease_until. A row whose
    -- expires_at is not after now() counts as absent.
    expires_at    timestamptz NOT NULL,
    -- The stored response (completed rows only): status, headers in order
    -- (a multi-valued header once per value), body byte for byte.
    status        integer     CHECK (status BETWEEN 0 AND 65535),
    header_names  text[],
    header_values bytea[],
    body          bytea,
    -- Which execution the last won claim started: 'first', 'after_release'
    -- or 'takeover' (the execution context's attempt).
    attempt       text,
    -- A claim found the lease lapsed and gave its holder a grace (the lease
    -- extended by half a claim's lease): the next claim after the grace
    -- takes over. A renewal ends the grace (NULL again).
    graced        boolean,
    -- In flight only: a claim under on_lapse = 'hold' found the lease lapsed
    -- past its grace and held the execution for an operator: no claim takes
    -- it over. A held row's lease_until is its expires_at, so that a claim
    -- of an earlier version (which knows nothing of this column) sees a live
    -- lease and never takes it over; this version decides by this column.
    -- (On any other state it means nothing: an earlier version's completion
    -- or release leaves it as it was.)
    held          boolean,
    -- In flight or released: the durable steps the execution (and those it
    -- took over from, or claimed the key after a release of) recorded, in
    -- order: [{"n": name, "v": base64 of the result}, ...]. A release keeps
    -- them for the next execution of the same request (their effects
    -- happened); a completion, or an operator's release that forgets them,
    -- clears them. (On a completed row they mean nothing: an earlier
    -- version's completion leaves them as they were.)
    steps         jsonb,
    -- For operators: the route that claimed the key ('POST /orders'), and
    -- when its execution was claimed (the database's clock). Kept once
    -- completed or released.
    route         text,
    claimed_at    timestamptz,
    CHECK ((state = 'in_flight') = (token IS NOT NULL)),
    CHECK ((state = 'in_flight') = (lease_until IS NOT NULL)),
    CHECK (lease_until <= expires_at),
    CHECK (state <> 'completed' OR (status IS NOT NULL AND body IS NOT NULL
        AND coalesce(cardinality(header_names) = cardinality(header_values), false)))
) WITH (fillfactor = 90);
-- fillfactor leaves room on each page so that renewals and claims of live
-- keys are HOT updates.

-- A table made by an earlier version gains the columns it lacks (checked
-- first, so that a table that has them takes no lock). Nullable, without a
-- default: adding one rewrites nothing.
DO $$
DECLARE
    added record;
BEGIN
    FOR added IN SELECT * FROM (VALUES ('attempt', 'text'), ('graced', 'boolean'), ('held', 'boolean'),
                                       ('steps', 'jsonb'), ('route', 'text'), ('claimed_at', 'timestamptz'))
                               AS wanted (name, type)
                 WHERE NOT EXISTS (SELECT 1 FROM pg_attribute
                                   WHERE attrelid = '{table}'::regclass AND attname = wanted.name
                                       AND NOT attisdropped)
    LOOP
        EXECUTE format('ALTER TABLE {table} ADD COLUMN %I %s', added.name, added.type);
    END LOOP;
END
$$;

-- Used by purge_expired: the oldest expired rows first, without a scan.
CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at);

-- Used by the operator's listing (Operable::list) of executions in flight or
-- held, oldest first. It holds those rows only, so it stays small; writes
-- that change the state (a claim, a completion, a release) update it, the
-- others (renewals, steps, refusals) leave it alone. Built once when a table
-- of an earlier version is migrated: the build reads the whole table, and
-- writes to it wait meanwhile.
CREATE INDEX IF NOT EXISTS {in_flight_index} ON {table} (claimed_at NULLS FIRST) WHERE state = 'in_flight';
