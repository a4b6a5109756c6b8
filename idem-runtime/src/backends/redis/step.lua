-- Records a durable step's result in the record, if it holds the token (in
-- flight, its lease running or not, or held): one fenced append.
-- KEYS[1]  the record (layout.lua)
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  the step's name (at most 999 bytes)
-- ARGV[3]  its result
-- Returns 1 (held) or 0 (lost). A name already recorded keeps its first
-- result and is answered 1 (the same step sent again after a lost answer):
-- steps are recorded once, in the order they come, after the route.
-- No allow-oom: a step result may be large, and a server at maxmemory
-- refuses it (the step then fails) rather than grow past its bound.
local value = redis.call('GET', KEYS[1])
local record = value and read(value)
if not record or not RUNNING[record.state] or record.token ~= ARGV[1] then
  return 0
end
local steps, at = record.body, 1
while at <= #steps do
  local n = tonumber(string.sub(steps, at, at + 2))
  local m = n and tonumber(string.sub(steps, at + 3 + n, at + 12 + n))
  if not m then
    return redis.error_reply('ERR unreadable steps in an idempotency record')
  end
  if string.sub(steps, at + 3, at + 2 + n) == ARGV[2] then
    return 1
  end
  at = at + 13 + n + m
end
local step = string.format('%03d', #ARGV[2]) .. ARGV[2] .. string.format('%010d', #ARGV[3]) .. ARGV[3]
if string.sub(value, 1, 1) == record.state then
  -- This layout: the step goes at the end, in place (its expiry kept).
  redis.call('APPEND', KEYS[1], step)
else
  -- The upper-case layout: written again in this one.
  redis.call('SET', KEYS[1], write(record, record.state, record.mark, steps .. step), 'KEEPTTL')
end
return 1
