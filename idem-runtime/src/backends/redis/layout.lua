-- How every script reads and writes a record (layout.rs has the table and
-- the reasons); this text is put at the start of each script, after its
-- `#!lua` line, or where a script has a `-- layout.lua` line (scripts.rs).
--
-- A record is one string. Byte 1 is its state: l in flight, g in flight
-- after a claim found its lease lapsed and gave a grace, h held, c
-- completed, r released. At fixed offsets follow: 2-33 the fingerprint,
-- 34-49 the token (the holder's; completed or released, the last
-- holder's), 50 the attempt (0 first, 1 after a release, 2 a takeover),
-- 51-65 the lease mark (15 digits; in flight, the lease holds while the
-- key's PTTL is above it; zero once completed or released), 66-78 when the
-- execution was claimed (unix milliseconds by the claiming process's
-- clock, 13 digits, all zero when unknown: for operators, never compared
-- with anything here), 79-82 the route's length n (4 digits), 83 to 82+n
-- the route. Then, in flight, held or released, the steps, each a name
-- length (3 digits), the name, a result length (10 digits), the result (a
-- release keeps them for the next execution); completed, the response.
--
-- Records of the upper-case layout (L, G, C, R: no claim time, no route,
-- no steps, a lease mark of as many digits as it takes) are read too, and
-- written in this layout when a script changes them, but for the grace a
-- claim gives an `L` record: written `G`, as the previous version wrote it,
-- since its holder, a process of that version, accepts no other (claim.lua).

-- A holder's states: in flight (graced or not) or held.
local RUNNING = {l = true, g = true, h = true}
local STATES = {l = true, g = true, h = true, c = true, r = true}
-- The claim time and route of a record of the upper-case layout: unknown.
local NO_TAIL = string.rep('0', 17)

-- The record `value` read: a table with its state (a lower-case letter),
-- fp, token, attempt (a digit), mark (a number), tail (claim time, route
-- length and route, as kept) and body (steps, or a completed record's
-- response); nil for a value that is no record.
local function read(value)
  local state = string.sub(value, 1, 1)
  local record = {
    state = state,
    fp = string.sub(value, 2, 33),
    token = string.sub(value, 34, 49),
    attempt = string.sub(value, 50, 50),
  }
  if STATES[state] then
    local n = tonumber(string.sub(value, 79, 82))
    record.mark = tonumber(string.sub(value, 51, 65))
    if not n or not record.mark or #value < 82 + n then
      return nil
    end
    record.tail, record.body = string.sub(value, 66, 82 + n), string.sub(value, 83 + n)
  elseif (state == 'L' or state == 'G') and #value > 50 then
    record.state, record.mark = string.lower(state), tonumber(string.sub(value, 51))
    if not record.mark then
      return nil
    end
    record.tail, record.body = NO_TAIL, ''
  elseif state == 'C' and #value >= 49 then
    record.state, record.attempt, record.mark, record.tail = 'c', '0', 0, NO_TAIL
    record.body = string.sub(value, 50)
  elseif state == 'R' and #value == 33 then
    record.state, record.attempt, record.mark, record.tail, record.body = 'r', '0', 0, NO_TAIL, ''
    -- A tombstone of that layout keeps no token; no script reads one.
    record.token = string.rep('\0', 16)
  else
    return nil
  end
  return record
end

-- `record` in this layout, in `state`, its lease marked `mark`, with `body`
-- (steps or response) after the route. Binary parts are joined with `..`:
-- string.format's %s stops at a zero byte.
local function write(record, state, mark, body)
  return state .. record.fp .. record.token .. record.attempt .. string.format('%015d', mark) .. record.tail .. body
end

-- Gives the holder of a lapsed lease a grace of `grace` ms from now (a
-- claim's, or an operator's settle): the record `value` (read as `record`)
-- becomes `g`, its lease mark `left - grace` (`left`: the key's time to
-- live in ms, at least `grace`). A record of the upper-case layout is held
-- by a process of the previous version, whose renew, complete and release
-- scripts know only `L` and `G` (they answer lost for anything else): its
-- grace is written as that version's claim wrote it, `G` and the lease
-- mark in as many digits as it takes, so that its holder can still renew
-- (back to `L`), complete or release it.
local function give_grace(value, record, left, grace)
  if string.sub(value, 1, 1) == 'L' then
    redis.call('SET', KEYS[1], 'G' .. string.sub(value, 2, 50) .. string.format('%d', left - grace), 'KEEPTTL')
  else
    redis.call('SET', KEYS[1], write(record, 'g', left - grace, record.body), 'KEEPTTL')
  end
end
