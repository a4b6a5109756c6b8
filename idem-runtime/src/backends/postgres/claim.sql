-- Claim, one statement. $1 key, $2 fingerprint, $3 new token, $4 lease,
-- $5 record TTL (at least the lease), $6 whether a lapsed execution is held
-- rather than taken over (on_lapse = 'hold'), $7 the claiming route.
--
-- The store calls the claim function that `migrate()` creates
-- (claim_function.sql), as `SELECT * FROM <table>_claim_v4($1, ..., $7)`.
-- This statement does the same in one SQL statement, for a database whose
-- schema lacks the function (the store falls back to it, and says so).
-- Both are made of the same two parts (the function puts a plain insert
-- between them, for a key without a row, and goes on to the upsert only
-- when that inserts nothing):
--
-- The answer (claim_answer.sql): the key's row when it answers the claim
-- by itself (a live record of another request, a completed one, one whose
-- lease is running, or a held one). Such an answer stays true at the
-- statement's time: a live record keeps its fingerprint and a completed one
-- its response until it expires, and a held one stays held until its
-- holder or an operator ends it. A replay, a 409 and a 422 are reads:
-- nothing is inserted, no row is locked and no WAL is written.
--
-- A grace is counted from `clock_timestamp()`, when the row was taken, not
-- from `now()`, when the statement began: a claim that waited for the row's
-- lock (another transaction held it, and the holder's renewals skipped it)
-- must give the holder a whole grace from then. Every other time is `now()`,
-- which is earlier, so a late claim judges a lease as more alive, never
-- less.
--
-- The upsert (claim_upsert.sql), when there is no such row (no row, an
-- expired one, a tombstone or a lapsed lease of the same request): the
-- claim writes. `attempt` records which execution a won claim starts
-- (`first`, `after_release` or `takeover`, from what the row held), so
-- that RETURNING, which sees only the new row, can tell it. A new
-- key is inserted. An existing key always goes through DO UPDATE, which
-- locks the row and sees its latest committed version (even one committed
-- after this statement began, at READ COMMITTED): the row is replaced by
-- our claim when it is past its TTL (its steps dropped), or when it is a
-- tombstone or a lapsed lease of the same request whose holder had its
-- grace (the claim keeps the steps recorded before it); with $6, such a
-- lapsed lease is held instead (`held`, its lease_until set to its
-- expires_at, so that a claim of an earlier version sees a live lease); a
-- lapsed lease no claim had found so gets the grace instead (its lease
-- extended by half the claim's lease, `graced` set: the holder may only
-- have been cut off from the database); any other row (one that changed
-- since the snapshot, or this claim's own, sent again) is rewritten with
-- its own values (a no-op, HOT update). Either way RETURNING yields
-- exactly one row, and the token tells whether we own it (with the
-- fingerprint: our token on another request's row is that request's):
-- exactly one of concurrent claimers wins, and exactly one of them holds
-- a lapsed execution.
--
-- The conditions are sql.rs's TAKE_OVER, HOLD and GRACE:
--   take over: cur.expires_at <= now()
--              OR (cur.fingerprint = excluded.fingerprint AND cur.state = 'released')
--              OR (LAPSED AND NOT $6)
--   hold:      cur.expires_at > now() AND LAPSED AND $6
--   LAPSED:    the same request, in flight and not held, cur.lease_until <= now(),
--              cur.graced, and cur.token <> excluded.token
-- and the grace's is the same lapsed lease of the same request, not yet
-- graced (nor held).
WITH seen AS (
    {answer}
), claimed AS (
    {upsert}
)
SELECT * FROM claimed
UNION ALL
SELECT * FROM seen
