-- The idempotency records of one PostgresStore. `{table}` and `{index}` are
-- validated, quoted identifiers. Safe to run again: IF NOT EXISTS throughout.
CREATE TABLE IF NOT EXISTS {table} (
    -- StorageKey::as_str(): injective encoding of (version, scope, subject,
    -- method, route, idempotency key).
    key           text        PRIMARY KEY,
    -- SHA-256 of the request that claimed the key.
    fingerprint   bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    state         text        NOT NULL CHECK (state IN ('in_flight', 'completed')),
    -- The owner's fencing token (16 bytes) while in flight, NULL once completed.
    token         bytea       CHECK (octet_length(token) = 16),
    -- End of the lease while in flight, end of the TTL once completed. A row
    -- whose expires_at is not after now() counts as absent.
    expires_at    timestamptz NOT NULL,
    -- The stored response (completed rows only): status, headers in order
    -- (a multi-valued header once per value), body byte for byte.
    status        integer     CHECK (status BETWEEN 0 AND 65535),
    header_names  text[],
    header_values bytea[],
    body          bytea,
    CHECK ((state = 'in_flight') = (token IS NOT NULL)),
    CHECK (state = 'in_flight' OR (status IS NOT NULL AND body IS NOT NULL
        AND coalesce(cardinality(header_names) = cardinality(header_values), false)))
) WITH (fillfactor = 90);
-- fillfactor leaves room on each page so that renewals and claims of live
-- keys are HOT updates.

-- Used by purge_expired: the oldest expired rows first, without a scan.
CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at);
