/** Unit tests of how the bundled bridge is launched: the Python chosen, its libraries, the doctor's argv. */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { bridgeLaunch, bundledLaunch, doctorArgs, readSettings } from '../src/bridge/config';
import { choosePython, noPythonMessage } from '../src/bridge/python';

const libs = mkdtempSync(join(tmpdir(), 'pi-bridge-libs-'));
for (const version of ['3.11', '3.12']) {
  mkdirSync(join(libs, `py${version}`));
}
after(() => rmSync(libs, { recursive: true, force: true }));

const versions: Record<string, [number, number] | undefined> = {
  '/ext/python3.12': [3, 12],
  '/ext/python3.9': [3, 9],
  '/ext/python3.15': [3, 15],
  python3: [3, 11],
};
const probe = (command: string): Promise<[number, number] | undefined> => Promise.resolve(versions[command]);

test("the Python extension's interpreter is used when it is >= 3.11 and has bundled libraries", async () => {
  const choice = await choosePython(
    [{ command: '/ext/python3.12', source: 'the Python extension' }, { command: 'python3', source: 'PATH' }],
    libs,
    probe,
  );
  assert.equal(choice.chosen?.command, '/ext/python3.12');
  assert.equal(choice.chosen?.libs, join(libs, 'py3.12'));
  assert.deepEqual(choice.rejected, []);
});

test('python3 on PATH is used when the Python extension has a too old or unbundled Python', async () => {
  for (const selected of ['/ext/python3.9', '/ext/python3.15']) {
    const choice = await choosePython(
      [{ command: selected, source: 'the Python extension' }, { command: 'python3', source: 'PATH' }],
      libs,
      probe,
    );
    assert.equal(choice.chosen?.command, 'python3');
    assert.deepEqual(choice.chosen?.version, [3, 11]);
    assert.equal(choice.rejected.length, 1);
  }
});

test('without a usable Python the message names each candidate and the setting that overrides', async () => {
  const choice = await choosePython(
    [{ command: '/ext/python3.9', source: 'the Python extension' }, { command: 'missing', source: 'PATH' }],
    libs,
    probe,
  );
  assert.equal(choice.chosen, undefined);
  const message = noPythonMessage(choice.rejected);
  assert.match(message, /needs Python 3\.11 or newer/);
  assert.match(message, /\/ext\/python3\.9 \(the Python extension\) is Python 3\.9/);
  assert.match(message, /missing \(PATH\) is not found or does not run/);
  assert.match(message, /piBridge\.bridge\.command/);
});

test('the bundled bridge runs as python -m bridge with only its libraries added to the path', () => {
  const settings = readSettings((key) => ({ 'bridge.args': ['--scripted-model'], 'bridge.env': { PATH: '/mine' } })[key]);
  assert.equal(settings.bridgeCommand, '');
  const launch = bundledLaunch(settings, { PATH: '/bin', PYTHONPATH: '/elsewhere' }, '/usr/bin/python3', '/ext/bundled/libs/py3.11');
  assert.equal(launch.command, '/usr/bin/python3');
  assert.deepEqual(launch.args, ['-m', 'bridge', '--scripted-model']);
  assert.equal(launch.env['PYTHONPATH'], '/ext/bundled/libs/py3.11');
  assert.equal(launch.env['PYTHONSAFEPATH'], '1');
  assert.equal(launch.env['PATH'], '/mine');
  assert.deepEqual(doctorArgs(launch), ['-m', 'bridge', '--scripted-model', 'doctor', '--json']);
});

test('piBridge.bridge.command overrides the bundled bridge, and the doctor gets the same pi command', () => {
  const settings = readSettings(
    (key) => ({ 'bridge.command': 'pi-bridge', 'bridge.args': ['serve'], 'pi.command': ["/opt/pi's", '--x'] })[key],
  );
  const launch = bridgeLaunch(settings, {});
  assert.equal(launch.command, 'pi-bridge');
  assert.deepEqual(doctorArgs(launch), ['--pi-command', "'/opt/pi'\\''s' '--x'", 'doctor', '--json']);
});
