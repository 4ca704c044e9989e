/** Entry point of the pi-bridge extension: activate and deactivate only; see controller.ts. */
import type * as vscode from 'vscode';
import { Controller } from './controller';

let controller: Controller | undefined;

export function activate(context: vscode.ExtensionContext): void {
  controller = new Controller(context);
}

export async function deactivate(): Promise<void> {
  await controller?.dispose();
  controller = undefined;
}
