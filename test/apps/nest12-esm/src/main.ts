import { NestFactory } from '@nestjs/core';
import { RedisTaskTransport } from 'nestjs-redis-tasks';
import { AppModule } from './app.module.js';
import { tasksConnection } from './tasks/tasks.module.js';

async function bootstrap() {
  const app = await NestFactory.create(AppModule);
  // Hybrid: the HTTP API and the task worker in one process.
  app.connectMicroservice({ strategy: new RedisTaskTransport(tasksConnection()) });
  app.enableShutdownHooks();
  // HTTP first: it answers while Redis is unreachable (emit() fails fast, health says down); the
  // worker starts consuming once Redis answers.
  await app.listen(process.env.PORT ?? 3000);
  await app.startAllMicroservices();
}
await bootstrap();
