'use strict';
// A small nnhal client for Node.js with grpc-js, built from the .proto files alone.
//
// Everything it relies on is written in the protocol reference (docs/protocol.md):
// the session stream, the metadata keys, the gRPC -> HAL status table, the deadline
// margin, the message limits and the keepalive policy. It is the example for users of
// JavaScript/TypeScript; demo.js drives it end to end.

const path = require('path');
const crypto = require('crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// The repository's protos/ folder (override with NNHAL_PROTOS for a copy elsewhere).
const PROTO_ROOT = process.env.NNHAL_PROTOS || path.resolve(__dirname, '..', '..', 'protos');
const PROTO_FILES = ['service.proto', 'devices.proto', 'streamed.proto'].map((f) => `nnhal/proto/${f}`);

// docs/protocol.md, "Deadlines": the gRPC deadline is the HAL deadline plus this margin,
// so the server's own MISSED_DEADLINE_* answer arrives before the transport gives up.
const DEADLINE_MARGIN_MS = 2000;
// A call without a HAL deadline still gets a finite gRPC deadline.
const DEFAULT_CALL_TIMEOUT_MS = 600000;
// docs/protocol.md, "Message limits": the server takes messages up to 1 GiB; grpc-js
// refuses more than 4 MiB by default, so raise it to match.
const MAX_MESSAGE_BYTES = 1 << 30;
// docs/protocol.md, "Keepalive": the server accepts a ping every 200 ms or more; a ping
// every second, failing after one more second, notices a frozen server within ~2 s.
const CHANNEL_OPTIONS = {
  'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
  'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
  'grpc.keepalive_time_ms': 1000,
  'grpc.keepalive_timeout_ms': 1000,
  'grpc.keepalive_permit_without_calls': 1,
};

// The protocol version this client speaks (docs/protocol.md, "Handshake"): 2 reads omitted
// priority / preference as NNAPI's defaults and answers session refusals in-band.
const PROTOCOL_VERSION = 2;

function loadProtos(root = PROTO_ROOT) {
  const definition = protoLoader.loadSync(PROTO_FILES, {
    includeDirs: [root],
    keepCase: true, // field names as in the .proto files
    longs: String, // uint64 (timings, nanoseconds) as decimal strings
    enums: String, // enum values by name: 'NONE', 'INVALID_ARGUMENT', ...
    defaults: true, // omitted scalars read as their zero
    oneofs: true, // a oneof's set member is named by its oneof field (event: 'launch' | 'notify')
  });
  return grpc.loadPackageDefinition(definition).nnhal.v1;
}

// A HAL error: an ErrorStatus name and a message (the in-band status, or a transport
// failure mapped by halStatusOf).
class HalError extends Error {
  constructor(status, message) {
    super(`${status}: ${message}`);
    this.status = status;
    this.detail = message;
  }
}

// docs/protocol.md, "gRPC status -> HAL status": the one table from transport failures to
// HAL statuses. `hadDeadline`: the call carried a HAL deadline.
function halStatusOf(err, hadDeadline) {
  switch (err.code) {
    case grpc.status.UNAVAILABLE:
    case grpc.status.CANCELLED:
      return 'DEAD_OBJECT';
    case grpc.status.DEADLINE_EXCEEDED:
      return hadDeadline ? 'MISSED_DEADLINE_TRANSIENT' : 'DEAD_OBJECT';
    case grpc.status.RESOURCE_EXHAUSTED:
      return /larger than max/i.test(err.details || '') ? 'RESOURCE_EXHAUSTED_PERSISTENT' : 'RESOURCE_EXHAUSTED_TRANSIENT';
    default:
      return 'GENERAL_FAILURE';
  }
}

function transportError(err, hadDeadline, what) {
  const status = halStatusOf(err, hadDeadline);
  const name = Object.keys(grpc.status).find((k) => grpc.status[k] === err.code) || String(err.code);
  const e = new HalError(status, `${what}: transport ${name}: ${err.details || err.message}`);
  e.grpcCode = err.code;
  return e;
}

// The in-band status of a HAL method's response: throws its HalError unless NONE.
function checked(response, what) {
  if (response.status && response.status !== 'NONE') {
    throw new HalError(response.status, `${what}: ${response.message}`);
  }
  return response;
}

// A Deadline message for `timeoutMs` (undefined: no deadline), and the gRPC deadline covering it.
function deadlines(timeoutMs) {
  if (timeoutMs === undefined) {
    return { hal: { has_deadline: false }, grpc: new Date(Date.now() + DEFAULT_CALL_TIMEOUT_MS) };
  }
  const remainingNs = BigInt(Math.max(0, Math.round(timeoutMs))) * 1000000n;
  return {
    hal: { has_deadline: true, remaining_ns: remainingNs.toString() },
    grpc: new Date(Date.now() + timeoutMs + DEADLINE_MARGIN_MS),
  };
}

let requestCounter = 0;
const requestPrefix = crypto.randomBytes(4).toString('hex');

// One session on an nnhal server: a channel, the session stream (the client's liveness
// signal: the server releases every object of the session when it ends) and the HAL calls.
class Session {
  // Open a session; resolves once the server's first SessionEvent named it.
  // options: clientName, device (the `nnhal-device` metadata), credentials, connectTimeoutMs.
  static open(address, options = {}) {
    const session = new Session(address, options);
    return session._opened;
  }

  constructor(address, { clientName = 'nnhal-js', device, credentials, connectTimeoutMs = 10000, protos } = {}) {
    const v1 = protos || loadProtos();
    const creds = credentials || grpc.credentials.createInsecure();
    this.address = address;
    this.device = device;
    // One channel shared by every stub (grpc-js shares it when the options are equal).
    this.stubs = {
      device: new v1.Device(address, creds, CHANNEL_OPTIONS),
      preparedModel: new v1.PreparedModel(address, creds, CHANNEL_OPTIONS),
      buffer: new v1.Buffer(address, creds, CHANNEL_OPTIONS),
      devices: new v1.DeviceManager(address, creds, CHANNEL_OPTIONS),
    };
    this.id = '';
    this.event = null; // the first SessionEvent: device, feature level, protocol version, capabilities
    this.closed = false;
    this.death = null; // {status, message, at} once the session stream failed
    this._deathWaiters = [];
    this._opened = new Promise((resolve, reject) => {
      const stream = this.stubs.device.openSession(
        { client_name: clientName, protocol_version: PROTOCOL_VERSION },
        this.metadata(),
        { deadline: new Date(Date.now() + 365 * 24 * 3600 * 1000) },
      );
      this._stream = stream;
      const timer = setTimeout(() => stream.cancel(), connectTimeoutMs);
      stream.on('data', (event) => {
        if (!this.id) {
          clearTimeout(timer);
          if (event.status && event.status !== 'NONE') {
            // The server refused the session in-band (session cap, unknown device,
            // an unsupported protocol version, a drain): the stream ends next.
            reject(new HalError(event.status, `openSession: ${event.message}`));
            return;
          }
          this.id = event.session;
          this.event = event;
          // 0 from a server older than the handshake: protocol 1 (no closeSession, no capabilities).
          this.protocolVersion = event.protocol_version || 1;
          resolve(this);
        }
        if (event.draining) this.draining = true;
      });
      stream.on('error', (err) => {
        clearTimeout(timer);
        if (!this.id) {
          reject(transportError(err, false, 'openSession'));
          return;
        }
        if (this.closed) return;
        this.death = { ...transportError(err, false, 'session stream'), at: process.hrtime.bigint() };
        for (const waiter of this._deathWaiters.splice(0)) waiter(this.death);
      });
      stream.on('end', () => clearTimeout(timer));
    });
  }

  // The metadata of a new call: a fresh request id, and the device when one was named.
  metadata() {
    const md = new grpc.Metadata();
    md.set('x-request-id', `${requestPrefix}-${(++requestCounter).toString(16)}`);
    if (this.device) md.set('nnhal-device', this.device);
    return md;
  }

  // Resolves with {status, detail, at} when the session stream fails (the server died).
  died() {
    if (this.death) return Promise.resolve(this.death);
    return new Promise((resolve) => this._deathWaiters.push(resolve));
  }

  // A unary RPC: resolves with the response, rejects with a HalError (transport failures mapped).
  unary(stub, method, request, { timeoutMs, hadDeadline = false, check = true } = {}) {
    const deadline = new Date(Date.now() + (timeoutMs === undefined ? DEFAULT_CALL_TIMEOUT_MS : timeoutMs));
    return new Promise((resolve, reject) => {
      stub[method](request, this.metadata(), { deadline }, (err, response) => {
        if (err) return reject(transportError(err, hadDeadline, method));
        try {
          resolve(check ? checked(response, method) : response);
        } catch (e) {
          reject(e);
        }
      });
    });
  }

  // A launch / notify server stream (prepareModel*, execute_1_3): resolves with
  // {launch, notify} once the stream ended, each as the server sent it.
  launchThenNotify(stub, method, request, grpcDeadline, hadDeadline) {
    return new Promise((resolve, reject) => {
      const got = {};
      const call = stub[method](request, this.metadata(), { deadline: grpcDeadline });
      call.on('data', (event) => {
        got[event.event] = event[event.event];
      });
      call.on('error', (err) => reject(transportError(err, hadDeadline, method)));
      call.on('end', () => {
        if (!got.launch || !got.notify) {
          reject(new HalError('GENERAL_FAILURE', `${method}: the stream ended without its launch and notify`));
        } else {
          resolve(got);
        }
      });
    });
  }

  // -- IDevice ----------------------------------------------------------------------
  query(method) {
    return this.unary(this.stubs.device, method, { session: this.id });
  }

  status() {
    return this.unary(this.stubs.device, 'getStatus', { session: this.id }, { check: false });
  }

  listDevices() {
    return this.unary(this.stubs.devices, 'listDevices', {}, { check: false });
  }

  // prepareModel_1_3; priority and preference may be left out (MEDIUM, FAST_SINGLE_ANSWER).
  prepareModel(model, { priority, preference, timeoutMs } = {}) {
    const d = deadlines(timeoutMs);
    const request = { session: this.id, model, deadline: d.hal };
    if (priority !== undefined) request.priority = priority;
    if (preference !== undefined) request.preference = preference;
    return this.launchThenNotify(this.stubs.device, 'prepareModel_1_3', request, d.grpc, timeoutMs !== undefined);
  }

  // -- IPreparedModel -----------------------------------------------------------------
  executeSynchronously(preparedModel, request, { timeoutMs } = {}) {
    const d = deadlines(timeoutMs);
    const message = { session: this.id, prepared_model: preparedModel, request, deadline: d.hal };
    return this.unary(this.stubs.preparedModel, 'executeSynchronously_1_3', message, {
      timeoutMs: d.grpc.getTime() - Date.now(),
      hadDeadline: timeoutMs !== undefined,
      check: false, // the result's status is the HAL's answer: the caller reads it
    });
  }

  execute(preparedModel, request, { timeoutMs } = {}) {
    const d = deadlines(timeoutMs);
    const message = { session: this.id, prepared_model: preparedModel, request, deadline: d.hal };
    return this.launchThenNotify(this.stubs.preparedModel, 'execute_1_3', message, d.grpc, timeoutMs !== undefined);
  }

  release(preparedModel) {
    return this.unary(this.stubs.preparedModel, 'release', { session: this.id, handle: preparedModel });
  }

  // End the session: the server releases every object it created. closeSession (protocol 2)
  // confirms it; on an older server cancelling the stream alone does the same.
  async close() {
    if (this.closed) return;
    if (this.protocolVersion >= 2 && !this.death) {
      await this.unary(this.stubs.device, 'closeSession', { session: this.id }, { timeoutMs: 5000 });
    }
    this.closed = true;
    this._stream.cancel();
    for (const stub of Object.values(this.stubs)) stub.close();
  }
}

// -- building requests -------------------------------------------------------------------
// Float32 values as the little-endian bytes the HAL pools hold.
function float32Bytes(values) {
  return Buffer.from(new Float32Array(values).buffer);
}

function float32Values(bytes) {
  const b = Buffer.from(bytes);
  return Array.from(new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4));
}

module.exports = {
  DEADLINE_MARGIN_MS,
  HalError,
  MAX_MESSAGE_BYTES,
  PROTOCOL_VERSION,
  Session,
  float32Bytes,
  float32Values,
  halStatusOf,
  loadProtos,
};
