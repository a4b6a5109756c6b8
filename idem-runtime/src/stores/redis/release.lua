-- Deletes an in-flight record, if the token still owns it.
-- KEYS[1]  the record
-- ARGV[1]  fencing token (16 bytes)
-- Returns 1 (held) or 0 (lost).
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
