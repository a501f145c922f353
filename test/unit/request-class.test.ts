/**
 * The class a request gets in mup_api_request_duration_seconds
 * (src/daemon/request-time.ts): by method and path as the API routes them
 * (a trailing slash and the query left out).
 */
import { describe, expect, it } from 'vitest';
import { requestClass } from '../../src/daemon/request-time.js';

describe('requestClass', () => {
  it.each([
    ['GET', '/v1/status', 'read'],
    ['GET', '/metrics', 'read'],
    ['HEAD', '/v1/policies', 'read'],
    ['GET', '/v1/policies?limit=10', 'read'],
    [undefined, undefined, 'read'],
    ['POST', '/v1/policies', 'change'],
    ['PUT', '/v1/localsids/', 'change'],
    ['DELETE', '/v1/sessions?ue=10.0.0.1/32', 'change'],
    ['DELETE', '/v1/policies?match=10.0.0.0%2F24', 'change'],
    ['PATCH', '/v1/policies', 'other'],
    ['POST', '/v1/batch', 'batch'],
    ['POST', '/v1/batch/', 'batch'],
    ['POST', '/v1/reload?force=true', 'reload'],
    ['POST', '/v1/counters/reset', 'other'],
    ['POST', '/v1/config/save', 'other'],
    ['POST', '/v1/policiesx', 'other'],
    ['DELETE', '/', 'other'],
    ['POST', '/v1/./batch', 'batch'],
    ['POST', '/v1/policies/../batch', 'batch'],
    ['POST', 'http://mup/v1/reload', 'reload'],
    ['PUT', '/v1//policies', 'other'],
  ])('%s %s: %s', (method, url, cls) => {
    expect(requestClass(method, url)).toBe(cls);
  });
});
