export default async function globalTeardown() {
  await globalThis.__tasksRedis?.stop();
}
