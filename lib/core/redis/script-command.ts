import { Command } from 'ioredis';
import { isCallRecord, writtenRecord } from './call-record.js';
import { SequencedRecord } from './call-sequence.js';
import { scriptFlagsOn } from './script-flags.js';
import type { RedisConnection, ScriptDefinition } from './script-types.js';

type Arg = string | number;

/** A script's function on a connection (or, copied, on a pipeline of it). */
export type ScriptFunction = (this: unknown, ...args: Arg[]) => unknown;

/** Every script reply is read as UTF-8 strings (and integers), as ioredis's defined commands read them. */
const OPTIONS = { replyEncoding: 'utf8' } as const;

/**
 * A script's command on a connection, sent as one EVALSHA (EVAL when Redis answers NOSCRIPT: after a
 * restart, a failover or a SCRIPT FLUSH; a script that is missing did not run, so the retry is safe).
 *
 * What ioredis's `defineCommand` function does too, without its generic steps that cost a per-task
 * path more than the rest of its work: three copies of the arguments and a flattening pass
 * (`Array#flat`, about a microsecond with a task's arguments), a closure per write and a second
 * promise per call for the NOSCRIPT fallback. The command still goes through the connection's
 * `sendCommand`, so Cluster routing and redirections, the offline queue, timeouts and command
 * instrumentation see it as they see any other. A pipeline copies the connection's functions and calls
 * them on itself: those calls take ioredis's own function (`generic`), which queues them.
 */
export function scriptCommand(
  connection: RedisConnection,
  script: ScriptDefinition,
  generic: ScriptFunction,
): ScriptFunction {
  const { sha, source, flagged } = script;
  // A `-F+n` script's caller passes numkeys first; the others have a fixed count.
  const numKeys = script.variableKeys ? undefined : String(script.fixedKeys);
  // Sized at once, not a literal grown by push: an array literal is an allocation site, and V8 can
  // decide to make a site's arrays in the old generation, where each one held its task's strings
  // through scavenges (measured: 144 bytes promoted per call at 10 calls per ms, 15 like this).
  const skip = numKeys === undefined ? 1 : 2;
  // Only the enqueue script takes a call record (its first ARGV, after its one key).
  const recordAt = script.name === 'enqueueTasks' ? skip + 1 : -1;
  const wire = (head: string, args: readonly Arg[]): string[] => {
    const out = new Array<string>(args.length + skip);
    out[0] = head;
    if (numKeys !== undefined) out[1] = numKeys;
    for (let i = 0; i < args.length; i++) {
      const arg = args[i];
      out[i + skip] = typeof arg === 'string' ? arg : String(arg);
    }
    return out;
  };
  const commandOf = (name: 'evalsha' | 'eval', args: string[]): Command => {
    // Arguments set after construction: they are strings already, so the constructor's pass over
    // them (flattening, stringifying) has nothing to do.
    const command = new Command(name, undefined, OPTIONS);
    command.args = args;
    return command;
  };
  return function (this: unknown, ...args: Arg[]): unknown {
    if (this !== connection) return generic.apply(this, args);
    // Redis 7 reads what a script may do when Redis is full from its first line (script-flags.ts).
    const flags = scriptFlagsOn();
    const sent = wire(flags ? flagged.sha : sha, args);
    const command = commandOf('evalsha', sent);
    const record =
      recordAt > 0 && isCallRecord(sent[recordAt]) ? recordOf(connection, command, sent, recordAt) : undefined;
    const reject = command.reject;
    command.reject = (error: Error) => {
      if (!String(error?.message).includes('NOSCRIPT')) return reject(error);
      const retried = sent.slice(); // the EVALSHA itself stays as written (Cluster may resend it)
      retried[0] = flags ? flagged.source : source;
      const again = commandOf('eval', retried);
      // Its record goes on as the EVALSHA's (a first send, written again): its reply may be lost too.
      if (record) writesRecord(again, retried, recordAt, record);
      again.promise.then(command.resolve, reject);
      void connection.sendCommand(again);
    };
    void connection.sendCommand(command);
    return command.promise as Promise<unknown>;
  };
}

/** A record's writes, for an enqueue call whose ARGV[1] is a call record. */
interface RecordWrites {
  next(): string;
}

/**
 * ioredis writes a command again after a reconnection when its reply was lost
 * (`autoResendUnfulfilledCommands`): by then Redis may have run it. A first send's record is numbered on the
 * connection at its first write and goes as a resend on each write after (`SequencedRecord`; settled when the
 * call is answered); any other record (a named one) says so on every write after the first: mode '2'; and '3'
 * once the caller's deadline passed (see `writtenRecord`).
 */
function recordOf(connection: RedisConnection, command: Command, sent: string[], at: number): RecordWrites {
  const first = sent[at];
  let record: RecordWrites;
  const sequenced = SequencedRecord.of(connection, sent[at - 1], first);
  if (sequenced) {
    const { resolve, reject } = command;
    command.resolve = (reply: unknown) => {
      sequenced.settle(reply !== -1);
      resolve(reply);
    };
    command.reject = (error: Error) => {
      sequenced.settle(false);
      reject(error);
    };
    record = sequenced;
  } else {
    let writes = 0;
    record = { next: () => writtenRecord(first, ++writes) };
  }
  writesRecord(command, sent, at, record);
  return record;
}

/** Puts the record's next form in a command's arguments before each of its writes. */
function writesRecord(command: Command, sent: string[], at: number, record: RecordWrites): void {
  const toWritable = command.toWritable;
  command.toWritable = function (this: Command, socket: unknown) {
    sent[at] = record.next();
    return toWritable.call(this, socket as never);
  };
}
