import { createServer, request, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Browser } from 'playwright-core';
import { RedisTaskDashboardModule } from '../../lib/dashboard.js';
import { InvalidOptionError } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { freePort } from '../../scripts/redis-server.mjs';
import { launchBrowser } from '../support/browser.js';
import { deleteKeys, openRedis, redisUrl, testPrefix } from '../support/redis.js';

// A page of another origin, in a real Chromium, against the README's "behind a VPN" setup (actions on, no
// guard) under Nest's default app.enableCors(): it must not read the dashboard (nor its token or payloads),
// nor purge dead letters, whatever headers it sets (X-Forwarded-Host included); and a host name that is not
// the dashboard's (DNS rebinding) is refused when allowedHosts is set.

const redis = openRedis();
const prefix = testPrefix('dash-xorigin');
const queue = new PrefixKeys(prefix).queue('x.work');
let browser: Browser;
let app: INestApplication;
let attacker: Server;
let appUrl = '';
let attackerUrl = '';

/** A GET with the Host header a DNS-rebinding page's browser would send (its own host name). */
function getWithHost(url: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(url, { headers: { host } }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    })
      .on('error', reject)
      .end();
  });
}

beforeAll(async () => {
  browser = await launchBrowser();
  const port = await freePort();
  @Module({
    imports: [
      RedisTaskDashboardModule.forRoot({
        path: 'queues',
        connection: redisUrl(),
        prefix,
        actions: true,
        allowActionsWithoutGuard: true,
        allowedHosts: [`127.0.0.1:${port}`],
      }),
    ],
  })
  class AppModule {}
  app = await NestFactory.create(AppModule, { logger: false });
  app.enableCors();
  await app.listen(port, '127.0.0.1');
  appUrl = `http://127.0.0.1:${port}`;
  attacker = createServer((_request, response) => {
    response.setHeader('Content-Type', 'text/html');
    response.end('<!doctype html><title>elsewhere</title>');
  });
  await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
  attackerUrl = `http://127.0.0.1:${(attacker.address() as { port: number }).port}`;
  await redis.sadd(`${prefix}:queues`, 'x.work');
  await redis.lpush(
    queue.deadLetters,
    JSON.stringify({
      id: 'd1',
      pattern: 'x.work',
      reason: 'failed',
      attempts: 1,
      deadAt: 1,
      workerId: 'w',
      payload: { secret: 'card-4111' },
    }),
  );
});

afterAll(async () => {
  await app?.close();
  await new Promise<void>((resolve) => attacker?.close(() => resolve()));
  await browser?.close();
  await deleteKeys(redis, prefix);
  redis.disconnect();
});

describe('the dashboard against another origin (Chromium, enableCors(), actions without a guard)', () => {
  it('refuses a foreign page its reads and its purge, forged X-Forwarded-Host and all; the dead letter stays', async () => {
    const page = await browser.newPage();
    try {
      await page.goto(attackerUrl);
      const outcome = await page.evaluate(
        async ({ target, self }) => {
          // What the attack did: read the dashboard (CORS lets it), take the page's token, post with a forged host.
          const shell = await fetch(`${target}/queues`).then(
            async (r) => ({ status: r.status, text: await r.text() }),
            () => ({ status: 'blocked', text: '' }),
          );
          const token = /name="csrf-token" content="([^"]+)"/.exec(shell.text)?.[1] ?? 'none';
          const read = shell.status;
          const api = await fetch(`${target}/queues/api/dead-letters?name=x.work`).then(
            (r) => r.status,
            () => 'blocked',
          );
          const purge = await fetch(`${target}/queues/api/dead-letters/purge`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', 'X-Forwarded-Host': self, 'X-CSRF-Token': token },
            body: JSON.stringify({ name: 'x.work', all: true }),
          }).then(
            (r) => r.status,
            () => 'blocked',
          );
          return { read, api, purge };
        },
        { target: appUrl, self: new URL(attackerUrl).host },
      );
      expect(outcome).toEqual({ read: 403, api: 403, purge: 403 });
      expect(await redis.llen(queue.deadLetters)).toBe(1);
    } finally {
      await page.close();
    }
  });

  it('serves its own page and reads to itself, without payloads unless opted in', async () => {
    const page = await browser.newPage();
    try {
      const response = await page.goto(`${appUrl}/queues`);
      expect(response?.status()).toBe(200);
      const read = await page.evaluate(async () => {
        const answer = await fetch('/queues/api/dead-letters?name=x.work');
        return { status: answer.status, body: (await answer.json()) as { records: Record<string, unknown>[] } };
      });
      expect(read.status).toBe(200);
      expect(read.body.records.map((record) => record.id)).toEqual(['d1']);
      expect(read.body.records[0]).not.toHaveProperty('payload');
    } finally {
      await page.close();
    }
  });

  it('refuses a host name that is not one of allowedHosts (a DNS-rebinding page), the page and its reads alike', async () => {
    const rebound = `attacker.example:${new URL(appUrl).port}`;
    expect(await getWithHost(`${appUrl}/queues`, rebound)).toBe(403);
    expect(await getWithHost(`${appUrl}/queues/api/overview`, rebound)).toBe(403);
    expect(await getWithHost(`${appUrl}/queues/api/overview`, new URL(appUrl).host)).toBe(200);
  });

  it('refuses payloads without a guard unless opted out by name', () => {
    expect(() =>
      RedisTaskDashboardModule.forRoot({ path: 'q2', connection: redisUrl(), prefix, showPayloads: true }),
    ).toThrow(InvalidOptionError);
    expect(() =>
      RedisTaskDashboardModule.forRoot({ path: 'q2', connection: redisUrl(), prefix, showPayloads: true }),
    ).toThrow(/option "showPayloads"/);
    expect(() =>
      RedisTaskDashboardModule.forRoot({
        path: 'q2',
        connection: redisUrl(),
        prefix,
        showPayloads: true,
        allowPayloadsWithoutGuard: true,
      }),
    ).not.toThrow();
  });
});
