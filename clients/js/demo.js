#!/usr/bin/env node
'use strict';
// The nnhal JavaScript example, end to end against a running server:
//
//   node demo.js 127.0.0.1:50051 [--device NAME] [--kill-server PID]
//
// opens a session, queries the device, prepares ADD of two float32[4] tensors, executes
// it synchronously (executeSynchronously_1_3) and asynchronously (execute_1_3: launch,
// then notify), gets INVALID_ARGUMENT in-band for an invalid model and an unknown prepared
// model, shows the omitted priority read as MEDIUM and closes the session (closeSession). With --kill-server (tests) it then SIGKILLs that server
// process during an execution and reports how the session stream and the execution fail.
// Prints one line per step; exits 0 when every step answered as the protocol says, else 1.

const { Session, HalError, float32Bytes, float32Values } = require('./nnhal');

const OVERALL_TIMEOUT_MS = 60000;

function parseArgs(argv) {
  const args = { address: '127.0.0.1:50051', device: undefined, killPid: undefined };
  const rest = argv.slice(2);
  for (let i = 0; i < rest.length; i++) {
    if (rest[i] === '--device') args.device = rest[++i];
    else if (rest[i] === '--kill-server') args.killPid = Number(rest[++i]);
    else if (rest[i].startsWith('--')) throw new Error(`unknown option ${rest[i]}`);
    else args.address = rest[i];
  }
  return args;
}

// ADD(a, b, activation NONE) over float32[4]: operand indexes 0, 1 are inputs, 3 the output.
function addModel() {
  const tensor = (lifetime, consumers) => ({
    type: 3, // TENSOR_FLOAT32
    dimensions: [4],
    number_of_consumers: consumers,
    lifetime, // OperandLifeTime: 1 SUBGRAPH_INPUT, 2 SUBGRAPH_OUTPUT
  });
  return {
    main: {
      operands: [
        tensor(1, 1),
        tensor(1, 1),
        // The fused activation: an INT32 scalar copied into operand_values (CONSTANT_COPY).
        { type: 1, number_of_consumers: 1, lifetime: 3, location: { pool_index: 0, offset: 0, length: 4 } },
        tensor(2, 0),
      ],
      operations: [{ type: 0 /* ADD */, inputs: [0, 1, 2], outputs: [3] }],
      input_indexes: [0, 1],
      output_indexes: [3],
    },
    operand_values: Buffer.alloc(4), // activation 0: NONE
  };
}

// A request: both inputs in pool 0 (inline bytes), the output in pool 1 (16 bytes to allocate).
function addRequest(a, b) {
  return {
    inputs: [{ location: { pool_index: 0, offset: 0, length: 16 } }, { location: { pool_index: 0, offset: 16, length: 16 } }],
    outputs: [{ location: { pool_index: 1, offset: 0, length: 16 } }],
    pools: [{ inline: { data: Buffer.concat([float32Bytes(a), float32Bytes(b)]) } }, { inline: { size: 16 } }],
  };
}

// The output values of a result: an inline output pool comes back named by its request pool index.
function outputOf(result) {
  const pool = result.output_pools.find((p) => p.pool_index === 1);
  if (!pool) throw new Error(`no output pool 1 in the result (${JSON.stringify(result.output_pools)})`);
  return float32Values(pool.data);
}

function expect(condition, what) {
  if (!condition) throw new Error(`unexpected: ${what}`);
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function main() {
  const args = parseArgs(process.argv);
  const session = await Session.open(args.address, { clientName: 'nnhal-js-demo', device: args.device });
  const ev = session.event;
  console.log(`session: ${session.id.slice(0, 8)}… on device "${ev.device_name}" (feature level ${ev.feature_level})`);
  const offers = ev.capabilities || {};
  console.log(
    `handshake: protocol ${session.protocolVersion} (server speaks ${ev.min_protocol_version}..${ev.max_protocol_version}); ` +
      `offers: streamed execution ${offers.streamed_execution}, fast path ${offers.fast_path}, ` +
      `closeSession ${offers.close_session}, devices [${offers.devices}]`,
  );
  expect(session.protocolVersion === 2, `protocol version ${session.protocolVersion}`);

  const version = (await session.query('getVersionString')).version;
  const type = (await session.query('getType')).type;
  const caps = (await session.query('getCapabilities_1_3')).capabilities;
  const status = (await session.status()).status;
  const devices = (await session.listDevices()).devices.map((d) => d.name);
  console.log(
    `device: version "${version}", type ${type}, status ${status}, ` +
      `${caps.operand_performance.length} operand performance entries; server devices: ${devices.join(', ')}`,
  );
  expect(status === 'AVAILABLE', `status ${status}`);

  // Priority and preference left out: the server applies NNAPI's defaults.
  const prepared = await session.prepareModel(addModel(), { timeoutMs: 10000 });
  console.log(`prepareModel_1_3: launch ${prepared.launch.status}, notify ${prepared.notify.status}`);
  expect(prepared.notify.status === 'NONE', `prepare: ${prepared.notify.message}`);
  const handle = prepared.notify.prepared_model.handle;

  const a = [1, 2, 3, 4];
  const b = [10, 20, 30, 40];
  const sync = await session.executeSynchronously(handle, addRequest(a, b), { timeoutMs: 10000 });
  const syncOut = outputOf(sync);
  console.log(`executeSynchronously_1_3: ${sync.status}, [${a}] + [${b}] = [${syncOut}]`);
  expect(sync.status === 'NONE' && syncOut.join() === '11,22,33,44', `sync result ${sync.status} ${syncOut}`);

  const run = await session.execute(handle, addRequest([0.5, 0.5, 0.5, 0.5], b));
  const asyncOut = outputOf(run.notify);
  console.log(`execute_1_3: launch ${run.launch.status}, notify ${run.notify.status}, [${asyncOut}]`);
  expect(run.launch.status === 'NONE' && run.notify.status === 'NONE', 'async statuses');
  expect(asyncOut.join() === '10.5,20.5,30.5,40.5', `async result ${asyncOut}`);

  // An operation naming an operand that does not exist: refused in-band, launch and notify alike.
  const bad = addModel();
  bad.main.operations[0].inputs = [0, 1, 9];
  const refused = await session.prepareModel(bad);
  console.log(
    `invalid model: launch ${refused.launch.status}, notify ${refused.notify.status} (${refused.launch.message})`,
  );
  expect(refused.launch.status === 'INVALID_ARGUMENT' && refused.notify.status === 'INVALID_ARGUMENT', 'invalid model');

  const unknown = await session.executeSynchronously('no-such-model', addRequest(a, b));
  console.log(`unknown prepared model: ${unknown.status} (${unknown.message})`);
  expect(unknown.status === 'INVALID_ARGUMENT', `unknown model: ${unknown.status}`);

  if (args.killPid === undefined) {
    const before = (await session.unary(session.stubs.device, 'getStats', { session: session.id }, { check: false }))
      .prepared_models_by_priority;
    console.log(`prepared models by priority (priority omitted: NNAPI's default): ${JSON.stringify(before)}`);
    expect(before.MEDIUM >= 1, 'an omitted priority read as MEDIUM');
    await session.close();
    console.log('closeSession: NONE; the server released the session');
    return;
  }

  // An execution held 5 s by an injected delay (a server started with --enable-fault-injection),
  // in flight when the server is killed.
  await session.unary(session.stubs.device, 'setFaults', { session: session.id, execute_delay_ms: 5000 });
  const inFlight = session.execute(handle, addRequest(a, b)).then(
    (got) => ({ status: got.notify.status }),
    (err) => err,
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  const killedAt = process.hrtime.bigint();
  process.kill(args.killPid, 'SIGKILL');
  const death = await withTimeout(session.died(), 10000, 'the session stream after SIGKILL');
  const ms = Number(death.at - killedAt) / 1e6;
  console.log(`server SIGKILLed: session stream failed after ${ms.toFixed(1)} ms: ${death.status} (${death.detail})`);
  expect(death.status === 'DEAD_OBJECT', `death status ${death.status}`);
  const failed = await withTimeout(inFlight, 10000, 'the execution in flight');
  console.log(`execution in flight: ${failed.status}`);
  expect(failed instanceof HalError && failed.status === 'DEAD_OBJECT', `in-flight execution: ${failed.status}`);
  await session.close();
}

const overall = setTimeout(() => {
  console.error(`FAILED: the demo did not finish within ${OVERALL_TIMEOUT_MS} ms`);
  process.exit(1);
}, OVERALL_TIMEOUT_MS);

main().then(
  () => {
    clearTimeout(overall);
    console.log('ok');
    process.exit(0);
  },
  (err) => {
    clearTimeout(overall);
    console.error(`FAILED: ${err.message}`);
    process.exit(1);
  },
);
