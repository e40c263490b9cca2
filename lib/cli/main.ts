#!/usr/bin/env node
/**
 * `npx nestjs-redis-tasks <command>`: what is queued, running, stuck or dead, and the means to replay it.
 * Exit codes: 0 done, 1 Redis could not be reached or failed, 2 bad usage, 3 unknown queue, 4 no such
 * dead letter, schedule or tracked task.
 */
import { redactUrl } from '../core/support/redact.js';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../core/admin/admin.js';
import { CliError, EXIT, run, USAGE } from './commands.js';

/** The command line's options (each command reads the ones it names in the usage). */
const OPTIONS = {
  url: { type: 'string' },
  prefix: { type: 'string', default: 'tasks' },
  group: { type: 'string', default: 'default' },
  json: { type: 'boolean', default: false },
  all: { type: 'boolean', default: false },
  limit: { type: 'string' },
  offset: { type: 'string' },
  reason: { type: 'string' },
  client: { type: 'string' },
  error: { type: 'string' },
  'older-than': { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, options: OPTIONS });
  } catch (error) {
    return fail(new CliError(EXIT.usage, `${(error as Error).message.split('\n')[0]} (see --help)`));
  }
  const { values, positionals } = parsed;
  if (values.help || positionals.length === 0) {
    process.stdout.write(`${USAGE}\n`);
    return positionals.length === 0 && !values.help ? EXIT.usage : EXIT.ok;
  }
  const url = values.url ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  if (!/^rediss?:\/\/[^\s]+$/.test(url) || !URL.canParse(url)) {
    return fail(new CliError(EXIT.usage, `--url must be a redis:// or rediss:// URL, got "${redactUrl(url)}"`));
  }
  const redis = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 3_000,
    enableOfflineQueue: false,
  });
  try {
    await connect(redis, url);
    let admin = TaskAdmin.onConnection(redis, values.prefix);
    try {
      admin = admin.forGroup(values.group);
    } catch (error) {
      throw new CliError(EXIT.usage, `--group ${(error as Error).message.replace(/^.*option "group" /, '')}`);
    }
    const output = await run(admin, positionals, values);
    process.stdout.write(`${output}\n`);
    return EXIT.ok;
  } catch (error) {
    return fail(error);
  } finally {
    redis.disconnect();
  }
}

/** Connects once (no retries: a command line answers at once), or says why Redis cannot be reached. */
async function connect(redis: Redis, url: string): Promise<void> {
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => (lastError = error)); // reported once below
  try {
    await redis.connect();
  } catch (error) {
    // ioredis rejects with "Connection is closed"; the socket's own error says why.
    throw new CliError(
      EXIT.redis,
      `cannot reach Redis at ${redactUrl(url)}: ${(lastError ?? (error as Error)).message}`,
    );
  }
}

function fail(error: unknown): number {
  if (error instanceof CliError) {
    process.stderr.write(`nestjs-redis-tasks: ${error.message}\n`);
    return error.exitCode;
  }
  // One line, no stack: what Redis said, or what went wrong.
  process.stderr.write(`nestjs-redis-tasks: ${error instanceof Error ? error.message : String(error)}\n`);
  return EXIT.redis;
}

void main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
