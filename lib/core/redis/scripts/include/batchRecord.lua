-- include/batchRecord.lua — shared by the scripts whose header says "Includes: batchRecord".
-- Needs: guard, clock
-- A batch's record, `<prefix>:{%B<batch id>}:batch` (hash; BatchKeys.record), and its children,
-- `<prefix>:{%B<batch id>}:children` (hash: task id -> `<outcome>/<seq>`, outcome p waiting or running, s
-- succeeded, d dead-lettered, c cancelled; seq: the last event applied, see include/batch.lua), in a slot of
-- their own. The record's fields: state (open: children may be added; sealed: no more; cancelled), total,
-- succeeded, dead, cancelled (counts of children), complete and success (the callbacks, JSON: `{ pattern,
-- payload?, clientId? }`; success only when every child succeeded), keep (ms the record is kept once a
-- callback settled), created and fired (Redis ms), callbacks (the callback task ids, once enqueued),
-- `settled/<callback task id>` (each callback that settled, succeeded or dead-lettered). `created` also names
-- the batch's generation: a batch id used again after its keys expired is a new batch, whose callbacks'
-- deduplication guards (`batch:<id>:<created>:<which>`) are not the old ones'.
-- batchFire(record, children)
--   Once the batch is sealed (or cancelled) and every child settled, marks it fired (once) and returns what
--   its callbacks are enqueued with: { 1, complete, success ('' none or not all succeeded), total,
--   succeeded, dead, cancelled, created, the ids of the dead-lettered children... }; the same again while its
--   callbacks are not on record as enqueued (an enqueue that a crash cut off is made again; the callback's
--   deduplication key keeps it once). { 2, created } once its callbacks are on record (nothing left to do);
--   else { 0 }.
local BATCH_COUNT = { s = 'succeeded', d = 'dead', c = 'cancelled' }

local function batchFire(record, children)
  local fields = redis.call('HMGET', record, 'state', 'total', 'succeeded', 'dead', 'cancelled', 'fired', 'callbacks',
    'complete', 'success', 'created')
  local state, total = fields[1], tonumber(fields[2]) or 0
  local succeeded, dead, cancelled = tonumber(fields[3]) or 0, tonumber(fields[4]) or 0, tonumber(fields[5]) or 0
  if fields[7] then
    return { 2, fields[10] or '0' }
  end
  if (state ~= 'sealed' and state ~= 'cancelled') or succeeded + dead + cancelled < total then
    return { 0 }
  end
  if not fields[6] then
    redis.call('HSET', record, 'fired', redisMs())
  end
  local success = ''
  if fields[9] and dead == 0 and cancelled == 0 then
    success = fields[9]
  end
  local fire = { 1, fields[8] or '', success, total, succeeded, dead, cancelled, fields[10] or '0' }
  if dead > 0 then
    local flat = redis.call('HGETALL', children)
    for i = 1, #flat, 2 do
      if string.sub(flat[i + 1], 1, 2) == 'd/' then
        fire[#fire + 1] = flat[i]
      end
    end
  end
  return fire
end

-- batchCallbacksSettled(record, callbacks)
--   Whether every callback on record (`callbacks`, comma-separated ids) has settled (`settled/<id>`), and the
--   ids of those that have.
local function batchCallbacksSettled(record, callbacks)
  local settled, all = {}, true
  for id in string.gmatch(callbacks, '[^,]+') do
    if redis.call('HEXISTS', record, 'settled/' .. id) == 1 then
      settled[#settled + 1] = id
    else
      all = false
    end
  end
  return all, settled
end
