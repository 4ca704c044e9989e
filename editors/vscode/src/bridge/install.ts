/**
 * Getting the bridge running without set-up: resolve how to launch it (piBridge.bridge.command if
 * set, else the bundled bridge on a chosen Python), and after each start ask the bridge's doctor
 * whether pi is there, offering to install it when it is missing or too old.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import * as vscode from 'vscode';
import { bridgeLaunch, bundledLaunch, doctorArgs, type BridgeLaunch, type Settings } from './config';
import { choosePython, noPythonMessage, pythonVersion, type PythonCandidate } from './python';

/** Thrown when no Python can run the bundled bridge; the user has been told. */
export class NoPythonError extends Error {}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath?: (resource?: vscode.Uri) => { path: string } | undefined;
    resolveEnvironment?: (env: { path: string }) => Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
  };
}

/** The interpreter selected in the Python extension (ms-python.python), if it is installed. */
async function pythonExtensionInterpreter(log: vscode.LogOutputChannel): Promise<string | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
    const active = api.environments?.getActiveEnvironmentPath?.(resource);
    const resolved = active ? await api.environments?.resolveEnvironment?.(active) : undefined;
    return resolved?.executable?.uri?.fsPath ?? active?.path;
  } catch (err) {
    log.warn(`the Python extension did not say which interpreter it uses: ${String(err)}`);
    return undefined;
  }
}

/** How to start the bridge now; throws NoPythonError (after telling the user) when it cannot. */
export async function resolveBridgeLaunch(
  settings: Settings,
  extensionPath: string,
  log: vscode.LogOutputChannel,
): Promise<BridgeLaunch> {
  if (settings.bridgeCommand) {
    return bridgeLaunch(settings, process.env);
  }
  const env = { ...process.env, ...settings.bridgeEnv };
  const candidates: PythonCandidate[] = [];
  const selected = await pythonExtensionInterpreter(log);
  if (selected) {
    candidates.push({ command: selected, source: 'the Python extension' });
  }
  candidates.push({ command: 'python3', source: 'PATH' });
  const choice = await choosePython(candidates, join(extensionPath, 'bundled', 'libs'), (command) =>
    pythonVersion(command, env),
  );
  for (const reason of choice.rejected) {
    log.info(`not using ${reason}`);
  }
  if (!choice.chosen) {
    const message = noPythonMessage(choice.rejected);
    log.error(message);
    void vscode.window.showErrorMessage(message, 'Open Settings').then((pick) =>
      pick ? vscode.commands.executeCommand('workbench.action.openSettings', 'piBridge.bridge.command') : undefined,
    );
    throw new NoPythonError(message);
  }
  const { command, source, version, libs } = choice.chosen;
  log.info(`bundled bridge on Python ${version.join('.')}: ${command} (from ${source})`);
  return bundledLaunch(settings, process.env, command, libs);
}

export interface DoctorCheck {
  name: string;
  label: string;
  status: 'ok' | 'warn' | 'fail' | 'skip';
  summary: string;
  fix: string | null;
  data: Record<string, unknown>;
}

/** The bridge's `doctor --json` report, or undefined when the bridge could not answer. */
export function runDoctor(launch: BridgeLaunch): Promise<{ ok: boolean; checks: DoctorCheck[] } | undefined> {
  return new Promise((resolve) => {
    execFile(launch.command, doctorArgs(launch), { env: launch.env, timeout: 60_000 }, (_err, stdout) => {
      try {
        resolve(JSON.parse(stdout) as { ok: boolean; checks: DoctorCheck[] });
      } catch {
        resolve(undefined);
      }
    });
  });
}

/**
 * Ask the doctor, log its report, and when pi is missing or too old offer **Install pi** (a
 * terminal running the npm command, so the user sees it) and **Open Docs**.
 */
export async function checkInstallation(launch: BridgeLaunch, log: vscode.LogOutputChannel): Promise<void> {
  const report = await runDoctor(launch);
  if (!report) {
    log.warn(`\`${[launch.command, ...doctorArgs(launch)].join(' ')}\` gave no report`);
    return;
  }
  for (const check of report.checks) {
    const line = `doctor: ${check.status} ${check.label}: ${check.summary}${check.fix ? ` (fix: ${check.fix})` : ''}`;
    if (check.status === 'fail') {
      log.error(line);
    } else if (check.status === 'warn') {
      log.warn(line);
    } else {
      log.info(line);
    }
  }
  const pi = report.checks.find((check) => check.name === 'pi');
  if (pi?.status !== 'fail') {
    return;
  }
  const missing = pi.data['path'] === undefined;
  const message = missing
    ? `pi is not installed: ${pi.summary}. pi-bridge runs the pi coding agent (Node >= 22.19).`
    : `pi is too old or does not start: ${pi.summary}.`;
  // The npm command and the docs come from the bridge (bridge/agents/pi/doctor.py), not a copy here.
  const install = typeof pi.data['installCommand'] === 'string' ? pi.data['installCommand'] : undefined;
  const docs = typeof pi.data['docsUrl'] === 'string' ? pi.data['docsUrl'] : undefined;
  const choice = await vscode.window.showWarningMessage(
    message,
    ...(install ? ['Install pi'] : []),
    ...(docs ? ['Open Docs'] : []),
  );
  if (choice === 'Install pi' && install) {
    const terminal = vscode.window.createTerminal({ name: 'Install pi' });
    terminal.show();
    terminal.sendText(install);
  } else if (choice === 'Open Docs' && docs) {
    await vscode.env.openExternal(vscode.Uri.parse(docs));
  }
}
