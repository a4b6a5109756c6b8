#!lua flags=allow-oom
-- Settles an execution for an operator (Operable::settle), if the record
-- is still as the operator inspected it: held by the token, in the state
-- named.
-- KEYS[1]  the record (layout.lua)
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  the state inspected: `in-flight` (in flight, graced or not) or
--          `held`
-- ARGV[3]  `release` (a tombstone that keeps the steps, as the holder's
--          release leaves), `forget` (a tombstone without them: the next
--          execution runs every step again) or `resolve` (completed with
--          the response in ARGV[4], the steps dropped)
-- ARGV[4]  in flight: `force` (settled whatever its lease), or the grace in
--          milliseconds to give a lapsed lease (below)
-- ARGV[5]  encoded response (StoredResponse::to_bytes), to resolve
-- Returns 1 (settled), 0 (the record changed, or is gone: nothing
-- written), {3, lease ms left} (in flight under a live lease or grace:
-- nothing written) or {6, grace ms} (its lease lapsed and this settle gave
-- its holder a grace: nothing else written). A settlement keeps the
-- record's expiry, its attempt, claim time and route.
--
-- An in-flight record is settled only as a claim takes a lapsed lease over
-- (claim.lua): the operator read it lapsed, but its holder's renewal may
-- have been on its way and have landed since, and a holder that never saw
-- its lease lapse goes on without reading its record. So the first settle
-- to find the lease lapsed gives its holder a grace (g, or G for an `L`
-- record, as claim.lua writes it), which a renewal ends (back to l); only
-- a settle after the grace applies.
-- allow-oom: an operator must be able to settle the stuck executions of a
-- server at maxmemory.
local value = redis.call('GET', KEYS[1])
local record = value and read(value)
if not record or record.token ~= ARGV[1] then
  return 0
end
local held = record.state == 'h'
local in_flight = record.state == 'l' or record.state == 'g'
if not ((ARGV[2] == 'held' and held) or (ARGV[2] == 'in-flight' and in_flight)) then
  return 0
end
if in_flight and ARGV[4] ~= 'force' then
  local left = redis.call('PTTL', KEYS[1])
  -- A record without expiry (PERSIST by hand, a restore): its lease is
  -- read as lapsed, and a grace gives it an end.
  local persisted = left == -1
  if persisted then
    left = record.mark
  end
  local lease_left = left - record.mark
  if lease_left > 0 then
    return {3, lease_left}
  end
  if record.state == 'l' then
    -- The grace, as claim.lua gives it: the lease runs `grace` from now.
    local grace = tonumber(ARGV[4])
    if left < grace or persisted then
      left = math.max(left, grace)
      redis.call('PEXPIRE', KEYS[1], left)
    end
    give_grace(value, record, left, grace)
    return {6, grace}
  end
end
if ARGV[3] == 'resolve' then
  redis.call('SET', KEYS[1], write(record, 'c', 0, ARGV[5]), 'KEEPTTL')
elseif ARGV[3] == 'release' then
  redis.call('SET', KEYS[1], write(record, 'r', 0, record.body), 'KEEPTTL')
elseif ARGV[3] == 'forget' then
  redis.call('SET', KEYS[1], write(record, 'r', 0, ''), 'KEEPTTL')
else
  return redis.error_reply('ERR unknown settlement')
end
return 1
