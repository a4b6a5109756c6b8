-- Turns an in-flight record into a tombstone, if the token still owns it:
-- the token and lease go, the fingerprint stays until the record's expiry.
-- KEYS[1]  the record
-- ARGV[1]  fencing token (16 bytes)
-- Returns 1 (held) or 0 (lost).
local record = redis.call('HMGET', KEYS[1], 'tok', 'lease')
if record[1] ~= ARGV[1] then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if (tonumber(record[2]) or 0) <= now then
  return 0
end
redis.call('HDEL', KEYS[1], 'tok', 'lease')
return 1
