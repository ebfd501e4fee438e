-- A concurrency limit shared by every process that checks it: permits held, per holder, whose
-- hold lasts as long as the holder's heartbeat. A holder that stops beating (it died, or lost
-- Redis) loses its permits when its heartbeat's TTL runs out.
--
-- KEYS[1]  the holders' hash (with a hash tag): holder -> permits it holds
-- KEYS[2]  the sorted set of the holders' heartbeats (holder -> expiry, in ms)
-- ARGV[1]  now, in milliseconds; a negative value: Redis's own clock (TIME)
-- ARGV[2]  limit     ARGV[3]  count
-- ARGV[4]  what to do with it:
--          "all"     take `count` permits if all of them are free;
--          "upto"    take as many of `count` as are free;
--          "return"  give back up to `count` of this holder's permits;
--          "beat"    only the heartbeat (count is ignored)
-- ARGV[5]  this holder's name     ARGV[6]  its heartbeat's TTL, in ms
--
-- Every call beats for the holder, and first drops the holders whose heartbeat ran out, with
-- their permits. Returns { the permits taken or given back; the permits in use before (all
-- holders); now; the permits this holder holds after; the live holders; 0 }.
local now = tonumber(ARGV[1])
if now < 0 then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local limit = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local mode = ARGV[4]
local holder = ARGV[5]
local ttl = tonumber(ARGV[6])

local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #dead > 0 then
  redis.call('HDEL', KEYS[1], unpack(dead))
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
end
redis.call('ZADD', KEYS[2], now + ttl, holder)
redis.call('PEXPIRE', KEYS[2], ttl * 2)
local live = redis.call('ZCARD', KEYS[2])

local in_use = 0
for _, held in ipairs(redis.call('HVALS', KEYS[1])) do
  in_use = in_use + tonumber(held)
end
local mine = tonumber(redis.call('HGET', KEYS[1], holder) or 0)

local moved = 0
if mode == 'return' then
  moved = math.min(count, mine)
  mine = mine - moved
elseif mode == 'all' then
  if in_use + count <= limit then
    moved = count
  end
  mine = mine + moved
elseif mode == 'upto' then
  moved = math.max(0, math.min(count, limit - in_use))
  mine = mine + moved
end
if mine > 0 then
  redis.call('HSET', KEYS[1], holder, mine)
  redis.call('PEXPIRE', KEYS[1], ttl * 2)
elseif moved > 0 then
  redis.call('HDEL', KEYS[1], holder)
end
return { moved, in_use, now, mine, live, 0 }
