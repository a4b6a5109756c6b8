#!lua flags=allow-oom
-- Turns an in-flight or held record into a tombstone, if it holds the
-- token (its lease running or not): the lease goes; the fingerprint, the
-- steps (effects that happened: the next execution of the same request
-- gets them back rather than repeat them) and, for operators, the attempt,
-- claim time and route stay until the record's expiry.
-- KEYS[1]  the record (layout.lua)
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  '1': a record held for an operator is released too; '0': it is
--          left held (the runtime's own release)
-- Returns 1 (held) or 0 (lost).
-- allow-oom: a server at maxmemory must still keep (and end) the leases of
-- running handlers, or a retry would run them again once memory frees up.
-- New claims are still refused when memory is full (claim.lua has no flag).
local value = redis.call('GET', KEYS[1])
local record = value and read(value)
if not record or not RUNNING[record.state] or record.token ~= ARGV[1] then
  return 0
end
if record.state == 'h' and ARGV[2] ~= '1' then
  return 0
end
redis.call('SET', KEYS[1], write(record, 'r', 0, record.body), 'KEEPTTL')
return 1
