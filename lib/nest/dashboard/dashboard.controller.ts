import {
  Body,
  Controller,
  Get,
  Header,
  Headers,
  HttpCode,
  Inject,
  Post,
  Query,
  Req,
  UseGuards,
  type CanActivate,
  type Type,
} from '@nestjs/common';
import { APP_CSS, APP_JS, pageHtml } from './dashboard.assets.js';
import { DashboardService } from './dashboard.service.js';

type RequestHeaders = Readonly<Record<string, string | string[] | undefined>>;
type Body = Record<string, unknown>;

/** What every answer of the dashboard carries: no caching, no framing, no sniffing, nothing from elsewhere. */
const SECURITY_HEADERS: readonly [string, string][] = [
  ['Cache-Control', 'no-store'],
  ['X-Content-Type-Options', 'nosniff'],
  ['X-Frame-Options', 'DENY'],
  ['Referrer-Policy', 'same-origin'],
  [
    'Content-Security-Policy',
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  ],
];

function secured(): MethodDecorator {
  return (target, key, descriptor) => {
    for (const [name, value] of SECURITY_HEADERS) Header(name, value)(target, key, descriptor);
  };
}

/** The request's path without its query string (the page links its script and style from it). */
function pathOf(request: { url?: string; originalUrl?: string }): string {
  return (request.originalUrl ?? request.url ?? '/').split('?')[0];
}

/**
 * The dashboard's routes, mounted at `path` (a class per module, so two dashboards can be mounted).
 * Reads are GETs; state changes are POSTs that pass the guard, the `actions` option and the CSRF
 * checks. Works on Express and Fastify alike (nothing adapter-specific is touched).
 */
export function dashboardController(path: string, guard?: Type<CanActivate> | CanActivate): Type<unknown> {
  @Controller(path)
  class RedisTaskDashboardController {
    constructor(@Inject(DashboardService) private readonly dashboard: DashboardService) {}

    @Get()
    @secured()
    @Header('Content-Type', 'text/html; charset=utf-8')
    page(@Req() request: { url?: string; originalUrl?: string }, @Headers() headers: RequestHeaders): string {
      this.dashboard.admit(headers, 'page');
      const { title, actions, refreshMs } = this.dashboard.settings;
      return pageHtml({
        base: pathOf(request).replace(/\/+$/, ''),
        title,
        actions,
        refreshMs,
        token: this.dashboard.csrf.issue(),
      });
    }

    @Get('app.js')
    @secured()
    @Header('Content-Type', 'text/javascript; charset=utf-8')
    script(@Headers() headers: RequestHeaders): string {
      this.dashboard.admit(headers, 'page');
      return APP_JS;
    }

    @Get('app.css')
    @secured()
    @Header('Content-Type', 'text/css; charset=utf-8')
    style(@Headers() headers: RequestHeaders): string {
      this.dashboard.admit(headers, 'page');
      return APP_CSS;
    }

    @Get('api/overview')
    @secured()
    overview(@Headers() headers: RequestHeaders): Promise<unknown> {
      this.dashboard.admit(headers, 'read');
      return this.dashboard.overview();
    }

    @Get('api/pattern')
    @secured()
    pattern(@Headers() headers: RequestHeaders, @Query() query: Body): Promise<unknown> {
      this.dashboard.admit(headers, 'read');
      return this.dashboard.pattern(query);
    }

    @Get('api/dead-letters')
    @secured()
    deadLetters(@Headers() headers: RequestHeaders, @Query() query: Body): Promise<unknown> {
      this.dashboard.admit(headers, 'read');
      return this.dashboard.deadLetters(query);
    }

    @Get('api/schedules')
    @secured()
    schedules(@Headers() headers: RequestHeaders): Promise<unknown> {
      this.dashboard.admit(headers, 'read');
      return this.dashboard.schedules();
    }

    @Post('api/schedules/action')
    @HttpCode(200)
    @secured()
    scheduleAction(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.scheduleAction(body ?? {});
    }

    @Get('api/task')
    @secured()
    task(@Headers() headers: RequestHeaders, @Query() query: Body): Promise<unknown> {
      this.dashboard.admit(headers, 'read');
      return this.dashboard.task(query);
    }

    @Post('api/task/cancel')
    @HttpCode(200)
    @secured()
    cancelTask(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.cancelTask(body ?? {});
    }

    @Get('api/batch')
    @secured()
    batch(@Headers() headers: RequestHeaders, @Query() query: Body): Promise<unknown> {
      this.dashboard.admit(headers, 'read');
      return this.dashboard.batch(query);
    }

    @Post('api/batch/cancel')
    @HttpCode(200)
    @secured()
    cancelBatch(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.cancelBatch(body ?? {});
    }

    @Get('api/flow')
    @secured()
    flow(@Headers() headers: RequestHeaders, @Query() query: Body): Promise<unknown> {
      this.dashboard.admit(headers, 'read');
      return this.dashboard.flow(query);
    }

    @Post('api/flow/cancel')
    @HttpCode(200)
    @secured()
    cancelFlow(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.cancelFlow(body ?? {});
    }

    @Post('api/pause')
    @HttpCode(200)
    @secured()
    pause(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.pause(body ?? {}, true);
    }

    @Post('api/resume')
    @HttpCode(200)
    @secured()
    resume(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.pause(body ?? {}, false);
    }

    @Post('api/dead-letters/requeue')
    @HttpCode(200)
    @secured()
    requeue(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.requeue(body ?? {});
    }

    @Post('api/dead-letters/purge')
    @HttpCode(200)
    @secured()
    purge(@Headers() headers: RequestHeaders, @Body() body: Body): Promise<unknown> {
      this.dashboard.authorize(headers);
      return this.dashboard.purge(body ?? {});
    }
  }
  if (guard) UseGuards(guard)(RedisTaskDashboardController);
  return RedisTaskDashboardController;
}
