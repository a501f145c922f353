#!/usr/bin/env -S node --max-semi-space-size=4
import { main } from '../dist/cli/main.js';
main(process.argv).then((code) => { process.exitCode = code; });
