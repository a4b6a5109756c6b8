-- Reads one record with the time it has left.
-- KEYS[1]  the record
-- Returns {0} when there is none; {1, fingerprint, token, lease ms left,
-- ms left} in flight (lease ms left is 0 once the lease ran out);
-- {2, fingerprint, response, ms left} completed; {3, fingerprint, ms left}
-- released. The reply holds no nil or false, which RESP2 and RESP3 would
-- encode differently.
local record = redis.call('HMGET', KEYS[1], 'fp', 'tok', 'lease', 'resp')
local fp, tok, lease_end, resp = record[1], record[2], tonumber(record[3]) or 0, record[4]
if not fp then
  return {0}
end
local left = redis.call('PTTL', KEYS[1])
if resp then
  return {2, fp, resp, left}
end
if tok then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  return {1, fp, tok, math.max(lease_end - now, 0), left}
end
return {3, fp, left}
