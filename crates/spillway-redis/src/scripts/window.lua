-- A sliding window of QPS counts shared by every process that checks it (Sentinel's LeapArray
-- and DefaultController, in one atomic step): the window is a ring of `buckets` slots over
-- `interval_ms`; slot i holds the start time of its bucket (field t<i>) and its passes (c<i>).
--
-- KEYS[1]  the window's hash (with a hash tag, so that it lives in one cluster slot)
-- ARGV[1]  now, in milliseconds; a negative value: Redis's own clock (TIME)
-- ARGV[2]  interval_ms     ARGV[3]  buckets     ARGV[4]  limit (per second; may be fractional)
-- ARGV[5]  acquire (the count this request takes)
--
-- Returns { admitted (1 or 0), the window's passes before this request, now }.
local now = tonumber(ARGV[1])
if now < 0 then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local interval = tonumber(ARGV[2])
local buckets = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local acquire = tonumber(ARGV[5])
local width = interval / buckets
local start = now - now % width
local current = math.floor(start / width) % buckets

local fields = {}
for i = 0, buckets - 1 do
  fields[#fields + 1] = 't' .. i
  fields[#fields + 1] = 'c' .. i
end
local values = redis.call('HMGET', KEYS[1], unpack(fields))

-- Buckets still in the window at `now` (Sentinel: not deprecated, now - start <= interval),
-- and not ahead of it (a time that went backwards on another process).
local passes = 0
for i = 0, buckets - 1 do
  local t = tonumber(values[2 * i + 1])
  if t and now - t <= interval and t <= now then
    if not (i == current and t ~= start) then
      passes = passes + tonumber(values[2 * i + 2] or 0)
    end
  end
end

-- Sentinel's DefaultController: passQps + acquire > count blocks.
if passes / (interval / 1000) + acquire > limit then
  return { 0, passes, now }
end
local t = tonumber(values[2 * current + 1])
if t == start then
  redis.call('HINCRBY', KEYS[1], 'c' .. current, acquire)
else
  redis.call('HSET', KEYS[1], 't' .. current, start, 'c' .. current, acquire)
end
redis.call('PEXPIRE', KEYS[1], interval * 2)
return { 1, passes, now }
