#!/usr/bin/env node
// amqp-conformance client shim for rhea (see ../README.md for the contract).
// stdout carries only JSON lines; every diagnostic goes to stderr.
'use strict';

// Nothing but JSON may reach stdout: route console.log/info (ours or the library's) to stderr.
console.log = console.error;
console.info = console.error;

const fs = require('fs');
const path = require('path');
const readline = require('readline');
const rhea = require('rhea');

const SND_SETTLE = { unsettled: 0, settled: 1, mixed: 2 };
const RCV_SETTLE = { first: 0, second: 1 };
const SND_SETTLE_NAME = ['unsettled', 'settled', 'mixed'];
const RCV_SETTLE_NAME = ['first', 'second'];
const TERMINAL = ['accepted', 'rejected', 'released', 'modified'];
const DEFAULT_TIMEOUT_MS = 10000; // for a command that gives no timeout_ms

function libraryVersion() {
  try {
    const main = require.resolve('rhea');
    const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(main), '..', 'package.json'), 'utf8'));
    return pkg.version;
  } catch (e) {
    return null;
  }
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function diag() {
  console.error.apply(console, ['[shim-rhea]'].concat(Array.from(arguments)));
}

class ShimError extends Error {
  constructor(error) {
    super(error.description || error.kind);
    this.error = error;
  }
}

function clientError(description) {
  return new ShimError({ kind: 'client', description: description });
}

function describeThrown(e) {
  if (e instanceof ShimError) return e.error;
  if (e && e.name && e.message !== undefined) return { kind: 'client', description: e.name + ': ' + e.message };
  return { kind: 'client', description: String(e) };
}

function hex(tag) {
  if (tag === undefined || tag === null) return null;
  if (Buffer.isBuffer(tag)) return tag.toString('hex');
  return Buffer.from(String(tag)).toString('hex');
}

function nullable(v) {
  return v === undefined ? null : v;
}

function plain(v) {
  // rhea's unwrapped values: maps arrive as plain objects, symbols/strings as strings.
  if (v === undefined) return null;
  if (Buffer.isBuffer(v)) return v.toString('hex');
  if (typeof v === 'bigint') return v.toString();
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    const o = {};
    for (const k of Object.keys(v)) o[k] = plain(v[k]);
    return o;
  }
  if (Array.isArray(v)) return v.map(plain);
  return v;
}

// A delivery state as rhea's API gives it (delivery.remote_state, an outcome composite).
function stateJson(state) {
  if (!state) return null;
  const type = state.constructor && state.constructor.composite_type;
  if (!type) return { type: 'unknown', raw: plain(state) };
  const out = { type: type };
  if (type === 'rejected') {
    const err = state.error;
    out.condition = err ? nullable(err.condition) : null;
    out.description = err ? nullable(err.description) : null;
    if (err && err.info) out.info = plain(err.info);
  } else if (type === 'modified') {
    out.delivery_failed = nullable(state.delivery_failed);
    out.undeliverable_here = nullable(state.undeliverable_here);
    out.message_annotations = plain(state.message_annotations);
  } else if (type === 'received') {
    out.section_number = nullable(state.section_number);
    out.section_offset = nullable(state.section_offset);
  }
  return out;
}

function errorFrom(scope, err) {
  // err: an AMQP error as rhea exposes it (link.error, session.error, connection.error or an
  // errors.ConnectionError in a context): it has condition and description.
  return {
    kind: 'amqp',
    scope: scope,
    condition: err && err.condition !== undefined ? err.condition : null,
    description: err && err.description !== undefined ? err.description : null,
  };
}

function timer(ms, what, reject) {
  const t = setTimeout(() => reject(new ShimError({ kind: 'timeout', description: what() })), ms);
  return t;
}

// ---------------------------------------------------------------------------------------------
// One connect ... close cycle.

class Cycle {
  constructor() {
    this.connection = null;
    this.links = new Map(); // harness name -> LinkState
    this.byLink = new Map(); // rhea link -> LinkState, for the link an event's context names (kept after a detach)
    this.waiters = new Set(); // objects with fail(error) to call when the connection dies
    this.closing = false;
    this.dead = null; // the error that lost the connection
    this.closed = false;
  }

  // The session or connection under some links ended: those links are dead (a later command on
  // one gets ``error``), and the commands waiting on them fail with it. Returns how many did.
  lost(error, session) {
    if (!session) this.dead = this.dead || error;
    for (const ls of this.links.values()) {
      if (!session || ls.link.session === session) ls.dead = ls.dead || error;
    }
    let failed = 0;
    for (const w of Array.from(this.waiters)) {
      if (!session || w.session === session) {
        w.fail(error);
        failed++;
      }
    }
    return failed;
  }
}

class LinkState {
  constructor(name, role, link, rcvSettleMode) {
    this.name = name;
    this.role = role;
    this.link = link;
    this.awaiting = null; // {kind: 'open'|'close', resolve, reject}
    // sender
    this.sent = new Map(); // delivery -> {index, api}
    this.sendWaiter = null;
    // receiver
    this.buffer = []; // {message, delivery} that arrived and were not yet handed to a receive
    this.rcvSettleMode = rcvSettleMode; // the rcv_settle_mode the shim attached with ('first' or 'second'; undefined: first)
    this.received = new Map(); // delivery -> {index, reported}
    this.receiveWaiter = null;
    this.drainWaiter = null;
  }
}

let cycle = null;

function requireConnection() {
  if (!cycle || !cycle.connection || cycle.closed) throw clientError('no connection: send connect first');
  if (cycle.dead) throw new ShimError(Object.assign({}, cycle.dead)); // the connection was lost
  return cycle;
}

function requireLink(name) {
  requireConnection();
  const ls = cycle.links.get(name);
  if (!ls) throw clientError('unknown link ' + JSON.stringify(name));
  if (ls.dead) throw new ShimError(Object.assign({}, ls.dead));
  return ls;
}

function wireConnectionEvents(cyc, conn, pending) {
  // After its connect failed or its close completed, a cycle's connection is only logged.
  const over = (what, detail) => {
    if (!cyc.closed) return false;
    diag('after the end of its cycle, connection ' + cyc.connection.options.id + ': ' + what, detail || '');
    return true;
  };
  conn.on('connection_open', () => {
    if (pending.open) pending.open.resolve();
  });
  conn.on('connection_error', (context) => {
    if (over('connection_error', context.error && context.error.message)) return;
    const err = errorFrom('connection', context.error || conn.error);
    if (pending.open) return pending.open.reject(new ShimError(err));
    if (pending.close) return pending.close.reject(new ShimError(err));
    if (!cyc.lost(err, null)) emit({ event: 'error', scope: 'connection', condition: err.condition, description: err.description });
  });
  conn.on('connection_close', (context) => {
    if (context && context.error) return; // reported by connection_error
    if (pending.close) return pending.close.resolve();
    if (over('connection_close')) return;
    if (pending.open) return pending.open.reject(clientError('connection_close before connection_open'));
    const err = { kind: 'amqp', scope: 'connection', condition: null, description: null };
    if (!cyc.lost(err, null)) emit({ event: 'remote-close', scope: 'connection', condition: null, description: null });
  });
  conn.on('disconnected', (context) => {
    const e = context && context.error;
    const description = e ? (e.name || 'Error') + ': ' + e.message : 'disconnected';
    if (pending.open) return pending.open.reject(clientError(description));
    if (pending.close) {
      if (e) return pending.close.reject(clientError(description));
      return pending.close.resolve();
    }
    if (over('disconnected', description)) return;
    if (!cyc.lost({ kind: 'client', description: description }, null)) {
      emit({ event: 'error', scope: 'connection', condition: null, description: description });
    }
  });
  conn.on('protocol_error', (e) => {
    const description = 'ProtocolError: ' + (e && e.message);
    if (pending.open) return pending.open.reject(clientError(description));
    if (over('protocol_error', description)) return;
    emit({ event: 'error', scope: 'connection', condition: null, description: description });
  });
  conn.on('error', (e) => {
    const description = (e && e.name ? e.name : 'Error') + ': ' + (e && e.message);
    if (pending.open) return pending.open.reject(clientError(description));
    if (pending.close) return pending.close.reject(clientError(description));
    if (over('error', description)) return;
    if (!cyc.lost({ kind: 'client', description: description }, null)) {
      emit({ event: 'error', scope: 'connection', condition: null, description: description });
    }
  });
  conn.on('session_error', (context) => {
    if (over('session_error')) return;
    const err = errorFrom('session', context.session && context.session.error);
    if (!cyc.lost(err, context.session)) {
      emit({ event: 'error', scope: 'session', condition: err.condition, description: err.description });
    }
  });
  conn.on('session_close', (context) => {
    if (context.session && context.session.error) return; // reported by session_error
    if (cyc.closing || over('session_close')) return;
    const err = { kind: 'amqp', scope: 'session', condition: null, description: null };
    if (!cyc.lost(err, context.session)) emit({ event: 'remote-close', scope: 'session', condition: null, description: null });
  });
}

async function cmdConnect(cmd) {
  if (cycle && cycle.connection && !cycle.closed && !cycle.dead) throw clientError('already connected: close first');
  let url;
  try {
    url = new URL(cmd.url);
  } catch (e) {
    throw clientError('bad url ' + JSON.stringify(cmd.url));
  }
  const tls = url.protocol === 'amqps:';
  const options = {
    host: url.hostname.replace(/^\[|\]$/g, ''),
    port: url.port ? Number(url.port) : (tls ? 5671 : 5672),
    container_id: cmd.container_id,
    reconnect: false,
  };
  if (tls) options.transport = 'tls';
  if (cmd.hostname !== undefined && cmd.hostname !== null) options.hostname = cmd.hostname;
  if (url.username) options.username = decodeURIComponent(url.username);
  if (url.password) options.password = decodeURIComponent(url.password);

  const cyc = new Cycle();
  cycle = cyc;
  const pending = {};
  const container = rhea.create_container({ id: cmd.container_id });
  // rhea raises its container's 'error' for a link's or a session's error that no listener handled (link.js
  // on_detach, session.js on_end: a LinkError, a SessionError). The shim handles each at its link and session, so
  // one here is rhea telling its application of an error once more: reported as rhea tells it.
  container.on('error', (e) => {
    diag('container error event:', e && e.message);
    const scope = e && e.link ? 'link' : e && e.session ? 'session' : 'connection';
    const told = errorFrom(scope, e);
    const event = { event: 'error', scope: scope, condition: told.condition, description: told.description };
    const ls = e && e.link ? cyc.byLink.get(e.link) : undefined;
    if (ls) event.link = ls.name;
    emit(event);
  });
  const conn = container.create_connection(options);
  cyc.connection = conn;
  wireConnectionEvents(cyc, conn, pending);
  await new Promise((resolve, reject) => {
    const t = timer(cmd.timeout_ms, () => 'no connection_open within ' + cmd.timeout_ms + ' ms', reject);
    pending.open = {
      resolve: () => { clearTimeout(t); pending.open = null; resolve(); },
      // the cycle is over at once: what rhea reports of this connection afterwards is only logged
      reject: (e) => { clearTimeout(t); pending.open = null; cyc.closed = true; reject(e); },
    };
    try {
      conn.connect();
    } catch (e) {
      pending.open.reject(e);
    }
  }).catch((e) => {
    cyc.closed = true;
    try { if (conn.socket) conn.socket.destroy(); } catch (ignored) { /* nothing */ }
    throw e;
  });
  cyc.pending = pending;
  // the broker's open as rhea's documented connection accessors give it (typings/connection.d.ts)
  return {
    remote_container: nullable(conn.container_id),
    remote_properties: plain(conn.properties),
    remote_offered_capabilities: plain(conn.offered_capabilities),
    remote_desired_capabilities: plain(conn.desired_capabilities),
  };
}

// The link an event is about, as rhea hands it to its handlers: context.sender for a sender's events,
// context.receiver for a receiver's (rhea's documented event argument, the way its examples reach the link).
// An event whose context names no link of this cycle reaches no command: logged and dropped.
function linkOf(cyc, context, role, ev) {
  const link = context ? (role === 'sender' ? context.sender : context.receiver) : undefined;
  const ls = link ? cyc.byLink.get(link) : undefined;
  if (!ls) diag("'" + ev + "' event: its context names no " + role + ' link of this connection; dropped');
  return ls;
}

// The handlers of one link's events: each finds its link through the event's context.
function linkEvents(cyc, link, role) {
  const on = (ev, handler) => link.on(ev, (context) => {
    const ls = linkOf(cyc, context, role, ev);
    if (ls) handler(ls, context);
  });
  const prefix = role === 'sender' ? 'sender_' : 'receiver_';
  on(prefix + 'open', (ls) => {
    if (ls.awaiting && ls.awaiting.kind === 'open') ls.awaiting.opened();
  });
  on(prefix + 'error', (ls) => {
    // the remote detached with an error; a close event follows.
    const link = ls.link;
    const err = errorFrom('link', link.error);
    ls.dead = err;
    if (ls.awaiting) return ls.awaiting.reject(new ShimError(err));
    if (!failLinkWaiters(ls, err)) {
      emit({ event: 'error', scope: 'link', link: ls.name, condition: err.condition, description: err.description });
    }
  });
  on(prefix + 'close', (ls) => {
    const link = ls.link;
    if (link.error) {
      // this is rhea telling its application the link closed, with the error it closed with; the error event
      // comes first and has failed what waited on the link. A close with an error and no error event before it
      // still ends the link: what waits on it fails with that error, not at its time-out
      const err = errorFrom('link', link.error);
      if (!ls.dead) {
        ls.dead = err;
        if (ls.awaiting) ls.awaiting.reject(new ShimError(err));
        else failLinkWaiters(ls, err);
      }
      emit({ event: 'remote-close', scope: 'link', link: ls.name, condition: err.condition, description: err.description });
      return;
    }
    if (ls.awaiting && ls.awaiting.kind === 'close') return ls.awaiting.resolve();
    const err = { kind: 'amqp', scope: 'link', condition: null, description: null };
    ls.dead = err;
    if (ls.awaiting) return ls.awaiting.reject(new ShimError(err));
    if (!failLinkWaiters(ls, err)) emit({ event: 'remote-close', scope: 'link', link: ls.name, condition: null, description: null });
  });

  if (role === 'sender') {
    for (const ev of TERMINAL) {
      on(ev, (ls, context) => senderUpdate(ls, context.delivery, "sender '" + ev + "' event", ev));
    }
    on('received', (ls, context) => senderUpdate(ls, context.delivery, "sender 'received' event"));
    on('settled', (ls, context) => senderUpdate(ls, context.delivery, "sender 'settled' event"));
    // credit lets rhea write queued transfers (pre-settled ones raise no event of their own)
    on('sender_flow', (ls) => { if (ls.sendWaiter) setImmediate(ls.sendWaiter.check); });
    on('sendable', (ls) => { if (ls.sendWaiter) ls.sendWaiter.sendable(); });
    // the broker's flow set drain (AMQP 1.0 2.6.7): told to the harness and, with no message left to hand to
    // rhea, answered as rhea's API asks an application with nothing to send (Sender.set_drained(true): rhea then
    // moves its delivery-count through the credit left and writes the flow that says so)
    on('sender_draining', (ls, context) => {
      emit({ event: 'drain-requested', link: ls.name, api: "sender 'sender_draining' event" });
      if (!ls.sendWaiter || ls.sendWaiter.allHanded()) context.sender.set_drained(true);
    });
  } else {
    on('message', (ls, context) => {
      // kept for a receive; with none waiting (a drain, or no command) it stays here, neither disposed of nor settled
      ls.buffer.push({ message: context.message, delivery: context.delivery });
      pumpReceive(ls);
    });
    // rhea raises it for the broker's flow with drain set and link-credit 0 (link.js Receiver.on_flow): the drain ended
    on('receiver_drained', (ls) => {
      if (ls.drainWaiter) ls.drainWaiter.drained();
      else diag("'receiver_drained' event on " + ls.name + ' with no drain waiting');
    });
    on('settled', (ls, context) => {
      const rec = ls.received.get(context.delivery);
      if (rec && rec.reported) {
        emit({
          event: 'delivery-update', link: ls.name, index: rec.index, tag: hex(context.delivery.tag),
          remote_state: stateJson(context.delivery.remote_state),
          remote_settled: nullable(context.delivery.remote_settled),
          locally_settled: nullable(context.delivery.settled), api: "receiver 'settled' event",
        });
      }
    });
  }
}

function failLinkWaiters(ls, err) {
  let failed = 0;
  if (ls.sendWaiter) { ls.sendWaiter.fail(err); failed++; }
  if (ls.receiveWaiter) { ls.receiveWaiter.fail(err); failed++; }
  if (ls.drainWaiter) { ls.drainWaiter.fail(err); failed++; }
  return failed;
}

async function cmdAttach(cmd) {
  const cyc = requireConnection();
  if (cyc.links.has(cmd.link)) throw clientError('link ' + JSON.stringify(cmd.link) + ' already attached');
  if (cmd.role !== 'sender' && cmd.role !== 'receiver') throw clientError('role must be sender or receiver');
  const snd = cmd.snd_settle_mode === undefined ? undefined : SND_SETTLE[cmd.snd_settle_mode];
  const rcv = cmd.rcv_settle_mode === undefined ? undefined : RCV_SETTLE[cmd.rcv_settle_mode];
  if (cmd.snd_settle_mode !== undefined && snd === undefined) throw clientError('bad snd_settle_mode ' + cmd.snd_settle_mode);
  if (cmd.rcv_settle_mode !== undefined && rcv === undefined) throw clientError('bad rcv_settle_mode ' + cmd.rcv_settle_mode);

  const options = {};
  if (snd !== undefined) options.snd_settle_mode = snd;
  if (rcv !== undefined) options.rcv_settle_mode = rcv;
  let link;
  if (cmd.role === 'sender') {
    options.target = { address: cmd.address };
    options.autosettle = true; // rhea's default: settle locally once the peer settles
    options.treat_modified_as_released = false; // raise 'modified' for modified, not also 'released'
    link = cyc.connection.open_sender(options);
  } else {
    options.source = { address: cmd.address };
    options.autoaccept = false; // the shim gives each outcome itself
    options.autosettle = true; // rhea's default: under rcv_settle_mode second, settle when the sender does
    options.credit_window = 0; // no prefetch window: a receive command grants its count with add_credit
    // (cmd.drains is not needed: rhea drains any receiver, see cmdDrain)
    link = cyc.connection.open_receiver(options);
  }
  const ls = new LinkState(cmd.link, cmd.role, link, cmd.rcv_settle_mode);
  cyc.links.set(cmd.link, ls);
  cyc.byLink.set(link, ls);
  linkEvents(cyc, link, cmd.role);

  await new Promise((resolve, reject) => {
    let t = null;
    const waiter = { session: link.session, fail: (err) => done(new ShimError(err)) };
    const done = (err) => {
      clearTimeout(t);
      ls.awaiting = null;
      cyc.waiters.delete(waiter);
      if (err) reject(err); else resolve();
    };
    t = timer(cmd.timeout_ms, () => 'no ' + cmd.role + '_open within ' + cmd.timeout_ms + ' ms', (e) => done(e));
    cyc.waiters.add(waiter);
    ls.awaiting = {
      kind: 'open',
      opened: () => {
        // A refusing peer answers the attach with a null terminus and detaches at once; wait for
        // that detach (it usually comes in the same read) rather than report the link open.
        // rhea keeps a null terminus as its typed null (types.unwrap gives null for it); link.target and
        // link.source are its documented accessors for the broker's attach
        const terminus = rhea.types.unwrap(cmd.role === 'sender' ? link.target : link.source);
        if (terminus === undefined || terminus === null) {
          diag('remote attach of ' + cmd.link + ' has a null ' + (cmd.role === 'sender' ? 'target' : 'source') + '; waiting for its detach');
          // no detach within a second: report the open rhea raised
          clearTimeout(t);
          t = setTimeout(() => done(), Math.min(1000, cmd.timeout_ms));
          return;
        }
        setImmediate(() => { if (ls.awaiting && ls.awaiting.kind === 'open') done(); });
      },
      resolve: () => done(),
      reject: (e) => done(e),
    };
  }).catch((e) => {
    cyc.links.delete(cmd.link);
    throw e;
  });
  // the broker's attach as rhea's documented link accessors give it (link.snd_settle_mode, link.rcv_settle_mode,
  // link.properties, ...: typings/link.d.ts)
  const remoteSnd = link.snd_settle_mode;
  const remoteRcv = link.rcv_settle_mode;
  return {
    remote_snd_settle_mode: remoteSnd === undefined || remoteSnd === null ? null : nullable(SND_SETTLE_NAME[remoteSnd]),
    remote_rcv_settle_mode: remoteRcv === undefined || remoteRcv === null ? null : nullable(RCV_SETTLE_NAME[remoteRcv]),
    remote_properties: plain(link.properties),
    remote_offered_capabilities: plain(link.offered_capabilities),
    remote_desired_capabilities: plain(link.desired_capabilities),
    remote_max_message_size: plain(link.max_message_size),
  };
}

// ---------------------------------------------------------------------------------------------
// send

function recApi(d, rec) {
  const parts = rec.calls.slice();
  if (rec.presettled && d.remote_settled) {
    parts.push('transfer written settled (remote_settled is rhea\'s own mark for that, not a peer\'s word)');
  }
  return parts.concat(rec.events).join(', then ');
}

// A sent delivery's remote state as rhea told it: the outcome its first outcome event named (an application
// learns an outcome from the 'accepted', 'rejected', 'released' or 'modified' event; a terminal state is final,
// so a later event naming another contradicts it), with the fields of delivery.remote_state where that is the
// same outcome, else none; before any outcome event, delivery.remote_state.
function sentState(d, rec) {
  const state = stateJson(d.remote_state);
  if (!rec.toldOutcome || (state && state.type === rec.toldOutcome)) return state;
  return { type: rec.toldOutcome };
}

function sendReport(d, rec) {
  return {
    index: rec.index,
    tag: hex(d.tag),
    remote_state: sentState(d, rec),
    remote_settled: nullable(d.remote_settled),
    locally_settled: nullable(d.settled),
    api: recApi(d, rec),
  };
}

function senderUpdate(ls, d, api, outcome) {
  const rec = ls.sent.get(d);
  if (!rec) return;
  if (outcome && !rec.toldOutcome) rec.toldOutcome = outcome;
  // the contract's settling policy (peers/shims/README.md): under the broker's rcv_settle_mode second
  // the sender settles a delivery once its state is terminal (003: "the sender would trigger
  // settlement based on seeing the delivery state transition to a terminal state"); rhea's autosettle
  // waits for the receiver to settle first, so the application settles, with Delivery.update(true)
  if (!d.settled && !d.remote_settled && ls.link.rcv_settle_mode === RCV_SETTLE.second && sendDone(d)) {
    d.update(true);
    api += ', then Delivery.update(true) (rcv_settle_mode second: the sender settles first)';
  }
  if (rec.replied) {
    emit({
      event: 'delivery-update', link: ls.name, index: rec.index, tag: hex(d.tag),
      remote_state: sentState(d, rec), remote_settled: nullable(d.remote_settled),
      locally_settled: nullable(d.settled), api: api,
    });
  } else {
    rec.events.push(api);
    // rhea raises the outcome event and then 'settled' for each delivery of a disposition in
    // turn: look once it has finished, so that a report reflects the whole disposition.
    if (ls.sendWaiter) setImmediate(ls.sendWaiter.check);
  }
}

function sendDone(d) {
  if (d.remote_settled) return true;
  const state = stateJson(d.remote_state);
  return Boolean(state && TERMINAL.indexOf(state.type) >= 0);
}

async function cmdSend(cmd) {
  const ls = requireLink(cmd.link);
  if (ls.role !== 'sender') throw clientError('link ' + cmd.link + ' is not a sender');
  if (ls.sendWaiter) throw clientError('a send is already in progress on ' + cmd.link);
  const sender = ls.link;
  const snd = sender.local.attach.snd_settle_mode;
  const messages = cmd.messages || [];
  const presettled = new Set();
  // rhea settles a send only through the link's sender settle mode: Sender.send() marks the delivery
  // settled when snd_settle_mode is settled (1) and never otherwise; there is no per-message choice
  // (its maintainer: https://github.com/amqp/rhea/issues/72). Settling the returned delivery with
  // Delivery.update(true) before its transfer is written does make rhea write it settled, but rhea
  // then also writes a disposition for it (even before the transfer when credit is short), which
  // is not a pre-settled send.
  if (snd === 1 && messages.some((m) => !m.settled)) {
    throw new ShimError({ kind: 'unsupported', description: 'rhea sends every message settled on a link attached with snd_settle_mode settled (Sender.send sets delivery.settled): it cannot send one unsettled there' });
  }
  if (snd !== 1 && messages.some((m) => m.settled)) {
    throw new ShimError({ kind: 'unsupported', description: 'rhea sends a message pre-settled only on a link attached with snd_settle_mode settled (Sender.send); it has no per-message settled send on a ' + (snd === 0 ? 'unsettled' : 'mixed') + ' link' });
  }
  // rhea's way to send within the broker's credit (its examples' 'sendable' handler): hand a message to
  // Sender.send only while sender.sendable() says the link may send, and go on at the 'sendable' event
  // rhea raises when a flow (or a freed outgoing buffer) lets it send again. rhea takes a credit when it
  // writes the transfer, on a later tick, so the shim hands over one message and looks again after that.
  const deliveries = [];
  let scheduled = false;
  let finished = false; // the command has replied: nothing more is handed over
  const pump = () => {
    scheduled = false;
    if (finished || deliveries.length >= messages.length || !sender.sendable()) return;
    const i = deliveries.length;
    const d = sender.send({ body: messages[i].body });
    const rec = { index: i, calls: ['Sender.sendable() true, Sender.send() returned'], events: [], replied: false };
    if (messages[i].settled) {
      rec.calls = ['Sender.sendable() true, Sender.send() returned (snd_settle_mode settled: rhea sends it settled)'];
      rec.presettled = true;
      presettled.add(d);
    }
    ls.sent.set(d, rec);
    deliveries.push(d);
    // rhea writes the transfer on the next tick (a pre-settled one is then complete, with no event)
    if (ls.sendWaiter) setImmediate(ls.sendWaiter.check);
    schedulePump();
  };
  const schedulePump = () => {
    if (!scheduled) {
      scheduled = true;
      setImmediate(pump);
    }
  };
  const cyc = cycle;
  return await new Promise((resolve, reject) => {
    let t = null;
    // failure: the error that ended the send before every message reached its end (the broker's close, end or
    // detach, or the connection lost): the command fails with it, its reply listing the reports as far as they got
    const finish = (error, failure) => {
      clearTimeout(t);
      ls.sendWaiter = null;
      cyc.waiters.delete(waiter);
      const reports = deliveries.map((d) => {
        const rec = ls.sent.get(d);
        rec.replied = true;
        if (!presettled.has(d) && !sendDone(d) && error) rec.events.push(error);
        return sendReport(d, rec);
      });
      // a message the shim never handed to rhea: sendable() stayed false until the command ended
      for (let i = deliveries.length; i < messages.length; i++) {
        reports.push({
          index: i, tag: null, remote_state: null, remote_settled: false, locally_settled: false,
          api: 'not sent: Sender.sendable() false and no \'sendable\' event' + (error ? ', then ' + error : ' within ' + cmd.timeout_ms + ' ms'),
        });
      }
      if (failure) {
        const e = new ShimError(Object.assign({}, failure));
        e.extra = { deliveries: reports };
        reject(e);
      } else {
        resolve({ deliveries: reports });
      }
    };
    const check = () => {
      if (finished) return;
      if (deliveries.length < messages.length) return;
      // A pre-settled delivery has reached all it will once rhea has written its transfer
      // (rhea then marks it remote_settled itself); an unsettled one once the peer settled it
      // or gave it a terminal outcome.
      for (const d of deliveries) {
        if (presettled.has(d)) {
          if (!d.remote_settled) return;
        } else if (!sendDone(d)) {
          return;
        }
      }
      finished = true;
      finish(null);
    };
    const waiter = {
      session: sender.session,
      check: check,
      sendable: () => {
        if (!finished) schedulePump();
      },
      allHanded: () => finished || deliveries.length >= messages.length,
      fail: (err) => {
        if (finished) return;
        finished = true;
        finish(err.kind + (err.condition ? ' ' + err.condition : '') + (err.description ? ': ' + err.description : ''), err);
      },
    };
    ls.sendWaiter = waiter;
    cyc.waiters.add(waiter);
    t = setTimeout(() => {
      if (finished) return;
      finished = true;
      for (const d of deliveries) {
        const rec = ls.sent.get(d);
        if (presettled.has(d) ? !d.remote_settled : !sendDone(d)) {
          rec.events.push('nothing more within ' + cmd.timeout_ms + ' ms' + (presettled.has(d) && !d.remote_settled ? ' (transfer not yet written)' : ''));
        }
      }
      finish(null);
    }, cmd.timeout_ms);
    pump();
    setImmediate(check); // a send of no messages is done at once
  });
}

// ---------------------------------------------------------------------------------------------
// receive

function outcomeCall(outcome, settle, rcvFirst) {
  // Returns {apply(delivery), api, disposed} or throws unsupported. rcvFirst: the receiving link was attached with
  // rcv_settle_mode first.
  const type = outcome && outcome.type;
  const msg = rhea.message;
  let state;
  let method;
  let arg;
  const disposed = { type: type };
  if (type === 'accepted') {
    state = msg.accepted();
    method = 'accept';
  } else if (type === 'released') {
    state = msg.released();
    method = 'release';
  } else if (type === 'rejected') {
    if (outcome.condition === undefined || outcome.condition === null) {
      if (outcome.description !== undefined && outcome.description !== null) {
        throw new ShimError({ kind: 'unsupported', description: 'an AMQP error needs a condition: rhea cannot reject with a description and no condition' });
      }
      arg = undefined;
      disposed.condition = null;
      disposed.description = null;
    } else {
      arg = { condition: outcome.condition };
      if (outcome.description !== undefined && outcome.description !== null) arg.description = outcome.description;
      disposed.condition = outcome.condition;
      disposed.description = nullable(outcome.description);
    }
    state = msg.rejected(arg === undefined ? {} : { error: arg });
    method = 'reject';
  } else if (type === 'modified') {
    arg = {};
    for (const f of ['delivery_failed', 'undeliverable_here', 'message_annotations']) {
      if (outcome[f] !== undefined && outcome[f] !== null) {
        arg[f] = outcome[f];
        disposed[f] = outcome[f];
      } else {
        disposed[f] = null;
      }
    }
    state = msg.modified(arg);
    method = 'modified';
  } else {
    throw clientError('unknown outcome ' + JSON.stringify(outcome));
  }
  if (settle === rcvFirst) {
    // rhea's own default, as its examples use it: accept(), release(), reject() and modified() settle the delivery
    // under rcv_settle_mode first and leave it unsettled under second (session.js), which is what is asked here
    return {
      apply: (d) => (arg === undefined ? d[method]() : d[method](arg)),
      api: 'Delivery.' + method + '()',
      disposed: disposed,
    };
  }
  return {
    apply: (d) => d.update(settle, state.described()),
    api: 'Delivery.update(' + settle + ', ' + type + ')',
    disposed: disposed,
  };
}

function bodyJson(message) {
  const b = message ? message.body : undefined;
  if (typeof b === 'string') return { body: b };
  return { body: null, body_repr: require('util').inspect(b, { depth: 4 }) };
}

function pumpReceive(ls) {
  const w = ls.receiveWaiter;
  if (!w) return;
  while (ls.buffer.length && w.reports.length < w.count) {
    const item = ls.buffer.shift();
    const d = item.delivery;
    const m = item.message || {};
    const settledOnArrival = Boolean(d.remote_settled);
    let applyError = null;
    try {
      w.call.apply(d);
    } catch (e) {
      applyError = describeThrown(e);
    }
    const index = w.reports.length;
    const report = Object.assign({ index: index }, bodyJson(m), {
      tag: hex(d.tag),
      settled_on_arrival: settledOnArrival,
      delivery_count: nullable(m.delivery_count),
      first_acquirer: nullable(m.first_acquirer),
      disposed: applyError ? null : w.call.disposed,
      remote_state: stateJson(d.remote_state),
      locally_settled: nullable(d.settled),
      remote_settled: nullable(d.remote_settled),
      api: (applyError ? w.call.api + ' threw ' + applyError.description : w.call.api) +
        (settledOnArrival ? ' (the delivery arrived settled: rhea writes no disposition for it)' : ''),
    });
    ls.received.set(d, { index: index, reported: true });
    w.reports.push(report);
  }
  if (w.reports.length >= w.count) w.finish(null);
}

async function cmdReceive(cmd) {
  const ls = requireLink(cmd.link);
  if (ls.role !== 'receiver') throw clientError('link ' + cmd.link + ' is not a receiver');
  if (ls.receiveWaiter) throw clientError('a receive is already in progress on ' + cmd.link);
  // throws unsupported before any credit is given
  const call = outcomeCall(cmd.outcome, Boolean(cmd.settle), ls.rcvSettleMode !== 'second');
  const count = cmd.count;
  const receiver = ls.link;
  const cyc = cycle;
  // Credit for what is still to come: count less what has arrived and less credit outstanding.
  const wanted = count - ls.buffer.length - receiver.credit;
  if (wanted > 0) receiver.add_credit(wanted);
  return await new Promise((resolve, reject) => {
    let t = null;
    const w = {
      session: receiver.session,
      count: count,
      call: call,
      reports: [],
      finish: (err) => {
        clearTimeout(t);
        ls.receiveWaiter = null;
        cyc.waiters.delete(w);
        if (err) {
          // the error reply also lists what did arrive (and was disposed) before it
          const e = new ShimError(err);
          e.extra = { deliveries: w.reports };
          reject(e);
        } else {
          resolve({ deliveries: w.reports });
        }
      },
      fail: (err) => w.finish(Object.assign({}, err)),
    };
    ls.receiveWaiter = w;
    cyc.waiters.add(w);
    t = setTimeout(() => {
      w.finish({ kind: 'timeout', description: w.reports.length + ' of ' + count + ' messages within ' + cmd.timeout_ms + ' ms' });
    }, cmd.timeout_ms);
    pumpReceive(ls);
  });
}

// ---------------------------------------------------------------------------------------------
// drain

// Receiver.add_credit(n) then Receiver.drain_credit() (rhea writes both in one flow, on its next tick), answered at
// the receiver's 'receiver_drained' event. A message that arrives meanwhile stays in the link's buffer, untouched.
// rhea never sets receiver.drain back to false: its later flows on the link keep drain set, as rhea writes them.
async function cmdDrain(cmd) {
  const ls = requireLink(cmd.link);
  if (ls.role !== 'receiver') throw clientError('link ' + cmd.link + ' is not a receiver');
  if (ls.receiveWaiter) throw clientError('a receive is in progress on ' + cmd.link);
  if (ls.drainWaiter) throw clientError('a drain is already in progress on ' + cmd.link);
  if (!Number.isInteger(cmd.credit) || cmd.credit < 1) throw clientError('credit must be an integer of 1 or more, got ' + JSON.stringify(cmd.credit));
  const receiver = ls.link;
  const cyc = cycle;
  return await new Promise((resolve, reject) => {
    let t = null;
    const w = {
      session: receiver.session,
      finish: (err, result) => {
        clearTimeout(t);
        ls.drainWaiter = null;
        cyc.waiters.delete(w);
        if (err) reject(new ShimError(err)); else resolve(result);
      },
      drained: () => w.finish(null, { api: 'receiver_drained', credit: nullable(receiver.credit) }),
      fail: (err) => w.finish(Object.assign({}, err)),
    };
    ls.drainWaiter = w;
    cyc.waiters.add(w);
    t = setTimeout(() => {
      w.finish({ kind: 'timeout', description: "no 'receiver_drained' event within " + cmd.timeout_ms + ' ms (receiver.credit ' + receiver.credit + ')' });
    }, cmd.timeout_ms);
    try {
      receiver.add_credit(cmd.credit);
      receiver.drain_credit();
    } catch (e) {
      w.finish(describeThrown(e));
    }
  });
}

// ---------------------------------------------------------------------------------------------
// detach, close

async function cmdDetach(cmd) {
  if (!cycle || !cycle.connection) throw clientError('no connection: send connect first');
  const cyc = cycle;
  const ls = cyc.links.get(cmd.link);
  if (!ls) throw clientError('unknown link ' + JSON.stringify(cmd.link));
  const link = ls.link;
  if (link.remote.detach) {
    // the remote detached it before (reported then) and rhea answered with its own detach
    cyc.links.delete(cmd.link);
    return {};
  }
  if (ls.dead) {
    // its session or connection ended: there is no link left to detach
    cyc.links.delete(cmd.link);
    throw new ShimError(Object.assign({}, ls.dead));
  }
  await new Promise((resolve, reject) => {
    let t = null;
    const waiter = { session: link.session, fail: (err) => done(new ShimError(err)) };
    const done = (err) => {
      clearTimeout(t);
      ls.awaiting = null;
      cyc.waiters.delete(waiter);
      if (err) reject(err); else resolve();
    };
    t = timer(cmd.timeout_ms, () => 'no remote detach within ' + cmd.timeout_ms + ' ms', (e) => done(e));
    cyc.waiters.add(waiter);
    ls.awaiting = { kind: 'close', resolve: () => done(), reject: (e) => done(e) };
    if (cmd.close) link.close(); else link.detach();
  }).finally(() => cyc.links.delete(cmd.link));
  return {};
}

async function cmdClose(cmd) {
  if (!cycle || !cycle.connection) throw clientError('no connection: send connect first');
  const cyc = cycle;
  const conn = cyc.connection;
  const pending = cyc.pending || {};
  cyc.closing = true;
  try {
    // nothing to close when the cycle is over, the socket is gone or the peer closed it first
    // (rhea then answered with its own close)
    if (cyc.closed || !conn.socket_ready || conn.remote.close || conn.is_closed()) return {};
    await new Promise((resolve, reject) => {
      const t = timer(cmd.timeout_ms, () => 'no remote close within ' + cmd.timeout_ms + ' ms', (e) => { pending.close = null; reject(e); });
      pending.close = {
        resolve: () => { clearTimeout(t); pending.close = null; cyc.closed = true; resolve(); },
        reject: (e) => { clearTimeout(t); pending.close = null; cyc.closed = true; reject(e); },
      };
      conn.close();
    });
    return {};
  } finally {
    cyc.closed = true;
    for (const ls of cyc.links.values()) failLinkWaiters(ls, { kind: 'client', description: 'connection closed' });
    cyc.links.clear();
    // give rhea a moment to end the socket itself, then make sure it is gone
    setTimeout(() => { try { if (conn.socket) conn.socket.destroy(); } catch (ignored) { /* nothing */ } }, 200);
    if (cycle === cyc) cycle = null;
  }
}

function cmdHello() {
  return { client: 'rhea', library: 'rhea', version: libraryVersion(), language: 'javascript' };
}

const HANDLERS = {
  hello: cmdHello,
  connect: cmdConnect,
  attach: cmdAttach,
  send: cmdSend,
  receive: cmdReceive,
  drain: cmdDrain,
  detach: cmdDetach,
  close: cmdClose,
};

async function handle(cmd) {
  const id = cmd && cmd.id !== undefined ? cmd.id : null;
  try {
    const h = HANDLERS[cmd.op];
    if (!h) throw clientError('unknown op ' + JSON.stringify(cmd.op));
    if (typeof cmd.timeout_ms !== 'number') cmd.timeout_ms = DEFAULT_TIMEOUT_MS;
    const result = await h(cmd);
    emit(Object.assign({ id: id, ok: true }, result));
  } catch (e) {
    const error = describeThrown(e);
    const reply = { id: id, ok: false, error: error };
    if (e && e.extra) Object.assign(reply, e.extra);
    emit(reply);
  }
}

// ---------------------------------------------------------------------------------------------
// main loop: one command at a time, in order.

let chain = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin, terminal: false });
rl.on('line', (line) => {
  if (!line.trim()) return;
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (e) {
    chain = chain.then(() => emit({ id: null, ok: false, error: { kind: 'client', description: 'not JSON: ' + e.message } }));
    return;
  }
  chain = chain.then(() => handle(cmd));
});
rl.on('close', () => {
  chain.then(async () => {
    if (cycle && cycle.connection && !cycle.closed) {
      try {
        await cmdClose({ timeout_ms: 2000 });
      } catch (e) {
        diag('close at end of input:', describeThrown(e).description);
      }
    }
    process.exit(0);
  });
});

process.on('uncaughtException', (e) => {
  diag('uncaught exception:', e && e.stack ? e.stack : e);
  if (cycle) cycle.lost({ kind: 'client', description: (e && e.name) + ': ' + (e && e.message) }, null);
});
process.on('unhandledRejection', (e) => {
  diag('unhandled rejection:', e && e.stack ? e.stack : e);
});
