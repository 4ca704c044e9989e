// Bundles the bridge and its Python dependencies into bundled/libs/py<X.Y>/ for one VS Code target,
// as microsoft/vscode-python-tools-extension-template does (`pip install -t` at packaging time).
// Some dependencies (pydantic-core, orjson) are compiled per Python version, so there is one folder
// per supported version; the extension puts the one matching the user's Python on PYTHONPATH.
//
//   node scripts/bundle-python.mjs --target linux-x64      (env PI_BRIDGE_PYTHON: the pip to use)
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = resolve(fileURLToPath(new URL('.', import.meta.url)), '..');
const repo = resolve(here, '../..');

// Python versions the bundle serves: the bridge needs >= 3.11.
export const PYTHON_VERSIONS = ['3.11', '3.12', '3.13', '3.14'];

// pip --platform tags per VS Code target (`vsce package --target`).
const PLATFORMS = {
  'linux-x64': ['manylinux2014_x86_64', 'manylinux_2_17_x86_64', 'manylinux_2_28_x86_64'],
  'linux-arm64': ['manylinux2014_aarch64', 'manylinux_2_17_aarch64', 'manylinux_2_28_aarch64'],
  'darwin-x64': ['macosx_10_12_x86_64', 'macosx_10_13_x86_64', 'macosx_10_15_x86_64'],
  'darwin-arm64': ['macosx_11_0_arm64'],
};

function arg(name) {
  const index = process.argv.indexOf(name);
  return index >= 0 ? process.argv[index + 1] : undefined;
}

const target = arg('--target') ?? 'linux-x64';
const platforms = PLATFORMS[target];
if (!platforms) {
  console.error(`unknown target ${target}; known: ${Object.keys(PLATFORMS).join(', ')}`);
  process.exit(2);
}
const python = process.env.PI_BRIDGE_PYTHON ?? 'python3';
const pip = (args) =>
  execFileSync(python, ['-m', 'pip', '--disable-pip-version-check', ...args], { stdio: ['ignore', 'inherit', 'inherit'] });

const libs = join(here, 'bundled/libs');
rmSync(join(here, 'bundled'), { recursive: true, force: true });
const wheels = mkdtempSync(join(tmpdir(), 'pi-bridge-wheel-'));
try {
  // Built from a copy of the package's sources: a build writes its egg-info and build/ beside
  // them, never into the checkout that the tests running beside CI's build import.
  const sources = join(wheels, 'sources');
  mkdirSync(sources, { recursive: true });
  for (const name of ['pyproject.toml', 'README.md']) cpSync(join(repo, name), join(sources, name));
  cpSync(join(repo, 'bridge'), join(sources, 'bridge'), {
    recursive: true,
    filter: (path) => !path.includes('__pycache__'),
  });
  pip(['wheel', '--quiet', '--no-deps', '--wheel-dir', wheels, sources]);
  const wheel = readdirSync(wheels).find((name) => name.endsWith('.whl'));
  for (const version of PYTHON_VERSIONS) {
    const dir = join(libs, `py${version}`);
    mkdirSync(dir, { recursive: true });
    pip([
      'install', '--quiet', '--no-compile', '--target', dir,
      '--implementation', 'cp', '--python-version', version, '--only-binary=:all:',
      ...platforms.flatMap((tag) => ['--platform', tag]),
      join(wheels, wheel),
    ]);
    // Console scripts point at the packaging machine's Python; the extension runs `-m bridge`.
    rmSync(join(dir, 'bin'), { recursive: true, force: true });
  }
  writeFileSync(
    join(libs, 'manifest.json'),
    `${JSON.stringify({ target, wheel, pythonVersions: PYTHON_VERSIONS }, null, 2)}\n`,
  );
  console.log(`bundled ${wheel} for ${target}, Python ${PYTHON_VERSIONS.join(', ')}`);
} finally {
  rmSync(wheels, { recursive: true, force: true });
}
