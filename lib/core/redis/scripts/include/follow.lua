-- include/follow.lua — the seam: what follows a task that moves, for every per-task feature at one place.
-- Shared by the scripts whose header says "Includes: follow": each script that moves a task (ackTasks,
-- retryTask, deadLetterTask, deadLetterDelayed, requeueTasks, requeueDeadLetters, cancelTask, dropHeld)
-- reads the task once (followOf) and, after its own move, hands the move to followTask; a move that puts
-- the task back in line asks first (followAsk) whether a feature holds it back. A feature is its own
-- include with a reader of its entry head (the first field after `v` of the stored form version 2, as the
-- producer writes it: task-items.ts) and a handler of moves; it joins the branches below, and no script
-- changes. (The start of a task, claimed and about to run, is a step of its own per feature, asked for by
-- the worker where the task's traits say so: startTasks for tracking, startCoalesced for coalescing keys.)
-- Needs: track, coalesce, batch, flow, steps, body
-- Moves: completed (acknowledged), dead (dead-lettered), retried (waits in the delayed set for its next
--   attempt), requeued (back at the head of its client's list), cancelled (left its list or delayed set:
--   nobody will run it), dropped (taken from its worker unfinished: a cancelled batch), revived (a dead
--   letter given a fresh run).
-- followOf(base, root, entry)
--   The task as the features see it: { base, root, entry, kind, head }: kind names the feature whose record
--   the entry carries ('coalesce', 'batch', 'flow', or nil) and head is what that feature's reader made of it. An
--   entry no feature reads shares one { base, root, entry } per call (handlers keep nothing on it).
-- followAsk(task, what, processing, token)
--   Before a move that puts a held task (under `token` in `processing`) back in line (retried, requeued):
--   'drop' when a feature holds it back (a newer task of its coalescing key was emitted: the task has left
--   its worker, counted and answered by the feature), else nil.
-- followTask(task, what, token, tracked, entryKey, value, due)
--   After the move `what`: each feature follows it. `token` is the fencing token the task left ('' none),
--   `tracked` its tracked index key and `entryKey` its tracked entry key ('' none), `value` what the move
--   carries (completed: a send() task's reply; retried, requeued: the entry as it now waits; dead: the decoded
--   dead-letter record, or nil; cancelled: why), `due` a retry's due time. Positional, not a table: one fewer
--   table per task moved.
-- The features, by the head their entries carry (`kind`). A new feature adds its branch to each of the three
-- functions below (branches, not tables: a table built on every script call costs every call).

-- The task of an entry no feature reads (most of them): one table per script call, never written to.
local followPlain = nil

local function followOf(base, root, entry)
  local kind = string.match(entry, '^%d+|{"v":2,"(%a+)":')
  local head = nil
  if kind == 'coalesce' then
    head = coalesceOf(entry)
  elseif kind == 'batch' then
    head = batchOf(entry)
  elseif kind == 'flow' then
    head = flowOf(entry)
  end
  if head then
    return { base = base, root = root, entry = entry, kind = kind, head = head }
  end
  if not followPlain or followPlain.base ~= base or followPlain.root ~= root then
    followPlain = { base = base, root = root }
  end
  followPlain.entry = entry
  return followPlain
end

local function followAsk(task, what, processing, token)
  if task.kind == 'coalesce' then
    return coalesceAsk(task, what, processing, token)
  end
  return nil
end

local function followTask(task, what, token, tracked, entryKey, value, due)
  -- Durable steps (include/steps.lua) and an out-of-line payload (include/body.lua) of every kind of task go
  -- when it ends (a dead letter's record carries the payload its worker read).
  if what == 'completed' or what == 'dead' or what == 'cancelled' or what == 'dropped' then
    stepsEndEntry(task.base, task.entry)
    bodyEnd(task.base, task.entry)
  end
  if tracked ~= '' then
    trackFollow(task, what, tracked, entryKey, value, due)
  end
  if task.kind == 'coalesce' then
    coalesceFollow(task, what, token, value, due)
  elseif task.kind == 'batch' then
    batchFollow(task, what)
  elseif task.kind == 'flow' then
    flowFollow(task, what, value)
  end
end
