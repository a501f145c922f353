/**
 * A lab or test step refused by a kernel without SRv6 routes names the
 * missing kernel option on the line a failed start prints (found on a
 * machine whose kernel lacked CONFIG_IPV6_SEG6_LWTUNNEL: `make demo` stopped
 * at "Error: lwt encapsulation type not supported.", which does not say
 * what to change).
 */
import { describe, expect, it } from 'vitest';
import { explainKernelError } from '../../src/lab/sh.js';

describe('explainKernelError', () => {
  it("names CONFIG_IPV6_SEG6_LWTUNNEL on the first line of iproute2's refusal of a seg6 or seg6local route", () => {
    // iproute2's own words, as `ip -batch` prints them with the failing line.
    const got = explainKernelError('Error: lwt encapsulation type not supported.\nCommand failed -:7\n');
    const [first, second] = got.split('\n');
    expect(first).toMatch(/^Error: lwt encapsulation type not supported\. \(this kernel has no SRv6 routes: .*CONFIG_IPV6_SEG6_LWTUNNEL/);
    expect(second).toBe('Command failed -:7');
  });
  it('adds it to the line that says it, wherever it is', () => {
    const [first, second] = explainKernelError('Warning: something else\nError: lwt encapsulation type not supported.').split('\n');
    expect(first).toBe('Warning: something else');
    expect(second).toMatch(/^Error: lwt encapsulation type not supported\. \(this kernel has no SRv6 routes: .*CONFIG_IPV6_SEG6_LWTUNNEL/);
  });
  it('leaves other errors as they are (trimmed)', () => {
    expect(explainKernelError('RTNETLINK answers: File exists\n')).toBe('RTNETLINK answers: File exists');
    expect(explainKernelError('Error: Unknown device type.')).toBe('Error: Unknown device type.');
  });
});
