#!lua flags=allow-oom
-- Turns an in-flight record into a tombstone, if the token still owns it:
-- the token and lease go, the fingerprint stays until the record's expiry.
-- KEYS[1]  the record
-- ARGV[1]  fencing token (16 bytes)
-- Returns 1 (held) or 0 (lost).
-- allow-oom: a server at maxmemory must still keep (and end) the leases of
-- running handlers, or a retry would run them again once memory frees up.
-- New claims are still refused when memory is full (claim.lua has no flag).
local record = redis.call('HMGET', KEYS[1], 'tok', 'lease')
if record[1] ~= ARGV[1] then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if (tonumber(record[2]) or 0) <= now then
  return 0
end
redis.call('HDEL', KEYS[1], 'tok', 'lease', 'att')
return 1
