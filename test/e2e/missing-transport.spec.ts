import { afterEach, describe, expect, it } from '@jest/globals';
import { Controller, type LoggerService } from '@nestjs/common';
import { EventPattern, MessagePattern, Transport } from '@nestjs/microservices';
import { Test, type TestingModule } from '@nestjs/testing';
import { RedisTaskModule } from '../../lib/index.js';
import { redisUrl, testPrefix } from '../support/redis.js';

// Its own file: "no RedisTaskTransport made in this process" is a per-process (per test file) fact.

class Warnings implements LoggerService {
  readonly lines: string[] = [];
  log(): void {}
  error(): void {}
  warn(message: unknown): void {
    this.lines.push(String(message));
  }
}

@Controller()
class Processors {
  @EventPattern<string>('avatar.resize')
  resize(): void {}

  @MessagePattern<string>('invoice.total')
  total(): number {
    return 1;
  }
}

@Controller()
class KafkaOnly {
  @EventPattern<string>('orders.created', Transport.KAFKA)
  created(): void {}
}

const modules: TestingModule[] = [];
afterEach(async () => {
  await Promise.all(modules.splice(0).map((module) => module.close()));
});

async function app(controller: new () => unknown): Promise<Warnings> {
  const module = await Test.createTestingModule({
    imports: [
      RedisTaskModule.forRoot({ connection: redisUrl(), prefix: testPrefix('no-transport'), reaperIntervalMs: false }),
    ],
    controllers: [controller],
  }).compile();
  const warnings = new Warnings();
  module.useLogger(warnings);
  modules.push(module);
  await module.init();
  return warnings;
}

describe('an app with handlers and RedisTaskModule but no RedisTaskTransport', () => {
  it('says nothing about handlers bound to another transport', async () => {
    const warnings = await app(KafkaOnly);
    expect(warnings.lines.filter((line) => line.includes('RedisTaskTransport'))).toEqual([]);
  });

  it('warns once at start-up, naming the handlers and how to connect a transport', async () => {
    const warnings = await app(Processors);
    expect(warnings.lines).toEqual([
      expect.stringMatching(
        /^this app has @EventPattern\/@MessagePattern handlers \("avatar.resize", "invoice.total"\) but no RedisTaskTransport: nothing in this process consumes their tasks.*app\.connectMicroservice\(\{ strategy: new RedisTaskTransport/,
      ),
    ]);
    // Once per process: a second app of the same process is not told again.
    expect((await app(Processors)).lines).toEqual([]);
  });
});
