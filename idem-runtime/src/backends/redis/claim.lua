-- Claims one idempotency record, or reports what holds it. The store first
-- claims with one plain `SET NX PX GET` (operations.rs), which answers a
-- free key and a completed record by itself; this script is the claim of a
-- record in flight or released, and of any key whose SET the server
-- refused (at maxmemory, without enough replicas, a record of the earlier
-- layout).
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
-- Byte 1 is the state (L in flight, G in flight with its lapse seen, C
-- completed, R released), bytes 2 to 33 the fingerprint; in flight, 34 to 49
-- the owner's token, 50 its attempt and from 51 the lease mark: the lease
-- holds while the key's PTTL is above it. Completed, 34 to 49 the
-- completing token and from 50 the response. The record's end is the key's
-- expiry, so a record past its TTL is a missing key and its key is simply
-- free. A record whose lease ran out, or that was released, keeps its
-- fingerprint: the same request takes it over, another one is refused. A
-- lapsed lease is taken over in two steps: the first claim to find it
-- lapsed gives its holder a grace (G), the first after the grace takes it.
local record = redis.pcall('GET', KEYS[1])
local attempt = 0
if type(record) == 'table' and record.err then
  -- Not a string: a record of the earlier layout (a hash with the fields
  -- fp, tok, lease as milliseconds of TIME, resp), during a rolling upgrade
  -- and until it expires. It is answered as that version would (a replay,
  -- a mismatch, in flight) and, to be acquired, replaced by a record of
  -- this layout; anything else is refused.
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return record
  end
  local old = redis.call('HMGET', KEYS[1], 'fp', 'resp', 'tok', 'lease')
  if not old[1] then
    return redis.error_reply('ERR not an idempotency record')
  end
  if old[1] ~= ARGV[1] then
    return {4}
  end
  if old[2] then
    return old[2]
  end
  if old[3] then
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local lease_end = tonumber(old[4]) or 0
    if lease_end > now then
      return {3, lease_end - now}
    end
    attempt = 2
  else
    attempt = 1
  end
  record = false
end
if record then
  local state, fp = string.sub(record, 1, 1), string.sub(record, 2, 33)
  if state == 'C' then
    if fp ~= ARGV[1] then
      return {4}
    end
    return string.sub(record, 50)
  end
  local mark = 0
  local in_flight = state == 'L' or state == 'G'
  if in_flight then
    mark = tonumber(string.sub(record, 51))
  elseif state ~= 'R' then
    return redis.error_reply('ERR not an idempotency record')
  end
  local left = redis.call('PTTL', KEYS[1])
  if left == -1 then
    -- A record without expiry (PERSIST by hand, a restore) would keep its
    -- fingerprint forever: give it its own claim's time to live (the mark
    -- plus a lease: its lease then runs a whole lease from now), or a
    -- tombstone this claim's.
    if in_flight then
      left = mark + tonumber(ARGV[3])
    else
      left = tonumber(ARGV[4])
    end
    redis.call('PEXPIRE', KEYS[1], left)
  end
  if fp ~= ARGV[1] then
    return {4}
  end
  if in_flight then
    if string.sub(record, 34, 49) == ARGV[2] then
      -- This very claim, sent again (the client retried it after a lost
      -- answer): its token is new to every claim, so the key is this
      -- one's, as the attempt it was, whatever is left of its lease.
      return tonumber(string.sub(record, 50, 50))
    end
    local lease_left = left - mark
    if lease_left > 0 then
      return {3, lease_left}
    end
    if state == 'L' then
      -- The lease ran out, and no claim had found it so: its holder may
      -- be alive and only cut off from this server (an outage longer than
      -- the lease). It gets a grace of half a lease (at least a second, as
      -- store.rs's `grace`) to renew or complete with its token (which takes
      -- the key back to `L`); only a claim after the grace takes it over.
      local grace = math.max(math.floor(tonumber(ARGV[3]) / 2), 1000)
      if left < grace then
        left = grace
        redis.call('PEXPIRE', KEYS[1], left)
      end
      redis.call('SET', KEYS[1], 'G' .. string.sub(record, 2, 50) .. string.format('%d', left - grace), 'KEEPTTL')
      return {3, grace}
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
