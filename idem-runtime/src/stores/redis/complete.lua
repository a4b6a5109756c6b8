-- Stores the response of an in-flight record, if the token still owns it.
-- KEYS[1]  the record
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  encoded response (StoredResponse::to_bytes)
-- ARGV[3]  time to live in milliseconds, from now
-- Returns 1 (held) or 0 (lost). The token is dropped, so completion is final.
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then
  return 0
end
redis.call('HDEL', KEYS[1], 'tok')
redis.call('HSET', KEYS[1], 'resp', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
