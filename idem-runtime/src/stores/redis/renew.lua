-- Extends the lease of an in-flight record, if the token still owns it.
-- KEYS[1]  the record
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  new lease in milliseconds, from now
-- Returns 1 (held) or 0 (lost). A lease that ran out took the record with
-- it, and a completed record has no token, so both are lost.
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
