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
-- ARGV[4]  encoded response (StoredResponse::to_bytes), to resolve
-- Returns 1 (settled) or 0 (the record changed, or is gone: nothing
-- written). Either way the record keeps its expiry, its attempt, claim time
-- and route.
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
if ARGV[3] == 'resolve' then
  redis.call('SET', KEYS[1], write(record, 'c', 0, ARGV[4]), 'KEEPTTL')
elseif ARGV[3] == 'release' then
  redis.call('SET', KEYS[1], write(record, 'r', 0, record.body), 'KEEPTTL')
elseif ARGV[3] == 'forget' then
  redis.call('SET', KEYS[1], write(record, 'r', 0, ''), 'KEEPTTL')
else
  return redis.error_reply('ERR unknown settlement')
end
return 1
