/**
 * The `yaml` package (a parser that keeps source positions and comments),
 * loaded when first needed: a config error's line number, `config show` and
 * `config save`. Importing it at the top cost the daemon's start 50-90 ms
 * (its modules compiled and run, at load 3) for a package an accepted
 * config never uses (docs/bench.md, issue 19, session 11). Its types are
 * imported as types only, which loads nothing.
 */
import { createRequire } from 'node:module';
import type * as Yaml from 'yaml';

let lib: typeof Yaml | undefined;

export function yamlDoc(): typeof Yaml {
  lib ??= createRequire(import.meta.url)('yaml') as typeof Yaml;
  return lib;
}
