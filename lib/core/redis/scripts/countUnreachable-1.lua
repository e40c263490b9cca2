-- countUnreachable-1.lua
-- Purpose: tell the reaper's ring audit whether a pass over the keyspace is needed, without one: the
--   shard's pending count against the tasks of the clients a claim can reach (on the ring, parked at their
--   cap, or throttled). Equal counts mean no client is stranded that the count knows of, so an idle or
--   healthy shard costs the audit this one call and no SCAN.
-- Includes: read
-- Builds keys: every key is named from the base in KEYS[1] as `QueueKeys` spells them (`<base>:ring`,
--   `<base>:parked`, `<base>:throttled`, `<base>:pending-count`, `<base>:pending:<client>`,
--   `<base>:priority:<client>`, `<base>:audit-wanted`), all in the base's hash tag, hence its Cluster slot.
-- KEYS[1]: the shard's keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group; not a key itself)
-- ARGV[1]: the most clients to count in one call
-- Returns: array { gap, wanted }: gap is the pending count minus the tasks of the clients in reach (0: none
--   stranded that the count knows of; more: some are), or -1 when more clients are in reach than ARGV[1]
--   (not counted); wanted is the value of audit-wanted (a claim found the count above what it reached and
--   set it right: a client may be stranded all the same), or false
-- Side effects: none (reads only; a key of another type reads as empty).
local base = KEYS[1]
local limit = tonumber(ARGV[1]) or 1000

local wanted = read('GET', base .. ':audit-wanted')
if type(wanted) ~= 'string' then
  wanted = false
end
local count = tonumber(read('GET', base .. ':pending-count')) or 0
if count <= 0 then
  return { 0, wanted }
end
local ring = base .. ':ring'
if (tonumber(read('LLEN', ring)) or 0) > limit then
  return { -1, wanted }
end
local clients = {}
for _, client in ipairs(read('LRANGE', ring, 0, -1) or {}) do
  clients[client] = true
end
for _, client in ipairs(read('SMEMBERS', base .. ':parked') or {}) do
  clients[client] = true
end
for _, client in ipairs(read('ZRANGE', base .. ':throttled', 0, limit) or {}) do
  clients[client] = true
end
local reachable = 0
local counted = 0
for client in pairs(clients) do
  counted = counted + 1
  if counted > limit then
    return { -1, wanted }
  end
  reachable = reachable + (tonumber(read('LLEN', base .. ':pending:' .. client)) or 0)
    + (tonumber(read('ZCARD', base .. ':priority:' .. client)) or 0)
end
return { count - reachable, wanted }
