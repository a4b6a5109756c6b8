-- Claims one idempotency record, or reports what holds it. The store first
-- claims with one plain `SET NX PX GET` (operations.rs), which answers a
-- free key and a completed record by itself; this script is the claim of a
-- record in flight, held or released, and of any key whose SET the server
-- refused (at maxmemory, without enough replicas, a record of the earlier
-- layout).
-- KEYS[1]  the record, a string laid out as layout.lua describes
-- ARGV[1]  request fingerprint (32 bytes)
-- ARGV[2]  fencing token for a new owner (16 bytes)
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  record time to live in milliseconds, at least the lease
-- ARGV[5]  what a lapsed execution of the same request becomes after its
--          grace: `takeover` (taken over by this claim) or `hold` (held)
-- ARGV[6]  the claim time, route length and route of a record this claim
--          writes (bytes 66 on of layout.lua's header), as the store built
--          them: the claim time is the process's, kept for operators only
-- Returns {attempt, steps} when it acquires the key (attempt 0 first, 1
-- after a release, 2 a takeover of a lapsed lease; steps the ones its
-- predecessors recorded, as kept in the record: a lapsed lease's or a
-- tombstone's, kept in the new record too; empty for a first claim),
-- the stored response itself, a bulk string, for a replay, {3, lease ms
-- left} in flight, {4} mismatch, {5, 1} held by this claim, {5, 0} held
-- before it.
--
-- The record's end is the key's expiry, so a record past its TTL is a
-- missing key and its key is simply free. A record whose lease ran out, or
-- that was released, keeps its fingerprint: the same request takes it
-- over, another one is refused. A lapsed lease is taken over in two steps:
-- the first claim to find it lapsed gives its holder a grace (g; G for an
-- `L` record, which a process of the previous version holds), the first
-- after the grace takes it, or, under `hold`, holds it (h) for an operator.
local value = redis.pcall('GET', KEYS[1])
local attempt, steps = 0, ''
if type(value) == 'table' and value.err then
  -- Not a string: a record of the earlier layout (a hash with the fields
  -- fp, tok, lease as milliseconds of TIME, resp), during a rolling upgrade
  -- and until it expires. It is answered as that version would (a replay,
  -- a mismatch, in flight) and, to be acquired, replaced by a record of
  -- this layout; anything else is refused.
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return value
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
  value = false
end
if value then
  local record = read(value)
  if not record then
    return redis.error_reply('ERR not an idempotency record')
  end
  if record.state == 'c' then
    if record.fp ~= ARGV[1] then
      return {4}
    end
    return record.body
  end
  local running = RUNNING[record.state]
  local left = redis.call('PTTL', KEYS[1])
  if left == -1 then
    -- A record without expiry (PERSIST by hand, a restore) would keep its
    -- fingerprint forever: give it its own claim's time to live (the mark
    -- plus a lease: its lease then runs a whole lease from now), or a
    -- tombstone this claim's.
    if running then
      left = record.mark + tonumber(ARGV[3])
    else
      left = tonumber(ARGV[4])
    end
    redis.call('PEXPIRE', KEYS[1], left)
  end
  if record.fp ~= ARGV[1] then
    return {4}
  end
  if running then
    if record.token == ARGV[2] then
      -- This very claim, sent again (the client retried it after a lost
      -- answer): its token is new to every claim, so the key is this
      -- one's, as the attempt it was, whatever is left of its lease, with
      -- the steps recorded so far.
      return {tonumber(record.attempt), record.body}
    end
    if record.state == 'h' then
      -- Held: no claim runs it again, whatever its lapse policy says now.
      return {5, 0}
    end
    local lease_left = left - record.mark
    if lease_left > 0 then
      return {3, lease_left}
    end
    if record.state == 'l' then
      -- The lease ran out, and no claim had found it so: its holder may
      -- be alive and only cut off from this server (an outage longer than
      -- the lease). It gets a grace of half a lease (at least a second, as
      -- store.rs's `grace`) to renew or complete with its token (a renewal
      -- takes the record back to `l`); only a claim after the grace takes
      -- it over.
      local grace = math.max(math.floor(tonumber(ARGV[3]) / 2), 1000)
      if left < grace then
        left = grace
        redis.call('PEXPIRE', KEYS[1], left)
      end
      give_grace(value, record, left, grace)
      return {3, grace}
    end
    if ARGV[5] == 'hold' then
      -- Lapsed past its grace on a route that never runs an execution
      -- twice by itself: held, with its token and steps, for an operator
      -- (or its holder, if it was only slow) to settle. A `G` record (its
      -- holder a process of the previous version) is held as `h` too: a
      -- holder that did not renew within its grace is presumed dead, and
      -- one that was not could not complete an `h` record (its scripts
      -- answer lost); so routes are put under `hold` only once every
      -- process runs this version (docs/stores.md, upgrades).
      redis.call('SET', KEYS[1], write(record, 'h', record.mark, record.body), 'KEEPTTL')
      return {5, 1}
    end
    attempt, steps = 2, record.body
  else
    -- A tombstone: the steps its executions recorded (effects that
    -- happened) go on to this one, unless an operator released it
    -- forgetting them.
    attempt, steps = 1, record.body
  end
end
local ttl = tonumber(ARGV[4])
local mark = string.format('%015d', ttl - tonumber(ARGV[3]))
redis.call('SET', KEYS[1], 'l' .. ARGV[1] .. ARGV[2] .. attempt .. mark .. ARGV[6] .. steps, 'PX', ttl)
return {attempt, steps}
