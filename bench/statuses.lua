-- wrk script: counts responses by status across threads and prints them at the end.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  ok = 0
  limited = 0
  other = 0
end

function response(status, headers, body)
  if status == 200 then
    ok = ok + 1
  elseif status == 429 then
    limited = limited + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local total_ok, total_limited, total_other = 0, 0, 0
  for _, thread in ipairs(threads) do
    total_ok = total_ok + thread:get("ok")
    total_limited = total_limited + thread:get("limited")
    total_other = total_other + thread:get("other")
  end
  io.write(string.format("STATUSES ok=%d limited=%d other=%d\n", total_ok, total_limited, total_other))
end
