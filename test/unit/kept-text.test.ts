/**
 * The config text the daemon keeps for `config show` / `config save`
 * (src/daemon/kept-text.ts): a large one is held deflated and read back
 * whole; a small one as it is; a new text replaces the old.
 */
import { describe, expect, it } from 'vitest';
import { deflateRawSync, inflateRawSync } from 'node:zlib';
import { KeptText } from '../../src/daemon/kept-text.js';

describe('KeptText', () => {
  it('gives back a large text exactly (deflated in between) and a small one as it was', () => {
    const lines = ['# a comment: ünïcode kept', 'policies:'];
    for (let i = 0; i < 20000; i++) lines.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`);
    const big = `${lines.join('\n')}\n`;
    const k = new KeptText();
    expect(k.get()).toBe('');
    k.set(big);
    expect(big.length).toBeGreaterThan(64 * 1024);
    expect(k.get()).toBe(big);
    expect(k.held).toBeLessThan(big.length / 5);
    k.set('settings: {}\n');
    expect(k.get()).toBe('settings: {}\n');
    expect(k.held).toBe('settings: {}\n'.length);
    k.set(big + '# edited\n');
    expect(k.get()).toBe(`${big}# edited\n`);
  });

  it('takes the file as read (its UTF-8 bytes) as well as a string, large or small', () => {
    const lines = ['# ünïcode', 'localsids:'];
    for (let i = 0; i < 20000; i++) lines.push(`  - sid: 2001:db8:${i.toString(16)}::/48`);
    const big = `${lines.join('\n')}\n`;
    const k = new KeptText();
    k.set(Buffer.from(big, 'utf8'));
    expect(k.held).toBeLessThan(big.length / 5);
    expect(k.get()).toBe(big);
    k.set(Buffer.from('settings: {} # é\n', 'utf8'));
    expect(k.get()).toBe('settings: {} # é\n');
  });

  it('setSoon (a reload): the bytes readable at once, deflated on the threadpool, a later set winning over a deflate still running', async () => {
    const lines = ['# ünïcode', 'policies:'];
    for (let i = 0; i < 20000; i++) lines.push(`  - name: p${i}`);
    const big = `${lines.join('\n')}\n`;
    const bytes = Buffer.from(big, 'utf8');
    const k = new KeptText();
    const done = k.setSoon(bytes);
    expect(k.get()).toBe(big);
    expect(k.held).toBe(bytes.length);
    await done;
    expect(k.held).toBeLessThan(big.length / 5);
    expect(k.get()).toBe(big);
    // A save (set) while a reload's deflate runs: the save's text stays.
    const late = k.setSoon(Buffer.from(`${big}# older\n`, 'utf8'));
    k.set('settings: {}\n');
    await late;
    expect(k.get()).toBe('settings: {}\n');
    // A small file is kept as it is at once.
    await k.setSoon(Buffer.from('settings: {} # é\n', 'utf8'));
    expect(k.get()).toBe('settings: {} # é\n');
  });

  it("gives what it holds only to the text's owner (the config read from it), in the form it holds it", async () => {
    const big = `${Array.from({ length: 20000 }, (_, i) => `  - name: p${i}`).join('\n')}\n`;
    const bytes = Buffer.from(big, 'utf8');
    const a = {};
    const b = {};
    const k = new KeptText();
    k.set(bytes, a);
    const held = k.source(a);
    expect(held !== undefined && 'deflated' in held && inflateRawSync(held.deflated).toString('utf8')).toBe(big);
    expect(k.source(b)).toBeUndefined();
    // A reload's file as its parser's thread deflated it.
    k.setDeflated(deflateRawSync(Buffer.from(`${big}# b\n`)), b);
    expect(k.source(a)).toBeUndefined();
    expect(k.get()).toBe(`${big}# b\n`);
    // Not deflated yet: the bytes; a small text: the string; no owner given: no one's.
    const soon = k.setSoon(bytes, a);
    expect(k.source(a)).toEqual({ bytes });
    await soon;
    k.set('settings: {}\n', b);
    expect(k.source(b)).toEqual({ text: 'settings: {}\n' });
    k.set('settings: {}\n');
    expect(k.source(b)).toBeUndefined();
  });
});
