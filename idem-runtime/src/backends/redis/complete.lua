#!lua flags=allow-oom
-- Stores the response of an in-flight or held record, if it holds the
-- token, its lease running or not (ownership is the token: nobody took the
-- key over).
-- KEYS[1]  the record (layout.lua)
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  encoded response (StoredResponse::to_bytes)
-- ARGV[3]  time to live in milliseconds, from now
-- Returns 1 (held) or 0 (lost). The record becomes `c`: its header (the
-- fingerprint, the token, so that the very same completion sent again,
-- same token and same response, because its reply was lost or replicas
-- did not acknowledge it in time, is answered 1 again, and written again,
-- so that a `WAIT` after it covers the record whichever connection sends
-- it; the attempt, claim time and route, for operators), then the response
-- in place of the steps. Any other completion of a completed record is
-- refused.
-- allow-oom: a server at maxmemory must still complete running handlers,
-- or their retries would find them in flight until their leases end and
-- then run them again. New claims are refused when memory is full.
-- The common case first, before the layout's functions are even defined
-- (a script's whole text runs on every call): a record of this layout in
-- flight or held, under this token, becomes `c` by slicing its header,
-- without reading it into a table. `fenced` is the one fence check.
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local fenced = string.sub(value, 34, 49) == ARGV[1]
local state = string.sub(value, 1, 1)
if fenced and (state == 'l' or state == 'g' or state == 'h') then
  -- Read as read() reads it: a lease mark and a route length that are
  -- numbers, and the route within the value.
  local n = tonumber(string.sub(value, 79, 82))
  if n and tonumber(string.sub(value, 51, 65)) and #value >= 82 + n then
    -- The header as write(record, 'c', 0, ..) writes it: the state, bytes
    -- 2-50 (fingerprint, token, attempt), a zero lease mark, the claim
    -- time and route; then the response in place of the steps.
    redis.call('SET', KEYS[1], 'c' .. string.sub(value, 2, 50) .. '000000000000000' ..
      string.sub(value, 66, 82 + n) .. ARGV[2], 'PX', ARGV[3])
    return 1
  end
end
-- layout.lua
local record = read(value)
if not record or not fenced then
  return 0
end
if RUNNING[record.state] then
  redis.call('SET', KEYS[1], write(record, 'c', 0, ARGV[2]), 'PX', ARGV[3])
  return 1
end
if record.state == 'c' and record.body == ARGV[2] then
  -- Written again by an expiry left as it is: a write that replicates (so
  -- a WAIT after it covers the record). A record without expiry (PERSIST
  -- by hand, a restore) gets the TTL.
  local left = redis.call('PTTL', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], left > 0 and left or ARGV[3])
  return 1
end
return 0
