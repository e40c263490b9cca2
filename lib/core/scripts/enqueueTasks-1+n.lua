-- enqueueTasks-1+n.lua
-- Purpose: append tasks to the tails of their clients' pending lists, and put each client whose list
--   was empty at the tail of the ring, so the ring holds a client exactly while it has pending tasks.
-- KEYS[1]: ring (list of client ids with pending tasks)
-- KEYS[2..n+1]: pending list of each client group in this call (list of encoded entries)
-- ARGV: for each pending key, in KEYS order: client id, entry count c, then the c encoded entries
-- Returns: integer, the number of tasks appended
-- Side effects: RPUSH onto pending lists; RPUSH of a client id onto the ring when its list was empty.
--   Blocked workers (BLMOVE on the ring) wake as soon as a client id lands on an empty ring.
local ring = KEYS[1]
local chunk = 1000 -- keeps unpack() well inside Lua's C stack limit
local a = 1
local total = 0
for k = 2, #KEYS do
  local clientId = ARGV[a]
  local count = tonumber(ARGV[a + 1])
  local first = a + 2
  local last = a + 1 + count
  local length = 0
  for i = first, last, chunk do
    length = redis.call('RPUSH', KEYS[k], unpack(ARGV, i, math.min(i + chunk - 1, last)))
  end
  if length == count then
    redis.call('RPUSH', ring, clientId)
  end
  total = total + count
  a = last + 1
end
return total
