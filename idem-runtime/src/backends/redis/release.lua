#!lua flags=allow-oom
-- Turns an in-flight record into a tombstone, if it holds the token (its
-- lease running or not): the token and lease go, the fingerprint stays until
-- the record's expiry.
-- KEYS[1]  the record (layout.rs, claim.lua)
-- ARGV[1]  fencing token (16 bytes)
-- Returns 1 (held) or 0 (lost).
-- allow-oom: a server at maxmemory must still keep (and end) the leases of
-- running handlers, or a retry would run them again once memory frees up.
-- New claims are still refused when memory is full (claim.lua has no flag).
local record = redis.call('GET', KEYS[1])
local state = record and string.sub(record, 1, 1)
if not record or (state ~= 'L' and state ~= 'G') or string.sub(record, 34, 49) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], 'R' .. string.sub(record, 2, 33), 'KEEPTTL')
return 1
