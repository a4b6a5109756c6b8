-- Stores the response of an in-flight record, if the token still owns it.
-- KEYS[1]  the record
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  encoded response (StoredResponse::to_bytes)
-- ARGV[3]  time to live in milliseconds, from now
-- Returns 1 (held) or 0 (lost). The token and lease are dropped, so
-- completion is final; the token stays as `done`, so that the very same
-- completion sent again (same token, same response: its reply was lost, or
-- replicas did not acknowledge it in time) is answered 1 again, and written
-- again, so that a `WAIT` after it covers the record whichever connection
-- sends it. Any other completion of a completed record is refused.

-- The stored response is read only when it is needed: copying it into the
-- script for every completion cost Redis about 0.4 us.
local record = redis.call('HMGET', KEYS[1], 'tok', 'lease')
if record[1] ~= ARGV[1] then
  local done = redis.call('HMGET', KEYS[1], 'done', 'resp')
  if done[1] == ARGV[1] and done[2] == ARGV[2] then
    -- Written again by an expiry left as it is: a write that replicates
    -- (so a WAIT after it covers the record) and that a server at
    -- maxmemory still accepts.
    -- A record without expiry (PERSIST by hand, a restore) gets the TTL.
    local left = redis.call('PTTL', KEYS[1])
    redis.call('PEXPIRE', KEYS[1], left > 0 and left or ARGV[3])
    return 1
  end
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if (tonumber(record[2]) or 0) <= now then
  return 0
end
redis.call('HDEL', KEYS[1], 'tok', 'lease', 'att')
redis.call('HSET', KEYS[1], 'resp', ARGV[2], 'done', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
