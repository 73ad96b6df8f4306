// Serves require('rhea') from the copy beside this file, the one Stryker mutated, for the rhea shim started with
// `node --require client_mutation_resolve.js shim.js` (scripts/client_mutation_rhea.py). The shim's own
// node_modules/rhea is never loaded; the harness, the broker and the interposer are other processes.
'use strict';
const Module = require('module');
const path = require('path');

const copy = path.join(__dirname, 'rhea');
const resolve = Module._resolveFilename;
Module._resolveFilename = function resolveRheaToCopy(request, ...rest) {
  return resolve.call(this, request === 'rhea' ? copy : request, ...rest);
};
