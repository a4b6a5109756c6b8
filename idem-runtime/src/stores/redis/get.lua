-- Reads one record with the time it has left.
-- KEYS[1]  the record
-- Returns nil when there is none, else {fingerprint, token or nil,
-- response or nil, ms left}.
local record = redis.call('HMGET', KEYS[1], 'fp', 'tok', 'resp')
if not record[1] then
  return false
end
return {record[1], record[2], record[3], redis.call('PTTL', KEYS[1])}
