#!lua flags=allow-oom
-- Extends the lease of an in-flight record, if it holds the token.
-- KEYS[1]  the record (layout.lua)
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  new lease in milliseconds, from now
-- Returns 1 (held) or 0 (lost).
-- allow-oom: a server at maxmemory must still keep (and end) the leases of
-- running handlers, or a retry would run them again once memory frees up.
-- New claims are still refused when memory is full (claim.lua has no flag).
-- Ownership is the token: a lease that ran out while nobody took the key
-- over (the store was unreachable for longer than the lease) is renewed
-- back into life by its holder. A completed or released record has no
-- owner. A lease that would outlive the record extends the record too.
-- A held record stays held: its holder runs on (and may still complete),
-- its lease mark no longer matters, and only its life is extended.
local value = redis.call('GET', KEYS[1])
local record = value and read(value)
if not record or not RUNNING[record.state] or record.token ~= ARGV[1] then
  return 0
end
local lease = tonumber(ARGV[2])
local left = redis.call('PTTL', KEYS[1])
if left == -1 then
  -- A key without expiry (PERSIST by hand) cannot tell its lease: the
  -- owner's token still holds it. It gets its claim's time to live again.
  left = record.mark + lease
  redis.call('PEXPIRE', KEYS[1], left)
elseif left < lease then
  left = lease
  redis.call('PEXPIRE', KEYS[1], left)
end
if record.state == 'h' then
  return 1
end
-- Back to `l`, its steps kept: a grace a claim gave (g) ends, the holder
-- being alive.
redis.call('SET', KEYS[1], write(record, 'l', left - lease, record.body), 'KEEPTTL')
return 1
