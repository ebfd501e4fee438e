-- A token bucket shared by every process that checks it: Guava's SmoothBursty RateLimiter (its
-- stored permits, its next free moment, its arithmetic), in one atomic step.
--
-- KEYS[1]  the bucket's hash (with a hash tag): s stored permits, n the next free moment (µs),
--          r the rate it was set at, m its most stored permits, b when it was made (µs; none
--          in a bucket made before this field: made long ago)
-- KEYS[2]  optional: the sorted set of the processes sharing it (member -> expiry, in ms)
-- ARGV[1]  now, in microseconds; a negative value: Redis's own clock (TIME)
-- ARGV[2]  permits per second     ARGV[3]  max burst, in seconds of permits
-- ARGV[4]  count
-- ARGV[5]  what to do with it:
--          "all"    reserve `count` permits if the next free moment is not after now (Guava's
--                   tryAcquire(count, 0)); refusing writes nothing;
--          "upto"   the same, for a lease: a lease of `count` is one reservation of `count`;
--          "return" give back `count` unused permits: they first shorten the wait the bucket
--                   owes, then are stored again, up to the burst;
--          "report" reserve `count` permits without a check (what a process's fallback
--                   admitted while Redis failed, ARGV[6] ms ago at the latest), unless they
--                   were admitted before the bucket was made (a Redis that lost it, and a
--                   process made it again since): a new bucket, nothing stored and free from
--                   its making, is as strict already. A report never makes a bucket, so that
--                   each of a process's reports finds a lost bucket lost.
-- ARGV[6]  "report": how long ago, in ms; else unused
-- ARGV[7]  with KEYS[2]: this process's member name     ARGV[8]  its heartbeat's TTL, in ms
--
-- Returns { the permits granted (or given back); the stored permits after, whole; now (ms);
-- 0; the live processes (with KEYS[2]; else 0); the next free moment (ms, rounded up) }.
local now = tonumber(ARGV[1])
if now < 0 then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local now_ms = math.floor(now / 1000)
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local count = tonumber(ARGV[4])
local mode = ARGV[5]
local age_us = (tonumber(ARGV[6]) or 0) * 1000

local live = 0
if KEYS[2] then
  local ttl = tonumber(ARGV[8])
  redis.call('ZADD', KEYS[2], now_ms + ttl, ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  redis.call('PEXPIRE', KEYS[2], ttl * 2)
  live = redis.call('ZCARD', KEYS[2])
end

local stored, next_free, interval, max_permits, born
local changed = false
local fresh = false

-- Guava's resync: permits made since the next free moment are stored, up to the most.
local function resync()
  if now > next_free then
    stored = math.min(max_permits, stored + (now - next_free) / interval)
    next_free = now
    changed = true
  end
end

local values = redis.call('HMGET', KEYS[1], 's', 'n', 'r', 'm', 'b')
if not values[2] then
  -- Guava's constructor (setRate on a new limiter): nothing stored, free from now.
  stored = 0
  next_free = now
  interval = 1000000 / rate
  max_permits = burst * rate
  born = now
  changed = true
  fresh = true
else
  stored = tonumber(values[1])
  next_free = tonumber(values[2])
  interval = 1000000 / tonumber(values[3])
  max_permits = tonumber(values[4])
  born = tonumber(values[5]) or 0
  local new_max = burst * rate
  if tonumber(values[3]) ~= rate or max_permits ~= new_max then
    -- Guava's setRate: resync at the old rate, then scale the stored permits to the new most.
    resync()
    interval = 1000000 / rate
    if max_permits == 0 then
      stored = 0
    else
      stored = stored * new_max / max_permits
    end
    max_permits = new_max
    changed = true
  end
end

local granted = 0
if mode == 'return' then
  resync()
  local back = count
  if next_free > now then
    local cut = math.min(back * interval, next_free - now)
    next_free = next_free - cut
    back = back - cut / interval
  end
  stored = math.min(max_permits, stored + back)
  granted = count
  changed = true
elseif mode == 'report' then
  if fresh then
    changed = false
  elseif count > 0 and now - age_us >= born then
    -- Guava's reserve, whatever the wait it makes: stored permits first, then fresh ones.
    resync()
    local spend = math.min(count, stored)
    next_free = next_free + math.floor((count - spend) * interval)
    stored = stored - spend
    granted = count
    changed = true
  end
elseif count > 0 and next_free <= now then
  -- Guava's reserveEarliestAvailable: stored permits first, then fresh ones, paid for by the
  -- next caller ((long) truncates the wait).
  resync()
  local moment = next_free
  local spend = math.min(count, stored)
  local fresh = count - spend
  next_free = moment + math.floor(fresh * interval)
  stored = stored - spend
  granted = count
  changed = true
end

if changed then
  redis.call('HSET', KEYS[1], 's', stored, 'n', next_free, 'r', rate, 'm', max_permits, 'b', born)
  -- Kept until it would be full again, and a minute more; after that, a check finds a new
  -- bucket (empty: stricter than the full one it would be, see docs/exactness.md).
  local until_full = (max_permits - stored) * interval + math.max(0, next_free - now)
  redis.call('PEXPIRE', KEYS[1], math.floor(until_full / 1000) + 60000)
end
return { granted, math.floor(stored), now_ms, 0, live, math.ceil(next_free / 1000) }
