-- readOverview-1.lua
-- Purpose: read everything the dashboard's overview shows of one shard, for each consumer group, in one
--   call and without writing: the dashboard's refresh costs one round trip per shard whatever the number
--   of clients (counts are kept by the other scripts; nothing here walks the clients' lists, but for a
--   bounded sample read for the oldest waiting task).
-- Includes: clock, read
-- Builds keys: every key is named from the root in KEYS[1] as `QueueKeys` spells them (`<base>:ring`,
--   `<base>:pending-count`, ...), all in the root's hash tag, hence its Cluster slot.
-- KEYS[1]: the shard's key root, `prefix:{pattern...}` (not a key itself)
-- ARGV[1]: how many waiting clients (in turn on the ring, then throttled, then parked) to read the head
--   task of for the oldest waiting task
-- Returns: the Redis time (ms), then per consumer group (the default one, or those registered) an array:
--   group, pending count, clients waiting (on the ring, throttled, parked), delayed, dead letters, paused
--   (0/1), workers, workers alive, tasks in flight, oldest sampled enqueue time (ms, or -1), clients
--   sampled, completed, failed, retried, dead-lettered, the history hash as field/value pairs, cancelled,
--   replaced
-- Side effects: none (reads only; a key of another type reads as empty).
local root = KEYS[1]
local sample = tonumber(ARGV[1]) or 50
local now = redisMs()
local function count(command, key)
  return tonumber(read(command, key)) or 0
end
local function enqueuedAt(raw)
  if type(raw) ~= 'string' then
    return nil
  end
  return tonumber(string.match(raw, '"enqueuedAt":(%d+)'))
end

local groups = read('SMEMBERS', root .. ':groups') or {}
if #groups == 0 then
  groups = { 'default' }
end
local result = { now }
for _, group in ipairs(groups) do
  local base = root
  if group ~= 'default' then
    base = root .. ':g:' .. group
  end
  local clients = {}
  for _, client in ipairs(read('LRANGE', base .. ':ring', 0, sample - 1) or {}) do
    clients[#clients + 1] = client
  end
  for _, client in ipairs(read('ZRANGE', base .. ':throttled', 0, sample - 1) or {}) do
    clients[#clients + 1] = client
  end
  for _, client in ipairs(read('SRANDMEMBER', base .. ':parked', sample) or {}) do
    clients[#clients + 1] = client
  end
  local oldest = -1
  for _, client in ipairs(clients) do
    for _, at in ipairs({ enqueuedAt(read('LINDEX', base .. ':pending:' .. client, 0)),
      enqueuedAt((read('ZRANGE', base .. ':priority:' .. client, 0, 0) or {})[1]) }) do
      if at and (oldest < 0 or at < oldest) then
        oldest = at
      end
    end
  end
  local workers = read('ZRANGE', base .. ':workers', 0, -1, 'WITHSCORES') or {}
  local alive = 0
  local inFlight = 0
  for i = 1, #workers, 2 do
    if tonumber(workers[i + 1]) > now then
      alive = alive + 1
    end
    inFlight = inFlight + count('HLEN', base .. ':processing:' .. workers[i])
  end
  local counters = read('HMGET', base .. ':counters', 'completed', 'failed', 'retried', 'deadLettered', 'cancelled', 'replaced') or {}
  local waiting = count('LLEN', base .. ':ring') + count('ZCARD', base .. ':throttled') + count('SCARD', base .. ':parked')
  result[#result + 1] = {
    group, math.max(0, tonumber(read('GET', base .. ':pending-count')) or 0), waiting, count('ZCARD', base .. ':delayed'),
    count('LLEN', base .. ':dead'), redis.call('EXISTS', base .. ':paused'), #workers / 2, alive, inFlight, oldest, #clients,
    tonumber(counters[1]) or 0, tonumber(counters[2]) or 0, tonumber(counters[3]) or 0, tonumber(counters[4]) or 0,
    read('HGETALL', base .. ':history') or {}, tonumber(counters[5]) or 0, tonumber(counters[6]) or 0,
  }
end
return result
