import { Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { ModulesContainer } from '@nestjs/core';
import { REDIS_TASK_TRANSPORT } from './constants.js';

/** Nest's metadata keys of a message handler (`@nestjs/microservices/constants`), stable across Nest 11 and 12. */
const PATTERN_METADATA = 'microservices:pattern';
const TRANSPORT_METADATA = 'microservices:transport';

/**
 * How many `RedisTaskTransport`s this process made, shared by the package's CommonJS and ESM builds (an app
 * whose code and tests load different builds still counts one).
 */
const TRANSPORTS = Symbol.for('nestjs-redis-tasks.transports-made');

/** A `RedisTaskTransport` was made in this process (its constructor says so). */
export function transportMade(): void {
  const store = globalThis as { [TRANSPORTS]?: number };
  store[TRANSPORTS] = (store[TRANSPORTS] ?? 0) + 1;
}

function transportsMade(): number {
  return (globalThis as { [TRANSPORTS]?: number })[TRANSPORTS] ?? 0;
}

let warned = false;

/**
 * Says once, at start-up, that an app has `@EventPattern` / `@MessagePattern` handlers and `RedisTaskModule`
 * but made no `RedisTaskTransport` (the natural mistake of a `@Processor` user: handlers declared, nothing
 * consuming), instead of letting its tasks wait and its `send()` calls time out without a word. Handlers
 * bound to another transport (`@EventPattern(p, Transport.KAFKA)`) are not counted.
 */
@Injectable()
export class TransportPresence implements OnApplicationBootstrap {
  private readonly logger = new Logger('RedisTaskModule');

  constructor(private readonly modules: ModulesContainer) {}

  onApplicationBootstrap(): void {
    if (warned || transportsMade() > 0) return;
    const patterns = this.handlerPatterns();
    if (patterns.length === 0) return;
    warned = true;
    const named = patterns.slice(0, 5).join(', ') + (patterns.length > 5 ? ` and ${patterns.length - 5} more` : '');
    this.logger.warn(
      `this app has @EventPattern/@MessagePattern handlers (${named}) but no RedisTaskTransport: nothing in this process consumes their tasks, ` +
        'which wait in Redis (a send() times out). Connect one: app.connectMicroservice({ strategy: new RedisTaskTransport({ ... }) }) ' +
        'and await app.startAllMicroservices(); or run the worker as its own process',
    );
  }

  /** The patterns of every controller method bound to this transport or to none in particular. */
  private handlerPatterns(): string[] {
    const found = new Set<string>();
    for (const module of this.modules.values()) {
      for (const wrapper of module.controllers.values()) {
        const prototype = (wrapper.metatype as { prototype?: object } | undefined)?.prototype;
        if (!prototype) continue;
        for (const name of Object.getOwnPropertyNames(prototype)) {
          if (name === 'constructor') continue;
          const method = Object.getOwnPropertyDescriptor(prototype, name)?.value as object | undefined;
          if (typeof method !== 'function') continue;
          const patterns = Reflect.getMetadata(PATTERN_METADATA, method) as unknown[] | undefined;
          if (!patterns) continue;
          const transport = Reflect.getMetadata(TRANSPORT_METADATA, method) as unknown;
          if (transport !== undefined && transport !== REDIS_TASK_TRANSPORT) continue;
          for (const pattern of patterns) found.add(JSON.stringify(pattern));
        }
      }
    }
    return [...found];
  }
}
