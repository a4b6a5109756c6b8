-- Claims one idempotency record, or reports what holds it.
-- KEYS[1]  the record (a hash)
-- ARGV[1]  request fingerprint (32 bytes)
-- ARGV[2]  fencing token for a new owner (16 bytes)
-- ARGV[3]  lease in milliseconds
-- Returns {1} acquired, {2, response} replay, {3, lease ms left} in flight,
-- {4} mismatch. An expired record is gone (Redis expires it), so its key
-- is simply free.
local record = redis.call('HMGET', KEYS[1], 'fp', 'resp')
local fp, resp = record[1], record[2]
if not fp then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'tok', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
if not resp and redis.call('PTTL', KEYS[1]) == -1 then
  -- An in-flight record without expiry (PERSIST by hand, a restore) would
  -- hold its key forever: give it one more lease, then it can be taken over.
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
if fp ~= ARGV[1] then
  return {4}
end
if resp then
  return {2, resp}
end
return {3, redis.call('PTTL', KEYS[1])}
