#!lua flags=allow-oom
-- Extends the lease of an in-flight record, if the token still owns it.
-- KEYS[1]  the record
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  new lease in milliseconds, from now
-- Returns 1 (held) or 0 (lost).
-- allow-oom: a server at maxmemory must still keep (and end) the leases of
-- running handlers, or a retry would run them again once memory frees up.
-- New claims are still refused when memory is full (claim.lua has no flag).
-- A lease that ran out is lost even when
-- nobody took over; a completed or released record has no token. A lease
-- that would outlive the record extends the record too.
local record = redis.call('HMGET', KEYS[1], 'tok', 'lease')
if record[1] ~= ARGV[1] then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if (tonumber(record[2]) or 0) <= now then
  return 0
end
redis.call('HSET', KEYS[1], 'lease', string.format('%d', now + tonumber(ARGV[2])))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
