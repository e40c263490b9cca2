-- include/releaseClientSlot.lua — shared by the scripts whose header says "Includes: releaseClientSlot".
-- Needs: guard
-- releaseClientSlot(counted, inflight, parked, ring, token, atHead)
--   A task claimed under a per-client concurrency cap left the worker (acknowledged, retried, dead-
--   lettered or returned): its client's in-flight count drops by one and, if the client had been taken
--   off the ring at its cap ("parked"), it goes back on the ring (at its head when atHead). A token
--   claimed without a cap is not in `counted`, and nothing happens. Callers that use a cap check the
--   keys' types before their first write (expectTypes), so this never fails halfway.
local function releaseClientSlot(counted, inflight, parked, ring, token, atHead)
  -- Not a hash (overwritten by something else): no slot of ours to release.
  local client = redis.pcall('HGET', counted, token)
  if type(client) ~= 'string' then
    return
  end
  redis.call('HDEL', counted, token)
  -- A count that is not an integer (written by something else) is dropped rather than failing the settle.
  local left = redis.pcall('HINCRBY', inflight, client, -1)
  if type(left) ~= 'number' or left <= 0 then
    redis.call('HDEL', inflight, client)
  end
  if redis.call('SREM', parked, client) == 1 then
    if atHead then
      wakeWorkers(ring, redis.call('LPUSH', ring, client), 1)
    else
      wakeWorkers(ring, redis.call('RPUSH', ring, client), 1)
    end
  end
end
