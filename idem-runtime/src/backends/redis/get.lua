-- Reads one record with the time it has left.
-- KEYS[1]  the record (layout.rs reads it)
-- Returns {0} when there is none, else {1, the record, PTTL in ms}.
local record = redis.call('GET', KEYS[1])
if not record then
  return {0}
end
return {1, record, redis.call('PTTL', KEYS[1])}
