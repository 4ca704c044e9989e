/**
 * Which Python runs the bundled bridge: the interpreter chosen in the Python extension if there is
 * one, else `python3` on PATH; it must be >= 3.11 and have a bundled library folder. No `vscode`
 * import: install.ts supplies the Python extension's choice.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const MIN_PYTHON: readonly [number, number] = [3, 11];

export interface PythonCandidate {
  /** An executable path, or a bare name looked up on PATH. */
  command: string;
  /** Where it came from, for messages: "the Python extension", "PATH". */
  source: string;
}

export interface ChosenPython extends PythonCandidate {
  version: [number, number];
  /** bundled/libs/py<X.Y>: the bridge and its dependencies for this Python. */
  libs: string;
}

export interface PythonChoice {
  chosen?: ChosenPython;
  /** Why each candidate before the chosen one (or every candidate) was not used. */
  rejected: string[];
}

/** The major.minor of `command` (`python -c`), or undefined when it does not run. */
export function pythonVersion(command: string, env: NodeJS.ProcessEnv): Promise<[number, number] | undefined> {
  return new Promise((resolve) => {
    execFile(
      command,
      ['-c', 'import sys; print(*sys.version_info[:2])'],
      { env, timeout: 15_000 },
      (err, stdout) => {
        const match = /^(\d+) (\d+)/.exec(stdout.trim());
        resolve(err || !match ? undefined : [Number(match[1]), Number(match[2])]);
      },
    );
  });
}

export function newEnough(version: readonly [number, number]): boolean {
  return version[0] > MIN_PYTHON[0] || (version[0] === MIN_PYTHON[0] && version[1] >= MIN_PYTHON[1]);
}

/**
 * The first candidate that runs, is >= 3.11 and has bundled libraries under `bundledLibs`.
 * `probe` returns a candidate's version (pythonVersion in the editor; a stub in unit tests).
 */
export async function choosePython(
  candidates: PythonCandidate[],
  bundledLibs: string,
  probe: (command: string) => Promise<[number, number] | undefined>,
): Promise<PythonChoice> {
  const rejected: string[] = [];
  for (const candidate of candidates) {
    const version = await probe(candidate.command);
    const name = `${candidate.command} (${candidate.source})`;
    if (!version) {
      rejected.push(`${name} is not found or does not run`);
      continue;
    }
    const text = version.join('.');
    if (!newEnough(version)) {
      rejected.push(`${name} is Python ${text}`);
      continue;
    }
    const libs = join(bundledLibs, `py${text}`);
    if (!existsSync(libs)) {
      rejected.push(`${name} is Python ${text}, for which this extension bundles no libraries`);
      continue;
    }
    return { chosen: { ...candidate, version, libs }, rejected };
  }
  return { rejected };
}

/** The message shown when no candidate fits. */
export function noPythonMessage(rejected: string[]): string {
  const found = rejected.length > 0 ? rejected.join('; ') : 'no python3 on PATH';
  return (
    `pi-bridge needs Python ${MIN_PYTHON.join('.')} or newer to run its bundled bridge, and found none (${found}). ` +
    'Install Python 3.11+ (or select one in the Python extension), or set piBridge.bridge.command.'
  );
}
