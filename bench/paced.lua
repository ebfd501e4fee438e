-- wrk script: each connection waits DELAY_MS between requests, for a roughly fixed rate of
-- connections * 1000 / DELAY_MS requests a second (wrk itself has no fixed-rate mode).
local delay_ms = tonumber(os.getenv("DELAY_MS") or "10")
function delay()
  return delay_ms
end
