-- A sliding window of QPS counts shared by every process that checks it (Sentinel's LeapArray
-- and DefaultController, in one atomic step): the window is a ring of `buckets` slots over
-- `interval_ms`; slot i holds the start time of its bucket (field t<i>) and its passes (c<i>).
--
-- KEYS[1]  the window's hash (with a hash tag, so that it lives in one cluster slot)
-- KEYS[2]  optional: the sorted set of the processes sharing it (member -> expiry, in ms)
-- ARGV[1]  now, in milliseconds; a negative value: Redis's own clock (TIME)
-- ARGV[2]  interval_ms     ARGV[3]  buckets     ARGV[4]  limit (per second; may be fractional)
-- ARGV[5]  count
-- ARGV[6]  what to do with it:
--          "all"    pass `count` if the window has room for all of it (Sentinel's check);
--          "upto"   pass as many of `count` as checks of one, one after the other, would pass
--                   (a lease);
--          "return" take back up to `count` passes from the bucket that starts at ARGV[7], if
--                   that bucket is still the one its slot holds (an unused lease);
--          "report" count `count` passes admitted ARGV[7] ms ago without a check (what a
--                   process's fallback admitted), in the bucket of that time if it is still
--                   in the window
-- ARGV[8]  with KEYS[2]: this process's member name     ARGV[9]  its heartbeat's TTL, in ms
--
-- Returns { 1 if admitted, else 0 ("all"), or the passes granted ("upto") or taken back
-- ("return"); the window's passes before; now; the current bucket's start; the live processes
-- (with KEYS[2]; else 0); the next bucket's start }. A lease of 0 only beats.
local now = tonumber(ARGV[1])
if now < 0 then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local interval = tonumber(ARGV[2])
local buckets = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local count = tonumber(ARGV[5])
local mode = ARGV[6]
local width = interval / buckets
local start = now - now % width
local current = math.floor(start / width) % buckets

-- The heartbeat: this process lives until now + ttl; the others whose time is up are gone.
local live = 0
if KEYS[2] then
  local ttl = tonumber(ARGV[9])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[8])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('PEXPIRE', KEYS[2], ttl * 2)
  live = redis.call('ZCARD', KEYS[2])
end

if mode == 'return' then
  local from = tonumber(ARGV[7])
  local slot = math.floor(from / width) % buckets
  local values = redis.call('HMGET', KEYS[1], 't' .. slot, 'c' .. slot)
  if tonumber(values[1]) ~= from then
    return { 0, 0, now, start, live, start + width }
  end
  local back = math.min(count, tonumber(values[2] or 0))
  if back > 0 then
    redis.call('HINCRBY', KEYS[1], 'c' .. slot, -back)
  end
  return { back, 0, now, start, live, start + width }
end

if mode == 'report' then
  local at = now - tonumber(ARGV[7])
  local from = at - at % width
  local slot = math.floor(from / width) % buckets
  local t = tonumber(redis.call('HGET', KEYS[1], 't' .. slot))
  if count <= 0 or now - from > interval or (t and t > from) then
    -- Out of the window already (or its slot holds a later bucket).
    return { 0, 0, now, start, live, start + width }
  end
  if t == from then
    redis.call('HINCRBY', KEYS[1], 'c' .. slot, count)
  else
    redis.call('HSET', KEYS[1], 't' .. slot, from, 'c' .. slot, count)
  end
  redis.call('PEXPIRE', KEYS[1], interval * 2)
  return { count, 0, now, start, live, start + width }
end

local fields = {}
for i = 0, buckets - 1 do
  fields[#fields + 1] = 't' .. i
  fields[#fields + 1] = 'c' .. i
end
local values = redis.call('HMGET', KEYS[1], unpack(fields))

-- Buckets still in the window at `now` (Sentinel: not deprecated, now - start <= interval),
-- and not ahead of it (a time that went backwards on another process); the current slot
-- counts only if it holds the current bucket (else it is about to be reset).
local passes = 0
for i = 0, buckets - 1 do
  local t = tonumber(values[2 * i + 1])
  if t and now - t <= interval and t <= now then
    if not (i == current and t ~= start) then
      passes = passes + tonumber(values[2 * i + 2] or 0)
    end
  end
end

-- Sentinel's DefaultController: passQps + count > limit blocks. A lease of n takes what n
-- checks of one, one after the other, would pass: the k-th (from 0) passes while
-- (passes + k) / seconds + 1 <= limit.
local seconds = interval / 1000
local granted = count
if count == 0 and mode == 'upto' then
  return { 0, passes, now, start, live, start + width }
end
if mode == 'upto' then
  granted = math.floor((limit - 1) * seconds - passes) + 1
  granted = math.max(0, math.min(count, granted))
  -- The same comparison as one check's, so that rounding cannot grant one more or one less.
  while granted > 0 and (passes + granted - 1) / seconds + 1 > limit do
    granted = granted - 1
  end
  while granted < count and (passes + granted) / seconds + 1 <= limit do
    granted = granted + 1
  end
  if granted == 0 then
    return { 0, passes, now, start, live, start + width }
  end
elseif passes / seconds + count > limit then
  return { 0, passes, now, start, live, start + width }
end
local t = tonumber(values[2 * current + 1])
if t == start then
  redis.call('HINCRBY', KEYS[1], 'c' .. current, granted)
else
  redis.call('HSET', KEYS[1], 't' .. current, start, 'c' .. current, granted)
end
redis.call('PEXPIRE', KEYS[1], interval * 2)
if mode == 'all' then
  return { 1, passes, now, start, live, start + width }
end
return { granted, passes, now, start, live, start + width }
