-- Claims one idempotency record, or reports what holds it. The store first
-- claims with one plain `SET NX PX GET` (operations.rs), which answers a
-- free key and a completed record by itself; this script is the claim of a
-- record in flight or released, and of any record when the server is full.
-- KEYS[1]  the record, a string laid out as layout.rs describes
-- ARGV[1]  request fingerprint (32 bytes)
-- ARGV[2]  fencing token for a new owner (16 bytes)
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  record time to live in milliseconds, at least the lease
-- Returns the attempt, an integer, when it acquires the key (0 first, 1
-- after a release, 2 a takeover of a lapsed lease), the stored response
-- itself, a bulk string, for a replay, {3, lease ms left} in flight, {4}
-- mismatch.
--
-- Byte 1 is the state (L in flight, C completed, R released), bytes 2 to 33
-- the fingerprint; in flight, 34 to 49 the owner's token, 50 its attempt
-- and from 51 the lease mark: the lease holds while the key's PTTL is above
-- it. Completed, 34 to 49 the completing token and from 50 the response.
-- The record's end is the key's expiry, so a record past its TTL is a
-- missing key and its key is simply free. A record whose lease ran out, or
-- that was released, keeps its fingerprint: the same request takes it
-- over, another one is refused.
local record = redis.call('GET', KEYS[1])
local attempt = 0
if record then
  local state, fp = string.sub(record, 1, 1), string.sub(record, 2, 33)
  if state == 'C' then
    if fp ~= ARGV[1] then
      return {4}
    end
    return string.sub(record, 50)
  end
  local mark = 0
  if state == 'L' then
    mark = tonumber(string.sub(record, 51))
  elseif state ~= 'R' then
    return redis.error_reply('ERR not an idempotency record')
  end
  local left = redis.call('PTTL', KEYS[1])
  if left == -1 then
    -- A record without expiry (PERSIST by hand, a restore) would keep its
    -- fingerprint forever: give it this claim's time to live, and a lease
    -- in flight at least a whole lease from now.
    left = math.max(tonumber(ARGV[4]), mark + tonumber(ARGV[3]))
    redis.call('PEXPIRE', KEYS[1], left)
  end
  if fp ~= ARGV[1] then
    return {4}
  end
  if state == 'L' then
    local lease_left = left - mark
    if lease_left > 0 then
      if string.sub(record, 34, 49) == ARGV[2] then
        -- This very claim, sent again (the client retried it after a lost
        -- answer): its token is new to every claim, so the key is this
        -- one's, as the attempt it was.
        return tonumber(string.sub(record, 50, 50))
      end
      return {3, lease_left}
    end
    attempt = 2
  else
    attempt = 1
  end
end
local ttl = tonumber(ARGV[4])
redis.call('SET', KEYS[1], 'L' .. ARGV[1] .. ARGV[2] .. attempt .. string.format('%d', ttl - tonumber(ARGV[3])),
  'PX', ttl)
return attempt
