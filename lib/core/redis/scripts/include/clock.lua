-- include/clock.lua — the Redis clock, for every script that reads time (its header's Includes, or a helper's
-- Needs, say "clock"). One TIME per script call: every step of a call sees the same instant.
-- redisMs(): Redis time in milliseconds (integer).
-- redisMicros(): Redis time in microseconds (integer), for what must increase past any earlier call's number.
local clockSeconds, clockMicros = nil, nil

local function redisMicros()
  if not clockSeconds then
    local time = redis.call('TIME')
    clockSeconds, clockMicros = tonumber(time[1]), tonumber(time[2])
  end
  return clockSeconds * 1000000 + clockMicros
end

local function redisMs()
  return math.floor(redisMicros() / 1000)
end
